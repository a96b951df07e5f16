package payment_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// A charge that would go out while every slot is held for a call the
// provider never answered is preceded by a lookup: into a provider that
// still hangs only the lookup goes, and the charge is refused, not sent;
// once the provider answers the lookup, the charge follows.
func TestAChargeOverHeldCallsWaitsForALookup(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	cfg := resilience.DefaultConfig()
	cfg.MaxAttempts = 1
	cfg.LimitInitial, cfg.LimitMin, cfg.LimitMax = 1, 1, 1
	cfg.AttemptTimeout, cfg.SlowCallThreshold = 200*time.Millisecond, 150*time.Millisecond
	cfg.OpenDuration, cfg.OpenJitter = 300*time.Millisecond, 0
	p, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"}, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}

	sim.Fault(t, `{"hang":true}`)
	if _, err := p.Charge(t.Context(), order("hung")); !errors.Is(err, resilience.ErrTimeout) {
		t.Fatalf("charge into the hang: err = %v, want a timeout", err)
	}
	// The one slot is held for that charge: a charge is refused at once,
	// and one open duration after, one call may go over the slot.
	if _, err := p.Charge(t.Context(), order("refused")); !errors.Is(err, resilience.ErrBulkheadFull) {
		t.Fatalf("charge beside the held slot: err = %v, want the bulkhead full", err)
	}
	time.Sleep(cfg.OpenDuration + 50*time.Millisecond)
	_, err = p.Charge(t.Context(), order("asked"))
	if !errors.Is(err, resilience.ErrProbeFailed) || !payment.IsRefused(err) {
		t.Fatalf("charge over the held slot while the provider hangs: err = %v, want refused (ErrProbeFailed)", err)
	}
	st := sim.Stats(t)
	if st.ChargesDuringFault != 1 || st.LookupsDuringFault != 1 || st.ChargesByReference["asked"] != 0 {
		t.Errorf("during the hang: %d charges (%d for the refused order), %d lookups; want 1, 0, 1",
			st.ChargesDuringFault, st.ChargesByReference["asked"], st.LookupsDuringFault)
	}

	sim.Heal(t)
	time.Sleep(cfg.OpenDuration + 50*time.Millisecond)
	if _, err := p.Charge(t.Context(), order("paid")); err != nil {
		t.Fatalf("charge after the provider recovered: %v", err)
	}
	if got := sim.Stats(t).ChargesByReference["paid"]; got != 1 {
		t.Errorf("charges of the order sent after its lookup = %d, want 1", got)
	}
}
