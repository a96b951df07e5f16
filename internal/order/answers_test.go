package order_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/catalog"
	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

// These tests hold the answers of docs/design.md, "A 503 stores nothing":
// a request that may find an order stored under its key is never told
// nothing was stored.

// storeUnanswered stores what a request that died after its first write
// leaves under key: the key, locked for lockFor from now (negative: its
// lock has expired), and its order pending, with no answer.
func (b *serviceBundle) storeUnanswered(t *testing.T, key string, lockFor time.Duration) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if _, err := b.db.Exec(context.Background(), `
		WITH k AS (INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
		           VALUES ($1, $2, $3, now() + make_interval(secs => $4)))
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total)
		VALUES ($3, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]', 2598)`,
		key, placeRequest("pm_card_visa").Fingerprint(), id, lockFor.Seconds()); err != nil {
		t.Fatal(err)
	}
	return id
}

// refusingCatalog answers every price check with err.
type refusingCatalog struct{ err error }

func (c refusingCatalog) CheckPrices(context.Context, string, []order.Item) (order.PriceCheck, error) {
	return order.PriceCheck{}, c.err
}

// TestAStoredOrderIsAnsweredWhateverTheCatalogSays: a retry whose key
// names an order stored by an earlier request — its answer lost, or still
// coming — is answered from the store even when the catalog refuses the
// prices now: the order's prices were checked when it was stored, and the
// sweep charges it whatever the catalog says. Only a new order is refused.
func TestAStoredOrderIsAnsweredWhateverTheCatalogSays(t *testing.T) {
	t.Parallel()
	catalogDown := &catalog.UnavailableError{SKUs: []string{"SKU-1"}, RetryAfter: time.Second, Err: resilience.ErrOpen}
	priceChanged := &catalog.MismatchError{Kind: catalog.ErrPriceChanged, Items: []catalog.Mismatch{{SKU: "SKU-1", UnitPrice: 1299, Current: catalog.Price{UnitPrice: 1499, Currency: "USD"}}}}
	tests := []struct {
		name    string
		catalog error
		lockFor time.Duration // of the earlier request's key; zero: no earlier request
		want    func(order.Placed, error, uuid.UUID) error
	}{
		{"catalog down, earlier request died", catalogDown, -time.Second, resumedAndPaid},
		{"catalog down, earlier request running", catalogDown, time.Hour, isErr(order.ErrKeyInUse)},
		{"price changed, earlier request died", priceChanged, -time.Second, resumedAndPaid},
		{"price changed, earlier request running", priceChanged, time.Hour, isErr(order.ErrKeyInUse)},
		{"catalog down, new order", catalogDown, 0, isErr(catalog.ErrUnavailable)},
		{"price changed, new order", priceChanged, 0, isErr(priceChanged)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupService(t, order.DefaultConfig())
			b.svc.WithPriceCheck(refusingCatalog{tt.catalog})
			var id uuid.UUID
			wantOrders := 0
			if tt.lockFor != 0 {
				id, wantOrders = b.storeUnanswered(t, "k-retry", tt.lockFor), 1
			}
			placed, err := b.svc.Place(context.Background(), "k-retry", placeRequest("pm_card_visa"))
			if bad := tt.want(placed, err, id); bad != nil {
				t.Errorf("retry = %+v, %v: %v", placed.Order, err, bad)
			}
			if got := b.count(t, `SELECT count(*) FROM orders`); got != wantOrders {
				t.Errorf("orders = %d, want %d", got, wantOrders)
			}
		})
	}
}

// resumedAndPaid: the retry took over the earlier request's order and
// charged it.
func resumedAndPaid(placed order.Placed, err error, id uuid.UUID) error {
	if err != nil || placed.Order.ID != id || placed.Order.Status != order.StatusPaid {
		return fmt.Errorf("want the stored order %s, resumed and paid", id)
	}
	return nil
}

func isErr(want error) func(order.Placed, error, uuid.UUID) error {
	return func(_ order.Placed, err error, _ uuid.UUID) error {
		if !errors.Is(err, want) {
			return fmt.Errorf("want %w", want)
		}
		return nil
	}
}

