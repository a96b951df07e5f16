package experiment

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// workerMetrics serves a worker's /metrics with its payment policy's limit and slots in use,
// beside other policies' figures.
func workerMetrics(t *testing.T, limit, inUse int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "resilience_concurrency_limit{name=\"payment-worker\"} %d\nresilience_bulkhead_in_use{name=\"payment-worker\"} %d\n", limit, inUse)
		fmt.Fprintf(w, "resilience_concurrency_limit{name=\"payment\"} 99\nresilience_bulkhead_in_use{name=\"payment\"} 99\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestTheWorkersLimitsAreSummed(t *testing.T) {
	t.Parallel()
	a, b := workerMetrics(t, 5, 2), workerMetrics(t, 7, 3)
	var w recoveryWatch
	got := w.readWorkers(t.Context(), http.DefaultClient, []string{a, b}, workerPolicy)
	if got == nil || *got != (workerReading{limit: 12, slots: 5}) {
		t.Fatalf("read %+v, want limit 12 and 5 slots taken (the worker policy's, summed)", got)
	}
	if w.workerErrors != 0 {
		t.Errorf("%d errors counted on readings that succeeded", w.workerErrors)
	}

	down := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(down.Close)
	noLimit := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `resilience_concurrency_limit{name="payment"} 4`)
	}))
	t.Cleanup(noLimit.Close)
	for _, bad := range []string{down.URL, noLimit.URL} {
		if got := w.readWorkers(t.Context(), http.DefaultClient, []string{a, bad}, workerPolicy); got != nil {
			t.Errorf("%s: read %+v from a worker that exports no limit of its policy, want none", bad, *got)
		}
	}
	if w.workerErrors != 2 {
		t.Errorf("%d failed readings counted, want 2", w.workerErrors)
	}
	// A read the watch's end cut short is no failure of the worker.
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if got := w.readWorkers(ended, http.DefaultClient, []string{a}, workerPolicy); got != nil || w.workerErrors != 2 {
		t.Errorf("a read after the watch ended: read %v, %d failed readings counted; want none, still 2", got, w.workerErrors)
	}

	w.add(0, 0, 0, 0, 0, nil)
	w.add(0, 0, 0, 0, 0, &workerReading{limit: 12, slots: 5})
	w.add(0, 0, 0, 0, 0, &workerReading{limit: 10, slots: 3})
	seconds, failed, _ := w.result()
	if len(seconds) != 1 || seconds[0].WorkerLimit != 12 || seconds[0].WorkerSlots != 5 || seconds[0].WorkerReadings != 2 || failed != 2 {
		t.Errorf("seconds %+v, %d failed; want one second of two readings at the highest limit (12) and the most slots taken (5), 2 failed",
			seconds, failed)
	}
}
