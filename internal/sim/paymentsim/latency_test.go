package paymentsim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263

// The log-normal keeps its named median, its uncapped 99th percentile is median × e^(σ·z99),
// and a cap truncates the upper half without moving the median or piling draws at the cap.
func TestLogNormalQuantile(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	tests := []struct {
		name    string
		d       logNormal
		wantP99 time.Duration // 0: checked against the cap instead
	}{
		{"heavy-tailed σ 0.5", logNormal{median: 120 * ms, sigma: 0.5}, scale(120*ms, math.Exp(0.5*z99))}, // 384 ms
		{"heavy-tailed σ 0.8", logNormal{median: 120 * ms, sigma: 0.8}, scale(120*ms, math.Exp(0.8*z99))}, // 772 ms
		{"slow", logNormal{median: 600 * ms, sigma: 0.5}, scale(600*ms, math.Exp(0.5*z99))},               // 1.92 s
		{"σ 0.5 capped", logNormal{median: 120 * ms, sigma: 0.5, cap: 380 * ms}, 0},
		{"σ 0.8 capped", logNormal{median: 120 * ms, sigma: 0.8, cap: 380 * ms}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			random := rand.New(rand.NewPCG(1, 2)).Float64
			draws := make([]time.Duration, 100_000)
			for i := range draws {
				draws[i] = tt.d.quantile(random())
			}
			slices.Sort(draws)
			at := func(q float64) time.Duration { return draws[int(q*float64(len(draws)))] }

			if got, want := at(0.5), tt.d.median; !within(got, want, 0.02) {
				t.Errorf("median: got %v, want %v ± 2 %%", got, want)
			}
			if tt.wantP99 != 0 {
				if got := at(0.99); !within(got, tt.wantP99, 0.04) {
					t.Errorf("99th percentile: got %v, want %v ± 4 %%", got, tt.wantP99)
				}
				return
			}
			if got := draws[len(draws)-1]; got > tt.d.cap {
				t.Errorf("longest draw %v is over the cap %v", got, tt.d.cap)
			}
			// Clamping would put every draw the cap cuts off (1 % at σ 0.5, 7.5 % at σ 0.8)
			// at the cap; redrawing from the upper half leaves a thin tail there.
			top := 0
			for _, d := range draws {
				if d >= tt.d.cap*99/100 {
					top++
				}
			}
			if share := float64(top) / float64(len(draws)); share > 0.005 {
				t.Errorf("share of draws within 1 %% of the cap: got %.4f, want under 0.005", share)
			}
		})
	}
}

// within reports whether got is within a share tolerance of want.
func within(got, want time.Duration, tolerance float64) bool {
	return math.Abs(float64(got-want)) <= tolerance*float64(want)
}

// A charge takes the time drawn from the distribution in force, a fault's replacing the
// configured one, multiplied by every active latency_factor, plus the fault's latency.
func TestChargeLatency(t *testing.T) {
	t.Parallel()
	const u = 0.99 // every draw is the 99th percentile
	heavy := logNormal{median: 100 * time.Millisecond, sigma: 0.5}.quantile(u)
	slow := logNormal{median: 600 * time.Millisecond, sigma: 0.5}.quantile(u)
	tests := []struct {
		name   string
		sigma  float64
		faults []string
		want   time.Duration
	}{
		{"uniform, as the seed", 0, nil, 100*time.Millisecond + 98*time.Millisecond},
		{"log-normal", 0.5, nil, heavy},
		{"a fault's distribution replaces the configured one", 0, []string{`{"latency_median":"600ms","latency_sigma":0.5}`}, slow},
		{"a fault's distribution without σ is its median", 0.5, []string{`{"latency_median":"600ms"}`}, 600 * time.Millisecond},
		{"brownout", 0, []string{`{"latency_factor":5}`}, 5 * 198 * time.Millisecond},
		{"brownout of a log-normal", 0.5, []string{`{"latency_factor":5}`}, 5 * heavy},
		{"the factor leaves added latency alone", 0, []string{`{"latency_factor":5,"latency":"1s"}`}, 5*198*time.Millisecond + time.Second},
		{"overlapping factors multiply", 0, []string{`{"latency_factor":2}`, `{"latency_factor":3}`}, 6 * 198 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				sim := New(Config{Latency: 100 * time.Millisecond, Jitter: 100 * time.Millisecond,
					LatencySigma: tt.sigma, Random: func() float64 { return u }})
				for _, f := range tt.faults {
					addFault(t, sim, f)
				}
				began := time.Now()
				createIntent(t, sim, "k1", intentForm)
				if got := time.Since(began); !within(got, tt.want, 1e-6) {
					t.Errorf("charge took %v, want %v", got, tt.want)
				}
			})
		})
	}
}
