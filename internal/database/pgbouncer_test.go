package database_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// bouncerBundle is checkout's database set up the way docs/operations.md's PgBouncer
// section says: the schema migrated over a direct connection, the statement
// timeout set on the database, and the application's pools going through a
// PgBouncer in transaction mode with the URL's query exec mode.
type bouncerBundle struct {
	direct  *pgxpool.Pool // bypasses the bouncer: migrations, test assertions
	bouncer *dbtest.PgBouncer
	url     string // DATABASE_URL through the bouncer
}

// execModes are the values of default_query_exec_mode that docs/operations.md names
// for PgBouncer 1.18 in transaction mode, which has no prepared statements:
// exec (recommended) and simple_protocol. pgx's default, cache_statement,
// fails there ("prepared statement … does not exist"), and so does
// describe_exec ("unnamed prepared statement does not exist"): it prepares
// and executes in two round trips, which the bouncer may send to two
// server sessions.
var execModes = []string{"exec", "simple_protocol"}

func setupBouncer(t *testing.T, execMode string, cfg dbtest.PgBouncerConfig) *bouncerBundle {
	t.Helper()
	ctx := context.Background()
	directURL := dbtest.URL(t)
	direct, err := database.Open(ctx, database.Config{URL: directURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	// checkout migrate connects directly: it holds a session advisory lock.
	// (The test database comes migrated from the template; this is the
	// step as a deployment runs it.)
	if err := database.Migrate(ctx, direct, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("migrate directly: %v", err)
	}
	// The operator's step instead of DB_STATEMENT_TIMEOUT (docs/operations.md uses
	// ALTER ROLE; the test scopes it to its own database).
	name := strings.TrimPrefix(mustParse(t, directURL).Path, "/")
	if _, err := direct.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET statement_timeout = '1s'"); err != nil {
		t.Fatal(err)
	}

	b := &bouncerBundle{direct: direct, bouncer: dbtest.StartPgBouncer(t, directURL, cfg)}
	u := mustParse(t, b.bouncer.URL())
	q := u.Query()
	q.Set("default_query_exec_mode", execMode)
	u.RawQuery = q.Encode()
	b.url = u.String()
	return b
}

// pool opens a pool through the bouncer as checkout and the worker do, with
// DB_STATEMENT_TIMEOUT=0: nothing PgBouncer would reject at start-up.
func (b *bouncerBundle) pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := database.Open(context.Background(), database.Config{URL: b.url, MaxConns: 10, ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// jobErrors lists the first error of every River job that failed, except
// those of kind except.
func (b *bouncerBundle) jobErrors(t *testing.T, except string) []string {
	t.Helper()
	var failed []string
	if err := b.direct.QueryRow(context.Background(), `
		SELECT coalesce(array_agg(DISTINCT kind || ': ' || (errors[1]->>'error')), '{}')
		FROM river_job WHERE kind <> $1 AND errors IS NOT NULL`, except).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	return failed
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestCheckoutAndWorkerThroughPgBouncer runs the checkout flow and the
// River worker, each with its own pool as in production, through a real
// PgBouncer in transaction mode: a paid order and its replay, orders
// deferred while the provider is down, and the worker charging them once it
// is back. The bouncer has fewer server connections than the pools have
// clients, so statements of one client land on several server sessions.
func TestCheckoutAndWorkerThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range execModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			checkoutAndWorkerThroughPgBouncer(t, mode)
		})
	}
}

