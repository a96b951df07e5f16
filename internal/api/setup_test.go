package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/api"
	"github.com/resilientcheckout/checkout/internal/catalog"
	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
)

// bundle is checkout's real HTTP handler and order service on a database of
// its own, charging through the protected client over real HTTP to the
// simulator the demo runs.
type bundle struct {
	url    string        // checkout
	db     *pgxpool.Pool // direct access for assertions, not through a proxy
	appDB  *pgxpool.Pool // checkout's own pool
	sim    *paymentsim.Simulator
	simURL string
	policy *resilience.Policy
	reg    *prometheus.Registry
	// catalog and catalogURL are set when options.catalog asks for the
	// price check.
	catalog    *catalogsim.Simulator
	catalogURL string
}

// options change what setup builds; the zero value is the defaults.
type options struct {
	// logTo receives the server's logs (JSON lines); nil discards them.
	logTo io.Writer
	// resilience replaces resilience.DefaultConfig.
	resilience *resilience.Config
	// orders replaces order.DefaultConfig.
	orders *order.Config
	// catalog turns the price check on, against a catalog simulator with
	// the demo's prices, with these settings (URL filled in).
	catalog *catalog.Config
	// wrapPayer wraps the protected payer, e.g. to simulate a process that
	// dies while the provider call is in flight.
	wrapPayer func(order.Payer) order.Payer
	// proxy routes checkout's database connections through a dbtest.Proxy.
	proxy bool
}