// TestAKeyFoundButNotReadIsAnUnknownOutcome: a retry finds its key stored
// by an earlier request (its first write commits nothing), and the
// database then fails to answer the key's lookup — here a lock held on the
// key keeps it waiting past DBTimeout. The order exists and the sweep will
// charge it, so the answer is an unknown outcome, retried with the same key,
// never ErrUnavailable's "nothing stored".
func TestAKeyFoundButNotReadIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	cfg := order.DefaultConfig()
	cfg.DBTimeout = 600 * time.Millisecond
	b := setupService(t, cfg)
	ctx := context.Background()
	b.storeUnanswered(t, "k-slow", -time.Second)
	hold, err := b.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT FROM idempotency_keys WHERE key = 'k-slow' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	_, err = b.svc.Place(ctx, "k-slow", placeRequest("pm_card_visa"))
	var unknown *order.OutcomeUnknownError
	if !errors.As(err, &unknown) || errors.Is(err, order.ErrUnavailable) {
		t.Fatalf("retry whose key lookup timed out = %v; want OutcomeUnknownError, not ErrUnavailable", err)
	}
	if got, want := unknown.RetryAfter, cfg.LockTTL(); got != want {
		t.Errorf("RetryAfter = %v, want the key lock's TTL %v", got, want)
	}
	if got := b.count(t, `SELECT count(*) FROM orders`); got != 1 {
		t.Errorf("orders = %d, want the earlier request's one", got)
	}
}

// stallBeforeCommit is a pgx tracer that stalls the first write between its
// pipeline and its COMMIT — as a process starved of CPU would — until the
// server has ended the session for idling in its transaction
// (idle_in_transaction_session_timeout, set by the first write).
type stallBeforeCommit struct {
	watch *pgxpool.Pool // another pool, which sees the stalled session go
	err   chan error
}

func (s *stallBeforeCommit) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL != "COMMIT" {
		return ctx
	}
	pid := conn.PgConn().PID()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var alive bool
		err := s.watch.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive)
		if err == nil && alive && time.Now().After(deadline) {
			err = errors.New("the idle session was not ended within 10 s")
		}
		if err != nil || !alive {
			s.err <- err
			return ctx
		}
	}
}

func (*stallBeforeCommit) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestAStallBeforeCommitIsUnavailable: a first write whose process stalls
// between its pipeline and its COMMIT for longer than the transaction's
// idle timeout finds its session ended by the server (FATAL 25P03) and its
// transaction rolled back. Nothing was stored, and the database did not
// serve the request in time: ErrUnavailable (503), not an unexpected error.
func TestAStallBeforeCommitIsUnavailable(t *testing.T) {
	t.Parallel()
	watch := dbtest.Pool(t)
	cfg, err := pgxpool.ParseConfig(watch.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	stall := &stallBeforeCommit{watch: watch, err: make(chan error, 1)}
	cfg.ConnConfig.Tracer = stall
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	// A bound of 1 s (a third of DBTimeout) leaves the pipeline 2 s to send
	// its COMMIT once the server has ended the session.
	ocfg := order.DefaultConfig()
	ocfg.DBTimeout = 3 * time.Second
	svc := serviceOn(t, db, unusedPayer{}, ocfg)

	_, err = svc.Place(context.Background(), "k-stall", placeRequest("pm_card_visa"))
	select {
	case stallErr := <-stall.err:
		if stallErr != nil {
			t.Fatal(stallErr)
		}
	default:
		t.Fatalf("Place = %v before sending its COMMIT", err)
	}
	// pgx reads the server's FATAL, sent before it closed the connection.
	var pgErr *pgconn.PgError
	if !errors.Is(err, order.ErrUnavailable) || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.IdleInTransactionSessionTimeout {
		t.Fatalf("first write stalled past its idle timeout = %v; want ErrUnavailable from 25P03", err)
	}
	var orders, keys int
	if err := watch.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM idempotency_keys)`).Scan(&orders, &keys); err != nil {
		t.Fatal(err)
	}
	if orders != 0 || keys != 0 {
		t.Errorf("stored %d orders, %d keys; want none", orders, keys)
	}
}

// unusedPayer is the Payer of a test that never reaches a charge.
type unusedPayer struct{ order.Payer }
