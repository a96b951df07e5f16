package chaos

import (
	"fmt"
	"testing"

	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestChargesWalksTheWholeList: the audit's read of the provider finds every
// charge, over more than one page, by order id; a second charge of one order
// is there beside the first.
func TestChargesWalksTheWholeList(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	for i := range 150 {
		sim.Charge(t, fmt.Sprint("o", i), fmt.Sprint("k", i))
	}
	second := sim.Charge(t, "o7", "k7-again")

	charges, err := NewProvider(sim.URL).Charges(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(charges), 150; got != want {
		t.Errorf("orders charged: got %d, want %d", got, want)
	}
	if got := charges["o7"]; len(got) != 2 || got[0].ID != second {
		t.Errorf("o7's charges: got %+v, want two, the newest %s first", got, second)
	}
	if got, want := charges["o3"], (Charge{Amount: 2598, Currency: "USD", Reference: "o3"}); len(got) != 1 || got[0].Amount != want.Amount ||
		got[0].Currency != want.Currency || got[0].Reference != want.Reference || got[0].ID == "" {
		t.Errorf("o3's charges: got %+v, want one like %+v", got, want)
	}
}
