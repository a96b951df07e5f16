package experiment

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
)

// TestPaymentSimulatorTakesTheMatrixFaults speaks to the real paymentsim, which rejects
// unknown fields: the brownout, the error burst and a flapping hang the scenario matrix
// schedules are faults it accepts, at the times asked, and its stats decode.
func TestPaymentSimulatorTakesTheMatrixFaults(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(paymentsim.New(paymentsim.Config{AdminToken: "secret"}))
	t.Cleanup(srv.Close)
	sim := newSimulator("paymentsim", srv.URL, "secret")

	brownout, burst, flapping := DefaultConfig(), DefaultConfig(), DefaultConfig()
	brownout.Fault, brownout.LatencyFactor = FaultBrownout, 5
	burst.Fault, burst.ErrorRate, burst.ErrorStatus = FaultErrors, 0.5, 503
	flapping.Fault, flapping.OutageFor, flapping.Repeat, flapping.RepeatEvery = FaultHang, 2*time.Second, 5, 4*time.Second
	start := time.Now().Add(lead)
	for _, cfg := range []Config{brownout, burst, flapping} {
		if err := sim.scheduleFault(t.Context(), cfg, start); err != nil {
			t.Fatalf("schedule %s: %v", cfg.Fault, err)
		}
	}
	var view struct {
		Windows []struct {
			Fault struct {
				LatencyFactor float64 `json:"latency_factor"`
				ErrorRate     float64 `json:"error_rate"`
				ErrorStatus   int     `json:"error_status"`
				Hang          bool    `json:"hang"`
			} `json:"fault"`
			Start time.Time `json:"starts_at"`
			End   time.Time `json:"ends_at"`
		} `json:"windows"`
	}
	if err := sim.do(t.Context(), http.MethodGet, "/admin/faults", nil, &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Windows) != 7 {
		t.Fatalf("%d windows, want 7: a brownout, an error burst and five hangs", len(view.Windows))
	}
	if f := view.Windows[0].Fault; f.LatencyFactor != 5 {
		t.Errorf("brownout = %+v, want latency factor 5", f)
	}
	if f := view.Windows[1].Fault; f.ErrorRate != 0.5 || f.ErrorStatus != 503 {
		t.Errorf("error burst = %+v, want half the charges answered 503", f)
	}
	for k, w := range view.Windows[2:] {
		want := start.Add(flapping.OutageStart + time.Duration(k)*flapping.RepeatEvery)
		if late := w.Start.Sub(want); !w.Fault.Hang || late < 0 || late > time.Second || w.End.Sub(w.Start) != 2*time.Second {
			t.Errorf("hang %d = %+v, want a 2s hang from %v", k, w, want)
		}
	}
	if _, err := sim.stats(t.Context()); err != nil {
		t.Errorf("stats: %v", err)
	}
}
