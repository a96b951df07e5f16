// Package simulator is what the two simulators of outside systems —
// internal/sim/paymentsim (the payment provider) and internal/sim/catalogsim
// (the product catalog) — have in common: the schedule of fault windows the
// admin API switches on, the admin handlers and their bearer-token guard,
// the HTTP plumbing (strict JSON bodies, the error body both protocols use),
// the Go and process metrics, the routes every simulator serves besides its
// protocol, and the run/serve skeleton of their binaries.
//
// It belongs to the simulators alone. The clients that talk to them
// (internal/payment, internal/catalog) share no code with it, nor with the
// simulators: shared protocol code would mirror a bug on both sides and hide
// it from the tests.
package simulator

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure the part of a simulator that Server holds.
type Options struct {
	// Name names the simulator in the admin API's bearer realm
	// ("paymentsim admin").
	Name string
	// AdminToken, when set, must be sent as "Authorization: Bearer <token>"
	// to the admin API.
	AdminToken string
	// MaxAdminBody bounds an admin request body.
	MaxAdminBody int64
	// Logger receives one line per fault change; nil discards.
	Logger *slog.Logger
	// Random returns a number in [0, 1) for jitter and error rates; nil
	// means math/rand, and tests inject a fixed one.
	Random func() float64
}

// Server is the part every simulator shares: its logger and randomness, its
// fault schedule, its metrics registry and its routes. A simulator adds its
// protocol with Handle and its own admin endpoints with HandleAdmin, and
// calls Routes for the endpoints they all serve.
type Server[F Fault[F]] struct {
	Logger *slog.Logger
	Random func() float64
	Faults *Schedule[F]
	// Registry is the simulator's own registry rather than the global
	// default, so several simulators (one per test) never collide. It holds
	// the Go and process collectors from the start.
	Registry *prometheus.Registry

	mux          *http.ServeMux
	admin        func(http.Handler) http.Handler
	maxAdminBody int64
}

// NewServer returns a Server with no faults and no routes.
func NewServer[F Fault[F]](o Options) *Server[F] {
	s := &Server[F]{
		Logger:       o.Logger,
		Random:       o.Random,
		Faults:       &Schedule[F]{},
		Registry:     prometheus.NewRegistry(),
		mux:          http.NewServeMux(),
		admin:        RequireToken(o.AdminToken, o.Name+" admin"),
		maxAdminBody: o.MaxAdminBody,
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.Random == nil {
		s.Random = rand.Float64
	}
	s.Registry.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server[F]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// ActiveFault returns the merge of the faults active now.
func (s *Server[F]) ActiveFault() F { return s.Faults.Active(time.Now()) }

// Handle serves a protocol endpoint, open to every client.
func (s *Server[F]) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// HandleAdmin serves an admin endpoint behind the bearer-token guard. The
// admin API lives under its own prefix, /admin/, so it can be guarded (and
// firewalled) apart from the protocol.
func (s *Server[F]) HandleAdmin(pattern string, h http.Handler) { s.mux.Handle(pattern, s.admin(h)) }

// Admin is what the shared admin endpoints need from a simulator.
type Admin struct {
	// Stats returns the body of GET /admin/stats.
	Stats func() any
	// Reset serves POST /admin/reset; Reset says in the log what it reset.
	Reset    func()
	ResetLog string
}

// Routes serves what every simulator serves besides its protocol: GET
// /health, GET /metrics, and the admin API's faults (GET, POST and DELETE
// /admin/faults), GET /admin/stats and POST /admin/reset. R is the
// simulator's body of POST /admin/faults.
func Routes[R FaultRequest[F], F Fault[F]](s *Server[F], a Admin) {
	s.Handle("GET /health", handleHealth())
	s.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	s.HandleAdmin("GET /admin/faults", s.handleListFaults())
	s.HandleAdmin("POST /admin/faults", handleAddFault[R](s))
	s.HandleAdmin("DELETE /admin/faults", s.handleClearFaults())
	s.HandleAdmin("GET /admin/stats", handleStats(a.Stats))
	s.HandleAdmin("POST /admin/reset", s.handleReset(a.Reset, a.ResetLog))
}

func handleHealth() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

// Jittered draws one request's time from latency ± jitter, uniformly, using
// random's number in [0, 1); it is never negative.
func Jittered(latency, jitter time.Duration, random func() float64) time.Duration {
	spread := time.Duration((2*random() - 1) * float64(jitter))
	return max(latency+spread, 0)
}
