package paymentsim

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestScaledLatency(t *testing.T) {
	t.Parallel()
	const base = 200 * time.Millisecond
	tests := []struct {
		n, capacity int
		want        time.Duration
	}{
		{1, 16, base},
		{16, 16, base},
		{20, 16, 250 * time.Millisecond},
		{32, 16, 400 * time.Millisecond},
		{160, 16, 2 * time.Second},
		{1000, 0, base}, // unlimited
	}
	for _, tt := range tests {
		if got := scaledLatency(base, tt.n, tt.capacity); got != tt.want {
			t.Errorf("scaledLatency(%v, n=%d, capacity=%d) = %v, want %v", base, tt.n, tt.capacity, got, tt.want)
		}
	}
}

// chargeKeys numbers the keys chargeTogether uses, so no charge is a replay.
var chargeKeys atomic.Int64

// chargeTogether sends n charges under new keys at the same instant and returns how long each
// took, shortest first.
func chargeTogether(t *testing.T, sim *Simulator, n int) []time.Duration {
	t.Helper()
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			began := time.Now()
			createIntent(t, sim, "k"+strconv.FormatInt(chargeKeys.Add(1), 10), intentForm)
			took[i] = time.Since(began)
		})
	}
	wg.Wait()
	slices.Sort(took)
	return took
}

func ms(values ...int) []time.Duration {
	d := make([]time.Duration, len(values))
	for i, v := range values {
		d[i] = time.Duration(v) * time.Millisecond
	}
	return d
}

// Beyond its capacity the provider slows every charge in proportion to the charges it is
// processing: latency = base × n/N, fixed as each charge starts.
func TestCapacityModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		fault    string
		n        int
		want     []time.Duration
	}{
		{"within capacity", 4, "", 4, ms(100, 100, 100, 100)},
		{"beyond capacity", 4, "", 8, ms(100, 100, 100, 100, 125, 150, 175, 200)},
		{"unlimited", 0, "", 8, ms(100, 100, 100, 100, 100, 100, 100, 100)},
		{"capacity fault on an unlimited provider", 0, `{"capacity":2}`, 4, ms(100, 100, 150, 200)},
		{"the smaller capacity wins", 3, `{"capacity":2}`, 4, ms(100, 100, 150, 200)},
		{"fault latency is added unscaled", 1, `{"latency":"1s"}`, 2, ms(1100, 1200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				sim := New(Config{Latency: 100 * time.Millisecond, Capacity: tt.capacity, Random: func() float64 { return 0.5 }})
				if tt.fault != "" {
					addFault(t, sim, tt.fault)
				}
				got := chargeTogether(t, sim, tt.n)
				if !slices.Equal(got, tt.want) {
					t.Errorf("latencies: got %v, want %v", got, tt.want)
				}
				// Every charge that was slowed started above capacity; the
				// stats count those.
				over := 0
				for _, d := range got {
					if d%time.Second > 100*time.Millisecond {
						over++
					}
				}
				st := sim.Stats()
				if st.ChargesProcessed != tt.n || st.ChargesOverCapacity != over {
					t.Errorf("stats: %d processed, %d over capacity; want %d, %d", st.ChargesProcessed, st.ChargesOverCapacity, tt.n, over)
				}
			})
		})
	}
}

// Load that has drained leaves no trace: the model counts only the charges processing now.
func TestCapacityRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := New(Config{Latency: 100 * time.Millisecond, Capacity: 2, Random: func() float64 { return 0.5 }})
		chargeTogether(t, sim, 6)
		if got, want := chargeTogether(t, sim, 2), ms(100, 100); !slices.Equal(got, want) {
			t.Errorf("latencies after the burst: got %v, want %v", got, want)
		}
	})
}
