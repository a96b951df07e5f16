package order_test

import (
	"context"
	"errors"
	"testing"

	"github.com/resilientcheckout/checkout/internal/order"
)

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
	bob, err := b.svc.PlaceAs(ctx, "cus_bob", "shared-key", req)
	if err != nil {
		t.Fatal(err)
	}
	if alice.Replayed || bob.Replayed || alice.Order.ID == bob.Order.ID {
		t.Fatalf("two customers, one key: got %+v and %+v, want two new orders", alice, bob)
	}
	if alice.Order.CustomerID != "cus_alice" || bob.Order.CustomerID != "cus_bob" {
		t.Errorf("customers = %q, %q; want the tokens' customers", alice.Order.CustomerID, bob.Order.CustomerID)
	}
	for _, c := range []struct {
		customer string
		want     order.Placed
	}{{"cus_alice", alice}, {"cus_bob", bob}} {
		again, err := b.svc.PlaceAs(ctx, c.customer, "shared-key", req)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Replayed || again.Order.ID != c.want.Order.ID {
			t.Errorf("replay for %s = %+v, want a replay of order %s", c.customer, again, c.want.Order.ID)
		}
	}
	// Without authentication the key is a third scope's: a new order.
	legacy, err := b.svc.Place(ctx, "shared-key", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if legacy.Replayed || legacy.Order.ID == alice.Order.ID || legacy.Order.ID == bob.Order.ID {
		t.Errorf("unauthenticated Place with the key = %+v, want a new order", legacy)
	}
	if got := b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = 'shared-key'`); got != 3 {
		t.Errorf("keys named shared-key = %d, want 3 (one per scope)", got)
	}
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