func setup(t testing.TB, opts options) (*bundle, *dbtest.Proxy) {
	t.Helper()
	dbURL := dbtest.URL(t)
	b := &bundle{reg: prometheus.NewRegistry()}

	b.sim = paymentsim.New(paymentsim.Config{Latency: 0})
	simSrv := httptest.NewServer(b.sim)
	t.Cleanup(simSrv.Close)
	b.simURL = simSrv.URL
	// httptest.Server.Close waits for active handlers, which a hang fault
	// holds forever: end every fault first (cleanups run last-in, first-out).
	t.Cleanup(func() { b.admin(t, http.MethodDelete, "/admin/faults", "") })

	var proxy *dbtest.Proxy
	appURL := dbURL
	if opts.proxy {
		proxy = dbtest.NewProxy(t, dbURL)
		appURL = proxy.URL()
	}
	ctx := context.Background()
	pool, err := database.Open(ctx, database.Config{
		URL: appURL, MaxConns: 20, ConnectTimeout: time.Second, StatementTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	b.appDB = pool
	b.db, err = pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("open assertion pool: %v", err)
	}
	t.Cleanup(b.db.Close)

	log := slog.New(slog.DiscardHandler)
	if opts.logTo != nil {
		log = slog.New(slog.NewJSONHandler(&lockedWriter{w: opts.logTo}, nil))
	}
	metrics, err := resilience.NewMetrics(b.reg)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := resilience.DefaultConfig()
	if opts.resilience != nil {
		rcfg = *opts.resilience
	}
	b.policy, err = resilience.New("payment", rcfg, resilience.Options{Classify: payment.Classify, Metrics: metrics, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	client, err := payment.NewClient(payment.Config{BaseURL: simSrv.URL, SecretKey: "sk_test_checkout", MaxConns: rcfg.MaxConcurrency()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	var payer order.Payer = orderpayment.New(payment.NewProtected(client, b.policy, nil))
	if opts.wrapPayer != nil {
		payer = opts.wrapPayer(payer)
	}
	ocfg := order.DefaultConfig()
	if opts.orders != nil {
		ocfg = *opts.orders
	}
	apiMetrics, err := api.NewMetrics(b.reg)
	if err != nil {
		t.Fatal(err)
	}
	poolMetrics, err := httpserver.NewPoolMetrics(b.reg)
	if err != nil {
		t.Fatal(err)
	}
	apiPool, err := httpserver.NewPool("api", httpserver.DefaultAPIPool(), poolMetrics, api.PoolFull)
	if err != nil {
		t.Fatal(err)
	}
	healthPool, err := httpserver.NewPool("health", httpserver.DefaultHealthPool(), poolMetrics, api.PoolFull)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	orders := order.NewService(pool, payer, jobs, ocfg, log)
	if opts.catalog != nil {
		b.catalog = catalogsim.New(catalogsim.Config{})
		catSrv := httptest.NewServer(b.catalog)
		t.Cleanup(catSrv.Close)
		b.catalogURL = catSrv.URL
		ccfg := *opts.catalog
		ccfg.URL = catSrv.URL
		prices, err := catalog.New(ccfg, catalog.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		orders.WithPriceCheck(prices)
	}
	srv := httptest.NewServer(api.NewServer(api.Deps{
		Logger:     log,
		Registry:   b.reg,
		Metrics:    apiMetrics,
		Orders:     orders,
		Database:   func(ctx context.Context) error { return pool.Ping(ctx) },
		APIPool:    apiPool.Middleware,
		HealthPool: healthPool.Middleware,
	}))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b, proxy
}

// validBody is a well-formed, valid order: 2 × 1299 + 1 × 500 = 3098.
const validBody = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa",` +
	`"items":[{"sku":"SKU-1","quantity":2,"unit_price":1299},{"sku":"SKU-2","quantity":1,"unit_price":500}]}`

// declinedBody is validBody paid with the card the provider always declines.
var declinedBody = strings.Replace(validBody, "pm_card_visa", "pm_card_chargeDeclined", 1)

// response is an HTTP answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("%d %s", r.status, r.body)
}

// do sends a request to checkout; headers are name/value pairs.
func (b *bundle) do(t testing.TB, method, path, body string, headers ...string) response {
	t.Helper()
	return send(t, b.url, method, path, body, headers...)
}

// post places an order the way a client does.
func (b *bundle) post(t testing.TB, key, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/orders", body, "Content-Type", "application/json", "Idempotency-Key", key)
}

func send(t testing.TB, base, method, path, body string, headers ...string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: got}
}

// admin calls the simulator's admin API.
func (b *bundle) admin(t testing.TB, method, path, body string) {
	t.Helper()
	if r := send(t, b.simURL, method, path, body); r.status >= 300 {
		t.Fatalf("simulator %s %s %s: %v", method, path, body, r)
	}
}

// charges is how often the provider charged the order, once every charge
// whose client went away has been recorded.
func (b *bundle) charges(t testing.TB, orderID string) int {
	t.Helper()
	<-b.sim.Idle()
	return b.sim.Stats().ChargesByReference[orderID]
}

// count runs a SELECT count(*) query.
func (b *bundle) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// rows is how many rows the flow's tables hold.
func (b *bundle) rows(t testing.TB) (orders, keys int) {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM orders`), b.count(t, `SELECT count(*) FROM idempotency_keys`)
}

// orderStatus reads an order's status column.
func (b *bundle) orderStatus(t testing.TB, id string) string {
	t.Helper()
	var status string
	if err := b.db.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, id).Scan(&status); err != nil {
		t.Fatalf("order %s: %v", id, err)
	}
	return status
}

// chargeJob is an order's charge_order job as River stores it.
type chargeJob struct {
	state       string
	scheduledAt time.Time
}

func (b *bundle) chargeJobs(t testing.TB, orderID string) []chargeJob {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `
		SELECT state::text, scheduled_at FROM river_job
		WHERE kind = 'charge_order' AND args->>'order_id' = $1 ORDER BY id`, orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var jobs []chargeJob
	for rows.Next() {
		var j chargeJob
		if err := rows.Scan(&j.state, &j.scheduledAt); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// orderJSON is the order resource as docs/design.md, "Checkout API" fixes it.
type orderJSON struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
	Items      []struct {
		SKU       string `json:"sku"`
		Quantity  int64  `json:"quantity"`
		UnitPrice int64  `json:"unit_price"`
	} `json:"items"`
	Total         int64     `json:"total"`
	ChargeID      string    `json:"charge_id"`
	FailureReason string    `json:"failure_reason"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// decodeOrder decodes an order body strictly: a field the contract does not
// name (payment_method, say) fails the test.
func decodeOrder(t testing.TB, r response) orderJSON {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	var o orderJSON
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("order body %s: %v", r.body, err)
	}
	if _, err := uuid.Parse(o.ID); err != nil {
		t.Errorf("order id %q: %v", o.ID, err)
	}
	return o
}

// problemJSON is an RFC 9457 problem with this API's extensions.
type problemJSON struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail"`
	OrderID string `json:"order_id"`
	Errors  []struct {
		Field  string `json:"field"`
		Detail string `json:"detail"`
	} `json:"errors"`
	Prices map[string]struct {
		UnitPrice int64  `json:"unit_price"`
		Currency  string `json:"currency"`
	} `json:"prices"`
}

func decodeProblem(t testing.TB, r response) problemJSON {
	t.Helper()
	if got, want := r.header.Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("Content-Type = %q, want %q (body %s)", got, want, r.body)
	}
	var p problemJSON
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Type == "" || p.Title == "" {
		t.Errorf("problem %s: want type, title and status %d", r.body, r.status)
	}
	return p
}

var keys atomic.Int64

// newKey returns an Idempotency-Key no other request of the test run uses.
func newKey() string { return fmt.Sprintf("key-%d-%s", keys.Add(1), uuid.NewString()) }

// lockedWriter serialises the server's concurrent log writes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
