package order_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

// While migration 00007 is expanded and not yet contracted, key alone stays
// unique beside (scope, key), so the previous release's pods keep working
// during a rolling update: the same key from a second customer, or without
// authentication, is refused (422) instead of making a second order, and
// never answered with the first customer's order.
func TestPlaceAsScopesTheKeyToItsCustomer(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	ctx := context.Background()
	req := placeRequest("pm_card_visa")
	req.CustomerID = "" // the token's customer is used

	alice, err := b.svc.PlaceAs(ctx, "cus_alice", "shared-key", req)
	if err != nil {
		t.Fatal(err)
	}
	if alice.Replayed || alice.Order.CustomerID != "cus_alice" {
		t.Fatalf("PlaceAs(cus_alice) = %+v, want a new order of cus_alice", alice)
	}
	bob, err := b.svc.PlaceAs(ctx, "cus_bob", "shared-key", req)
	if !errors.Is(err, order.ErrKeyReused) || bob.Order.ID != uuid.Nil {
		t.Errorf("PlaceAs(cus_bob) with cus_alice's key: order %s, err %v; want ErrKeyReused and no order", bob.Order.ID, err)
	}
	// Without authentication the key is a third scope's: refused too.
	legacy, err := b.svc.Place(ctx, "shared-key", placeRequest("pm_card_visa"))
	if !errors.Is(err, order.ErrKeyReused) || legacy.Order.ID != uuid.Nil {
		t.Errorf("unauthenticated Place with the key: order %s, err %v; want ErrKeyReused and no order", legacy.Order.ID, err)
	}
	again, err := b.svc.PlaceAs(ctx, "cus_alice", "shared-key", req)
	if err != nil || !again.Replayed || again.Order.ID != alice.Order.ID {
		t.Errorf("replay for cus_alice = %+v, %v; want a replay of order %s", again, err, alice.Order.ID)
	}
	if got := b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = 'shared-key'`); got != 1 {
		t.Errorf("keys named shared-key = %d, want 1", got)
	}
	if got := b.count(t, `SELECT count(*) FROM orders`); got != 1 {
		t.Errorf("orders = %d, want 1", got)
	}
}

// Two replicas claiming one key for one customer at the same moment: one
// may insert the key just after the other looked for it, and the other's
// insert then meets the unique index on key alone. It must learn that its
// own scope holds the key (a request in progress, or a replay), never be
// told to use a new key, which would make a second order.
func TestConcurrentClaimsOfOneKeyInOneScopeAreNotRefused(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	replicas := []*order.Service{b.svc, anotherReplica(t, b)}
	ctx := context.Background()
	for round := range 200 {
		key := fmt.Sprintf("k-%d", round)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range errs {
			wg.Go(func() {
				<-start
				_, errs[i] = replicas[i%2].PlaceAs(ctx, "cus_1", key, placeRequest("pm_card_visa"))
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil && !errors.Is(err, order.ErrKeyInUse) {
				t.Fatalf("round %d: PlaceAs = %v, want an order, a replay or ErrKeyInUse", round, err)
			}
		}
	}
	if got := b.count(t, `SELECT count(*) FROM orders`); got != 200 {
		t.Errorf("orders = %d, want 200, one per key", got)
	}
}

// anotherReplica is a second checkout process on b's database: a pool,
// claimer and payment client of its own, charging b's simulator.
func anotherReplica(t *testing.T, b *serviceBundle) *order.Service {
	t.Helper()
	db, err := pgxpool.New(context.Background(), b.db.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	log := slog.New(slog.DiscardHandler)
	client, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: b.sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, log)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return order.NewService(db, orderpayment.New(client), jobs, order.DefaultConfig(), log)
}

func TestPlaceAsRefusesAnotherCustomersName(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	req := placeRequest("pm_card_visa") // customer_id cus_1
	for _, customer := range []string{"cus_2", ""} {
		if _, err := b.svc.PlaceAs(context.Background(), customer, "k-1", req); !errors.Is(err, order.ErrOtherCustomer) {
			t.Errorf("PlaceAs(%q) of cus_1's order: err = %v, want ErrOtherCustomer", customer, err)
		}
	}
	if got := b.count(t, `SELECT count(*) FROM orders`); got != 0 {
		t.Errorf("orders = %d, want 0", got)
	}
	if _, err := b.svc.PlaceAs(context.Background(), "cus_1", "k-1", req); err != nil {
		t.Errorf("PlaceAs(cus_1) of cus_1's order: %v", err)
	}
}

func TestGetAsHidesOtherCustomersOrders(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	ctx := context.Background()
	placed, err := b.svc.PlaceAs(ctx, "cus_1", "k-1", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.GetAs(ctx, "cus_1", placed.Order.ID); err != nil {
		t.Errorf("GetAs(owner) = %v, want the order", err)
	}
	if _, err := b.svc.GetAs(ctx, "cus_2", placed.Order.ID); !errors.Is(err, order.ErrNotFound) {
		t.Errorf("GetAs(another customer) = %v, want ErrNotFound", err)
	}
}
