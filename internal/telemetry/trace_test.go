package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/resilientcheckout/checkout/internal/api"
	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
	"github.com/resilientcheckout/checkout/internal/telemetry"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// TestDeferredOrderTrace follows deferred orders from POST /orders to the
// worker's charge through the spans they leave: checkout and the worker are
// wired as cmd/checkout and cmd/worker wire them (same instrumentation, a
// real River worker, real Postgres, the simulator over HTTP), with an
// in-memory exporter instead of OTLP.
//
// The first order meets a provider that is down: two failed provider calls
// (and a retry event), the fallback's "payment deferred" event, the charge
// job's insert. That opens the checkout's breaker, so the second order is
// rejected without a provider call ("resilience.rejected"). Then the
// provider heals and the worker charges both: each job's span sits in a
// trace of its own, linked to the insert span of the request that deferred
// the order, with the provider call under it.
func TestDeferredOrderTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	sim := simtest.Start(t, 0)
	sim.Fault(t, `{"down":true}`)
	pool, err := database.Open(ctx, database.Config{URL: dbtest.URL(t), MaxConns: 20, Tracer: telemetry.PgxTracer(tp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs syncBuffer
	checkout := startCheckout(t, pool, sim.URL, tp, slog.New(slog.NewJSONHandler(&logs, nil)))

	first := placeOrder(t, checkout, "trace-1")
	second := placeOrder(t, checkout, "trace-2")

	sim.Heal(t)
	startWorker(t, pool, sim.URL, tp, log)

	// The worker runs the jobs once they are due (after the breaker's open
	// time); wait for both work spans to end.
	var got tracetest.SpanStubs
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = spans.GetSpans()
		if len(workSpans(got)) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's charge spans did not appear within 30 s; spans:\n%s", dump(got))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// First request: server span → db spans, provider calls, the job insert.
	req1 := serverSpan(t, got, first)
	if req1.Name != "POST /orders" {
		t.Errorf("server span named %q, want %q (the route pattern)", req1.Name, "POST /orders")
	}
	if calls := children(got, req1, "POST /v1/payment_intents"); len(calls) != 2 {
		t.Errorf("first request: %d provider call spans under the server span, want 2 (one per attempt)\n%s", len(calls), dump(got))
	}
	if dbs := dbChildren(got, req1); len(dbs) == 0 {
		t.Errorf("first request: no database spans under the server span\n%s", dump(got))
	}
	for _, e := range []string{"resilience.retry", "payment deferred"} {
		if !hasEvent(req1, e) {
			t.Errorf("first request: no %q event on the server span; events: %v", e, eventNames(req1))
		}
	}
	if want := `"trace_id":"` + req1.SpanContext.TraceID().String() + `"`; !strings.Contains(logs.String(), want) {
		t.Errorf("no request log line carries the request's trace id %s:\n%s", want, logs.String())
	}
	insert1 := onlyChild(t, got, req1, "river.insert_many")
	if len(dbChildren(got, insert1)) == 0 {
		t.Errorf("the job insert has no database span under it\n%s", dump(got))
	}

	// Second request: the breaker is open, so no provider call.
	req2 := serverSpan(t, got, second)
	if calls := children(got, req2, "POST /v1/payment_intents"); len(calls) != 0 {
		t.Errorf("second request: %d provider calls, want none (breaker open)", len(calls))
	}
	if e, ok := event(req2, "resilience.rejected"); !ok {
		t.Errorf("second request: no resilience.rejected event; events: %v", eventNames(req2))
	} else if reason := attr(e.Attributes, "resilience.reason"); reason != "breaker_open" {
		t.Errorf("resilience.rejected reason = %q, want breaker_open", reason)
	}
	insert2 := onlyChild(t, got, req2, "river.insert_many")

	// The worker: each charge is linked to the insert of its request.
	for _, insert := range []tracetest.SpanStub{insert1, insert2} {
		work := linkedWork(t, got, insert)
		if work.Parent.IsValid() {
			t.Errorf("work span has parent %s: want a trace of its own, linked", work.Parent.SpanID())
		}
		calls := children(got, work, "POST /v1/payment_intents")
		if len(calls) != 1 {
			t.Errorf("work span %s: %d provider call spans under it, want 1\n%s", work.SpanContext.SpanID(), len(calls), dump(got))
			continue
		}
		if code := attr(calls[0].Attributes, "http.response.status_code"); code != "200" {
			t.Errorf("worker's provider call answered %s, want 200", code)
		}
		if len(dbChildren(got, work)) == 0 {
			t.Errorf("work span has no database spans (loading and settling the order)")
		}
	}
}

// TestSweptOrderTrace: a pending order whose request died has no request
// context to carry; the charge job the worker's sweep inserts for it links
// to the sweep's own trace instead (as the README says).
func TestSweptOrderTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx := context.Background()
	sim := simtest.Start(t, 0)
	pool, err := database.Open(ctx, database.Config{URL: dbtest.URL(t), MaxConns: 10, Tracer: telemetry.PgxTracer(tp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// What a checkout killed mid-request leaves: a pending order, no job.
	if _, err := pool.Exec(ctx, `
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, created_at, updated_at)
		VALUES ($1, 'pending', 'cus_1', 'USD', 'pm_card_visa', $2, 2598, now() - interval '1 minute', now() - interval '1 minute')`,
		uuid.New(), []order.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 1299}}); err != nil {
		t.Fatal(err)
	}
	startWorker(t, pool, sim.URL, tp, slog.New(slog.DiscardHandler)) // the sweep runs at start

	var got tracetest.SpanStubs
	deadline := time.Now().Add(30 * time.Second)
	for got = spans.GetSpans(); len(workSpans(got)) == 0; got = spans.GetSpans() {
		if time.Now().After(deadline) {
			t.Fatalf("no charge span within 30 s; spans:\n%s", dump(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
	work := workSpans(got)[0]
	if len(work.Links) != 1 {
		t.Fatalf("charge span has %d links, want 1 (to the sweep's insert)", len(work.Links))
	}
	var insert tracetest.SpanStub
	for _, s := range got {
		if s.SpanContext.SpanID() == work.Links[0].SpanContext.SpanID() {
			insert = s
		}
	}
	if insert.Name != "river.insert_many" {
		t.Fatalf("charge span links to %q, want the sweep's river.insert_many\n%s", insert.Name, dump(got))
	}
	parent := "(none)"
	for _, s := range got {
		if insert.Parent.IsValid() && s.SpanContext.SpanID() == insert.Parent.SpanID() {
			parent = s.Name
		}
	}
	if parent != "river.work/sweep_unsettled_orders" {
		t.Errorf("the insert's parent is %s, want river.work/sweep_unsettled_orders\n%s", parent, dump(got))
	}
}

func startCheckout(t *testing.T, pool *pgxpool.Pool, simURL string, tp trace.TracerProvider, log *slog.Logger) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	rm, err := resilience.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := resilience.DefaultConfig()
	// Two failed attempts open the breaker, so the second order shows a
	// rejection.
	cfg.WindowSize, cfg.MinCalls = 2, 2
	provider, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: simURL, SecretKey: "sk_test_checkout"}, cfg, rm, log)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Plugins: []rivertype.Plugin{telemetry.RiverPlugin(tp)},
	})
	if err != nil {
		t.Fatal(err)
	}
	apiMetrics, err := api.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := httpserver.NewPoolMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	apiPool, err := httpserver.NewPool("api", httpserver.DefaultAPIPool(), pm, api.PoolFull)
	if err != nil {
		t.Fatal(err)
	}
	healthPool, err := httpserver.NewPool("health", httpserver.DefaultHealthPool(), pm, api.PoolFull)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(api.Deps{
		Logger: log, Registry: reg, Metrics: apiMetrics,
		Orders:   order.NewService(pool, orderpayment.New(provider), jobs, order.DefaultConfig(), log),
		Database: func(ctx context.Context) error { return pool.Ping(ctx) },
		APIPool:  apiPool.Middleware, HealthPool: healthPool.Middleware,
		TracerProvider: tp,
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func startWorker(t *testing.T, pool *pgxpool.Pool, simURL string, tp trace.TracerProvider, log *slog.Logger) {
	t.Helper()
	cfg := resilience.DefaultConfig()
	cfg.MaxAttempts = 1 // as in cmd/worker
	provider, err := payment.NewProtectedClient("payment-worker", payment.Config{BaseURL: simURL, SecretKey: "sk_test_checkout"}, cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(pool, orderpayment.New(provider), nil, worker.Config{
		Concurrency:          4,
		Charge:               worker.DefaultChargePolicy(),
		Schedule:             worker.DefaultSchedule(),
		RescueStuckJobsAfter: worker.ChargeJobTimeout + time.Second,
		KeyRetention:         idempotency.MinRetention,
		PruneInterval:        time.Hour,
		ShutdownTimeout:      5 * time.Second,
		Plugins:              []rivertype.Plugin{telemetry.RiverPlugin(tp)},
	}, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// placeOrder places an order that the provider cannot charge (202) and
// returns its id.
func placeOrder(t *testing.T, baseURL, key string) uuid.UUID {
	t.Helper()
	body := `{"customer_id":"cus_1","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":1299}]}`
	req, err := http.NewRequest(http.MethodPost, baseURL+"/orders", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o struct {
		ID uuid.UUID `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /orders: status %d, want 202", resp.StatusCode)
	}
	return o.ID
}

// serverSpan is the server span of the request that placed order id: the
// one whose "payment deferred" event, or whose trace, names the order.
func serverSpan(t *testing.T, spans tracetest.SpanStubs, id uuid.UUID) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.SpanKind != trace.SpanKindServer {
			continue
		}
		if e, ok := event(s, "payment deferred"); ok && attr(e.Attributes, "order.id") == id.String() {
			return s
		}
	}
	t.Fatalf("no server span with a payment deferred event for order %s\n%s", id, dump(spans))
	return tracetest.SpanStub{}
}

func workSpans(spans tracetest.SpanStubs) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "river.work/charge_order" {
			out = append(out, s)
		}
	}
	return out
}

// linkedWork is the charge job's work span linked to insert.
func linkedWork(t *testing.T, spans tracetest.SpanStubs, insert tracetest.SpanStub) tracetest.SpanStub {
	t.Helper()
	for _, s := range workSpans(spans) {
		for _, l := range s.Links {
			if l.SpanContext.TraceID() == insert.SpanContext.TraceID() && l.SpanContext.SpanID() == insert.SpanContext.SpanID() {
				return s
			}
		}
	}
	t.Fatalf("no river.work/charge_order span links to the insert span %s of trace %s\n%s",
		insert.SpanContext.SpanID(), insert.SpanContext.TraceID(), dump(spans))
	return tracetest.SpanStub{}
}

func children(spans tracetest.SpanStubs, parent tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() && s.Parent.TraceID() == parent.SpanContext.TraceID() &&
			(name == "" || s.Name == name) {
			out = append(out, s)
		}
	}
	return out
}

func onlyChild(t *testing.T, spans tracetest.SpanStubs, parent tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	c := children(spans, parent, name)
	if len(c) != 1 {
		t.Fatalf("%d %q spans under %q, want 1\n%s", len(c), name, parent.Name, dump(spans))
	}
	return c[0]
}

func dbChildren(spans tracetest.SpanStubs, parent tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range children(spans, parent, "") {
		if attr(s.Attributes, "db.system.name") == "postgresql" {
			out = append(out, s)
		}
	}
	return out
}

func event(s tracetest.SpanStub, name string) (sdktrace.Event, bool) {
	for _, e := range s.Events {
		if e.Name == name {
			return e, true
		}
	}
	return sdktrace.Event{}, false
}

func hasEvent(s tracetest.SpanStub, name string) bool {
	_, ok := event(s, name)
	return ok
}

func eventNames(s tracetest.SpanStub) []string {
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	return names
}

func attr(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// dump lists spans for a failure message: name, trace/span/parent ids, links.
func dump(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %-28s trace=%s span=%s parent=%s", s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID())
		for _, l := range s.Links {
			fmt.Fprintf(&b, " link=%s/%s", l.SpanContext.TraceID(), l.SpanContext.SpanID())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// syncBuffer collects the log lines of concurrent requests.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// With tracing off the server gets no instrumentation at all: spans nobody
// records are not worth their cost per request.
func TestHTTPHandlerWithTracingOffIsTheHandlerItself(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	if got := telemetry.HTTPHandler(mux, nil, "checkout"); got != http.Handler(mux) {
		t.Errorf("HTTPHandler(h, nil) = %T, want h itself", got)
	}
}
