package throughput

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

const wrkOutput = `Running 10s test @ http://127.0.0.1:8080
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     6.10ms    3.12ms  60.00ms   80.00%
  48000 requests in 10.00s, 30.00MB read
Requests/sec:   4800.00
Transfer/sec:      3.00MB
THROUGHPUT_RESULT {"requests":48000,"duration_us":10000500,"errors":{"connect":0,"read":0,"write":0,"status":0,"timeout":0},"latency_us":{"p50":5800,"p90":9000,"p99":21000,"max":60000},"status":{"created":47990,"other_2xx":10,"not_2xx":0,"first_not_2xx":0}}
`

func TestParseWrkOutput(t *testing.T) {
	t.Parallel()
	r, err := parseWrkOutput([]byte(wrkOutput))
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 48000 || r.DurationUS != 10000500 || r.LatencyUS.P50 != 5800 || r.LatencyUS.P99 != 21000 ||
		r.Status.Created != 47990 || r.Status.Other2xx != 10 {
		t.Errorf("parsed %+v", r)
	}
	if got, want := r.Rate(), 48000/10.0005; math.Abs(got-want) > 1e-9 {
		t.Errorf("Rate = %v, want %v", got, want)
	}
	if err := r.check(); err != nil {
		t.Errorf("check: %v", err)
	}

	for name, out := range map[string]string{
		"no result line": "Running 10s test\nRequests/sec: 1\n",
		"unknown field":  `THROUGHPUT_RESULT {"requests":1,"extra":2}`,
		"not JSON":       "THROUGHPUT_RESULT {requests",
	} {
		if _, err := parseWrkOutput([]byte(out)); err == nil {
			t.Errorf("%s: parseWrkOutput succeeded, want an error", name)
		}
	}
}

func TestWrkResultCheckRefuses(t *testing.T) {
	t.Parallel()
	ok := func() wrkResult {
		var r wrkResult
		r.Requests, r.DurationUS, r.Status.Created = 100, 1e6, 100
		return r
	}
	tests := []struct {
		name   string
		modify func(*wrkResult)
		want   string // in the error
	}{
		{"a 503", func(r *wrkResult) { r.Status.Created, r.Status.Not2xx, r.Status.FirstNot2xx = 99, 1, 503 }, "1 answers were not 2xx (the first: 503)"},
		{"wrk's own status count", func(r *wrkResult) { r.Errors.Status = 2 }, "wrk counted 2 answers ≥ 400"},
		{"connect error", func(r *wrkResult) { r.Errors.Connect = 1 }, "socket errors: connect 1"},
		{"read error", func(r *wrkResult) { r.Errors.Read = 3 }, "read 3"},
		{"write error", func(r *wrkResult) { r.Errors.Write = 4 }, "write 4"},
		{"timeout", func(r *wrkResult) { r.Errors.Timeout = 5 }, "timeout 5"},
		{"nothing completed", func(r *wrkResult) { r.Requests, r.Status.Created = 0, 0 }, "no request completed"},
		{"counts disagree", func(r *wrkResult) { r.Status.Created = 90 }, "the script counted 90 answers, wrk 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := ok()
			tt.modify(&r)
			err := r.check()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := ok().check(); err != nil {
		t.Errorf("check() of a clean run = %v", err)
	}
}

// TestOrdersScript runs the real wrk with orders.lua against a server that
// records what it gets: every request a valid order with a key never seen
// before, across threads; answers counted by status in the result line.
func TestOrdersScript(t *testing.T) {
	t.Parallel()
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Fatalf("wrk is needed (apt-get install wrk): %v", err)
	}
	var (
		mu    sync.Mutex
		keys  = map[string]int{}
		other error
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o baselineOrder
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		err := dec.Decode(&o)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || r.Method != http.MethodPost || r.URL.Path != "/orders" ||
			r.Header.Get("Content-Type") != "application/json" || len(o.Items) != 2 {
			other = fmt.Errorf("unexpected request %s %s %s: %w", r.Method, r.URL, r.Header, err)
		}
		key := r.Header.Get("Idempotency-Key")
		keys[key]++
		switch {
		case len(keys)%50 == 0:
			w.WriteHeader(http.StatusAccepted)
		case len(keys) == 7:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()

	r, err := runWrk(context.Background(), loadConfig{Wrk: wrk, Threads: 2, Connections: 4, Timeout: 2 * time.Second},
		t.TempDir(), srv.URL, time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if other != nil {
		t.Fatal(other)
	}
	for k, n := range keys {
		if n > 1 || !strings.HasPrefix(k, "test-") {
			t.Fatalf("key %q sent %d times", k, n)
		}
	}
	// wrk stops with requests in flight: the server saw at least as many
	// as wrk counted.
	if r.Requests < 100 || r.Requests > int64(len(keys)) {
		t.Errorf("wrk counted %d requests, the server saw %d keys", r.Requests, len(keys))
	}
	if r.Status.Not2xx != 1 || r.Status.FirstNot2xx != 503 || r.Status.Other2xx == 0 ||
		r.Status.Created+r.Status.Other2xx+r.Status.Not2xx != r.Requests {
		t.Errorf("status counts %+v for %d requests", r.Status, r.Requests)
	}
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("check() = %v, want the 503 refused", err)
	}
	if r.LatencyUS.P50 <= 0 || r.LatencyUS.P99 < r.LatencyUS.P50 || r.CPU <= 0 {
		t.Errorf("latency %+v, wrk CPU %s", r.LatencyUS, r.CPU)
	}
}