func checkoutAndWorkerThroughPgBouncer(t *testing.T, execMode string) {
	b := setupBouncer(t, execMode, dbtest.PgBouncerConfig{})
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	sim := simtest.Start(t, 0)

	// Checkout: the API's protected client and an insert-only River client.
	apiDB := b.pool(t)
	client, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, log)
	if err != nil {
		t.Fatal(err)
	}
	inserter, err := river.NewClient(riverpgxv5.New(apiDB), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc := order.NewService(apiDB, orderpayment.New(client), inserter, order.DefaultConfig(), log)

	// An order whose checkout process died mid-request: pending, with no
	// job, placed before the worker starts. The worker's sweep gives it one.
	crashed := uuid.New()
	if _, err := b.direct.Exec(ctx, `
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
		                    created_at, updated_at, last_attempt_at)
		VALUES ($1, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":1,"unit_price":100}]', 100,
		        now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour')`, crashed); err != nil {
		t.Fatal(err)
	}

	// The worker, as cmd/worker wires it.
	workerDB := b.pool(t)
	wcfg := resilience.DefaultConfig()
	wcfg.MaxAttempts = 1
	workerClient, err := payment.NewProtectedClient("payment-worker", payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"}, wcfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(workerDB, orderpayment.New(workerClient), nil, worker.Config{
		Concurrency: 4, Charge: worker.DefaultChargePolicy(), Schedule: worker.DefaultSchedule(),
		RescueStuckJobsAfter: time.Minute, KeyRetention: idempotency.MinRetention, PruneInterval: time.Hour,
		ShutdownTimeout: 5 * time.Second, PollOnly: true,
	}, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	// A paid order, and its replay.
	paid, err := svc.Place(ctx, "k-paid", bouncerOrder("pm_card_visa"))
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	if paid.Order.Status != order.StatusPaid {
		t.Fatalf("order = %s, want paid", paid.Order.Status)
	}
	again, err := svc.Place(ctx, "k-paid", bouncerOrder("pm_card_visa"))
	if err != nil || !again.Replayed || fmt.Sprint(again.Order) != fmt.Sprint(paid.Order) {
		t.Fatalf("replay = %+v, %v; want the first answer, replayed", again, err)
	}

	declined, err := svc.Place(ctx, "k-declined", bouncerOrder("pm_card_chargeDeclined"))
	if err != nil || declined.Order.Status != order.StatusPaymentFailed {
		t.Fatalf("declined order = %+v, %v; want payment_failed", declined.Order, err)
	}

	// Provider down: orders placed at once are deferred, each with its job.
	sim.Fault(t, `{"down":true}`)
	const deferred = 8
	ids := make([]string, deferred)
	var wg sync.WaitGroup
	errs := make([]error, deferred)
	for i := range deferred {
		wg.Go(func() {
			p, err := svc.Place(ctx, fmt.Sprintf("k-down-%d", i), bouncerOrder("pm_card_visa"))
			switch {
			case err != nil:
				errs[i] = err
			case p.Order.Status != order.StatusPendingPayment:
				errs[i] = fmt.Errorf("order %s, want pending_payment", p.Order.Status)
			default:
				ids[i] = p.Order.ID.String()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("place while the provider is down: %v", err)
	}
	sim.Heal(t)
	ids = append(ids, crashed.String())

	// The worker charges every deferred order once the provider is back,
	// and the crashed one.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var paidCount int
		if err := b.direct.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id::text = ANY($1) AND status = 'paid'`, ids).Scan(&paidCount); err != nil {
			t.Fatal(err)
		}
		if paidCount == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deferred and crashed orders paid after 30 s; failed jobs: %q",
				paidCount, len(ids), b.jobErrors(t, "any"))
		}
		time.Sleep(100 * time.Millisecond) // River works in the background
	}
	// GET /orders/{id} and the worker's backlog gauge read through it too.
	if o, err := order.Get(ctx, apiDB, paid.Order.ID); err != nil || o.Status != order.StatusPaid {
		t.Errorf("get paid order = %s, %v", o.Status, err)
	}
	backlog, err := order.Backlog(ctx, workerDB)
	if err != nil {
		t.Errorf("backlog: %v", err)
	}
	for _, e := range backlog {
		if e.Count != 0 {
			t.Errorf("backlog %s = %d, want 0", e.Status, e.Count)
		}
	}
	if got, want := sim.Stats(t).TotalCharges, len(ids)+1; got != want {
		t.Errorf("provider charges = %d, want %d: one per order", got, want)
	}
	// Housekeeping (sweeps, pruning keys) ran through the bouncer too,
	// without an error. A charge may have failed once if the worker tried
	// before the provider was healed.
	if failed := b.jobErrors(t, "charge_order"); len(failed) > 0 {
		t.Errorf("housekeeping jobs failed through the bouncer: %q", failed)
	}
	// A NOTIFY that reaches a server connection no client holds means
	// someone ran LISTEN through the bouncer (River without PollOnly): in
	// transaction mode the listening session goes back to the pool, and
	// PgBouncer drops its notifications with this warning.
	if strings.Contains(b.bouncer.Log(), "when not linked") {
		t.Errorf("PgBouncer got a notification for no client: something LISTENs through it (River's PollOnly off?)\n%s", b.bouncer.Log())
	}
}

// TestStatementTimeoutThroughPgBouncer: behind the bouncer the timeout is
// the database's (or role's) setting, and it holds: a statement running
// longer is cancelled, and the error counts as the database being
// unavailable (a 503, not a 500).
func TestStatementTimeoutThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := setupBouncer(t, execModes[0], dbtest.PgBouncerConfig{})
	pool := b.pool(t)
	ctx := context.Background()
	var setting string
	if err := pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "1s" {
		t.Errorf("statement_timeout through the bouncer = %s, want the database's 1s", setting)
	}
	_, err := pool.Exec(ctx, "SELECT pg_sleep(3)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" || !database.IsUnavailable(err) {
		t.Errorf("pg_sleep(3) = %v, want statement_timeout's query_canceled (57014)", err)
	}
}

// TestStatementTimeoutStartupParameterThroughPgBouncer is why
// DB_STATEMENT_TIMEOUT must be 0 behind PgBouncer: the startup parameter
// Open sends for it fails every connection, and a bouncer told to ignore
// it drops it, so the session runs with the role's or database's setting
// whatever the process asked for.
func TestStatementTimeoutStartupParameterThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(t *testing.T, b *bouncerBundle) *pgxpool.Pool {
		pool, err := database.Open(ctx, database.Config{URL: b.url, StatementTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	t.Run("rejected", func(t *testing.T) {
		t.Parallel()
		pool := open(t, setupBouncer(t, execModes[0], dbtest.PgBouncerConfig{}))
		err := pool.Ping(ctx)
		if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
			t.Errorf("ping with statement_timeout as a startup parameter = %v, want PgBouncer's unsupported startup parameter", err)
		}
	})
	t.Run("ignored", func(t *testing.T) {
		t.Parallel()
		pool := open(t, setupBouncer(t, execModes[0], dbtest.PgBouncerConfig{IgnoreStartupParameters: []string{"statement_timeout"}}))
		var setting string
		if err := pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&setting); err != nil {
			t.Fatal(err)
		}
		if setting != "1s" {
			t.Errorf("statement_timeout = %s, want the database's 1s: PgBouncer drops the 2s sent", setting)
		}
	})
}

func bouncerOrder(paymentMethod string) order.PlaceRequest {
	return order.PlaceRequest{CustomerID: "cus_1", Currency: "USD", PaymentMethod: paymentMethod,
		Items: []order.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 1299}}}
}
