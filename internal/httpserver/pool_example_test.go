package httpserver_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/httpserver"
)

// Serve business routes and /health from separate pools, so a saturated API
// cannot delay liveness probes. Outside protected mode /health shares the
// API pool, to show what the isolation buys.
func ExamplePool_Middleware() {
	metrics, err := httpserver.NewPoolMetrics(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	protected := true // checkout: RESILIENCE_MODE=protected
	// A full pool answers with the service's own 503 (checkout: a problem
	// document with Retry-After).
	shed := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "at capacity", http.StatusServiceUnavailable)
	}
	api, err := httpserver.NewPool("api", httpserver.DefaultAPIPool(), metrics, shed)
	if err != nil {
		panic(err)
	}
	health := api
	if protected {
		if health, err = httpserver.NewPool("health", httpserver.DefaultHealthPool(), metrics, shed); err != nil {
			panic(err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("GET /health", health.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})))
	mux.Handle("POST /orders", api.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	fmt.Println(rec.Code, rec.Body)
	// Output: 200 {"status":"ok"}
}
