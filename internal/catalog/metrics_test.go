package catalog

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestCallDurationObservedPerCall: every call checkout makes to the catalog
// is observed in catalog_call_duration_seconds under its outcome, with the
// time it took; a lookup the cache answers makes no call and adds nothing.
func TestCallDurationObservedPerCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.cat.set(func(f *fakeCatalog) { f.delay = 30 * time.Millisecond })
		b.lookup(t, "SKU-1")
		b.lookup(t, "SKU-1") // fresh in the cache: no call
		if count, sum := callDuration(t, b.svc.metrics, outcomeSuccess); count != 1 || sum != 0.03 {
			t.Errorf("success: %d calls taking %vs in all, want 1 taking 0.03s", count, sum)
		}

		b.cat.set(func(f *fakeCatalog) { f.err = errDown })
		if _, err := b.svc.Lookup(t.Context(), []string{"SKU-2"}); err == nil {
			t.Fatal("Lookup with the catalog down and nothing cached: want an error")
		}
		calls := b.cat.callCount() - 1 // the first lookup's
		if count, _ := callDuration(t, b.svc.metrics, outcomeFailure); count != uint64(calls) || calls == 0 {
			t.Errorf("failure: %d calls observed, want %d (one per attempt made)", count, calls)
		}
	})
}

// callDuration reads the count and sum of one outcome's histogram.
func callDuration(t *testing.T, m *Metrics, outcome string) (uint64, float64) {
	t.Helper()
	var out dto.Metric
	if err := m.callDuration.WithLabelValues(outcome).(prometheus.Histogram).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount(), out.GetHistogram().GetSampleSum()
}
