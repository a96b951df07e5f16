package catalogsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// do sends one request straight to the simulator's handler and returns the
// recorded answer. Tests that use it run without sockets, so inside a
// synctest bubble latency costs no real time.
func do(t *testing.T, s *Simulator, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	return doCtx(t.Context(), s, method, target, body)
}

func doCtx(ctx context.Context, s *Simulator, method, target, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func decodeAnswer(t *testing.T, rec *httptest.ResponseRecorder) pricesAnswer {
	t.Helper()
	var a pricesAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	return a
}

func TestPricesAnswersKnownAndUnknownSKUs(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	rec := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-2,SKU-404,SKU-1,SKU-2", "")
	if got, want := rec.Code, http.StatusOK; got != want {
		t.Fatalf("status: got %d, want %d (%s)", got, want, rec.Body)
	}
	a := decodeAnswer(t, rec)
	want := map[string]Price{"SKU-1": {1299, "USD"}, "SKU-2": {500, "USD"}}
	if fmt.Sprint(a.Prices) != fmt.Sprint(want) {
		t.Errorf("prices: got %v, want %v", a.Prices, want)
	}
	if got, want := fmt.Sprint(a.Unknown), "[SKU-404]"; got != want {
		t.Errorf("unknown: got %s, want %s", got, want)
	}
	if got := s.Stats(); got.Requests != 1 || got.SKUsRequested != 3 {
		t.Errorf("stats: got %+v, want 1 request for 3 distinct SKUs", got)
	}
}

func TestPricesEscapedSKU(t *testing.T) {
	t.Parallel()
	s := New(Config{Prices: map[string]Price{"Tee shirt/L&XL": {900, "EUR"}}})
	rec := do(t, s, http.MethodGet, "/v1/prices?skus=Tee+shirt%2FL%26XL", "")
	if a := decodeAnswer(t, rec); a.Prices["Tee shirt/L&XL"].UnitPrice != 900 {
		t.Errorf("got %s, want the escaped SKU priced", rec.Body)
	}
}

func TestPricesRejectsMalformedRequests(t *testing.T) {
	t.Parallel()
	many := make([]string, maxSKUs+1)
	for i := range many {
		many[i] = fmt.Sprintf("SKU-%d", i)
	}
	tests := map[string]string{
		"no skus":        "/v1/prices",
		"empty":          "/v1/prices?skus=",
		"empty element":  "/v1/prices?skus=SKU-1,,SKU-2",
		"trailing comma": "/v1/prices?skus=SKU-1,",
		"twice":          "/v1/prices?skus=SKU-1&skus=SKU-2",
		"over the limit": "/v1/prices?skus=" + strings.Join(many, ","),
	}
	s := New(Config{})
	for name, target := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got, want := do(t, s, http.MethodGet, target, "").Code, http.StatusBadRequest; got != want {
				t.Errorf("GET %s: got %d, want %d", target, got, want)
			}
		})
	}
	ok := "/v1/prices?skus=" + strings.Join(many[:maxSKUs], ",")
	if got, want := do(t, s, http.MethodGet, ok, "").Code, http.StatusOK; got != want {
		t.Errorf("%d SKUs: got %d, want %d", maxSKUs, got, want)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault string
		want  int
	}{
		{`{"down":true}`, http.StatusServiceUnavailable},
		{`{"error_rate":0.5}`, http.StatusInternalServerError}, // Random is fixed at 0.25 < 0.5
		{`{"error_rate":0.2}`, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			s := New(Config{Random: func() float64 { return 0.25 }})
			if got, want := do(t, s, http.MethodPost, "/admin/faults", tt.fault).Code, http.StatusCreated; got != want {
				t.Fatalf("POST /admin/faults: got %d, want %d", got, want)
			}
			if got := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1", "").Code; got != tt.want {
				t.Errorf("GET /v1/prices under %s: got %d, want %d", tt.fault, got, tt.want)
			}
			do(t, s, http.MethodDelete, "/admin/faults", "")
			if got, want := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1", "").Code, http.StatusOK; got != want {
				t.Errorf("after clearing: got %d, want %d", got, want)
			}
		})
	}
}

func TestFaultValidation(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	for _, body := range []string{`{}`, `{"latency":"-1s"}`, `{"error_rate":2}`, `{"hang":true}`,
		`{"down":true,"duration":"-1s"}`, `{"latency":"fast"}`, `{"down":true} {}`} {
		if got, want := do(t, s, http.MethodPost, "/admin/faults", body).Code, http.StatusBadRequest; got != want {
			t.Errorf("POST /admin/faults %s: got %d, want %d", body, got, want)
		}
	}
}

func TestLatencyAndScheduledOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Latency: 20 * time.Millisecond, Random: func() float64 { return 0.5 }})
		do(t, s, http.MethodPost, "/admin/faults", `{"latency":"2s","duration":"5s"}`)
		do(t, s, http.MethodPost, "/admin/faults", `{"down":true,"start_in":"10s","duration":"10s"}`)

		start := time.Now()
		if got, want := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1", "").Code, http.StatusOK; got != want {
			t.Fatalf("slow answer: got %d, want %d", got, want)
		}
		if got, want := time.Since(start), 2020*time.Millisecond; got != want {
			t.Errorf("answer took %v, want %v (latency plus the fault's)", got, want)
		}

		time.Sleep(10 * time.Second) // t ≈ 12 s: the outage window
		if got, want := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1", "").Code, http.StatusServiceUnavailable; got != want {
			t.Errorf("during the scheduled outage: got %d, want %d", got, want)
		}
		time.Sleep(10 * time.Second) // t ≈ 22 s: over
		if got, want := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1", "").Code, http.StatusOK; got != want {
			t.Errorf("after the outage: got %d, want %d", got, want)
		}
		if got := len(s.srv.Faults.List(time.Now())); got != 0 {
			t.Errorf("windows left: got %d, want 0", got)
		}
	})
}

func TestAbandonedRequestStopsWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{})
		do(t, s, http.MethodPost, "/admin/faults", `{"latency":"1m"}`)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		doCtx(ctx, s, http.MethodGet, "/v1/prices?skus=SKU-1", "")
		if got, want := time.Since(start), time.Second; got != want {
			t.Errorf("handler returned after %v, want %v (when its client left)", got, want)
		}
		if got, want := s.Stats().InFlight, 0; got != want {
			t.Errorf("in flight: got %d, want %d", got, want)
		}
	})
}

func TestAdminPrices(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	if got, want := do(t, s, http.MethodPut, "/admin/prices/SKU-1", `{"unit_price":1399,"currency":"USD"}`).Code, http.StatusOK; got != want {
		t.Fatalf("PUT price: got %d, want %d", got, want)
	}
	if got, want := do(t, s, http.MethodDelete, "/admin/prices/SKU-2", "").Code, http.StatusNoContent; got != want {
		t.Fatalf("DELETE price: got %d, want %d", got, want)
	}
	a := decodeAnswer(t, do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1,SKU-2", ""))
	if got, want := a.Prices["SKU-1"], (Price{1399, "USD"}); got != want {
		t.Errorf("SKU-1 after PUT: got %v, want %v", got, want)
	}
	if got, want := fmt.Sprint(a.Unknown), "[SKU-2]"; got != want {
		t.Errorf("unknown after DELETE: got %s, want %s", got, want)
	}
	for _, body := range []string{`{"unit_price":0,"currency":"USD"}`, `{"unit_price":1,"currency":"usd"}`, `{"price":1}`} {
		if got, want := do(t, s, http.MethodPut, "/admin/prices/SKU-1", body).Code, http.StatusBadRequest; got != want {
			t.Errorf("PUT %s: got %d, want %d", body, got, want)
		}
	}
	if got, want := do(t, s, http.MethodDelete, "/admin/prices/SKU-404", "").Code, http.StatusNotFound; got != want {
		t.Errorf("DELETE an unknown SKU: got %d, want %d", got, want)
	}

	do(t, s, http.MethodPost, "/admin/reset", "")
	a = decodeAnswer(t, do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1,SKU-2", ""))
	if got, want := a.Prices["SKU-1"], Seed()["SKU-1"]; got != want || len(a.Unknown) != 0 {
		t.Errorf("after reset: got %s, want the seed catalog", fmt.Sprint(a))
	}
	if got, want := s.Stats().Requests, 1; got != want {
		t.Errorf("requests after reset and one lookup: got %d, want %d", got, want)
	}
}

func TestAdminRequiresToken(t *testing.T) {
	t.Parallel()
	s := New(Config{AdminToken: "s3cret"})
	for _, target := range []string{"/admin/faults", "/admin/prices", "/admin/stats"} {
		if got, want := do(t, s, http.MethodGet, target, "").Code, http.StatusUnauthorized; got != want {
			t.Errorf("GET %s without token: got %d, want %d", target, got, want)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/admin/prices", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if got, want := rec.Code, http.StatusOK; got != want {
		t.Errorf("GET /admin/prices with token: got %d, want %d", got, want)
	}
	if got, want := do(t, s, http.MethodGet, "/v1/prices?skus=SKU-1", "").Code, http.StatusOK; got != want {
		t.Errorf("the protocol needs no token: got %d, want %d", got, want)
	}
}
