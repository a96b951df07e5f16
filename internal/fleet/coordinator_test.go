package fleet_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/fleet"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

var errUnavailable = errors.New("503 service unavailable")

// provider is the fake dependency both processes call: it fails, hangs or
// succeeds as the test says, and counts calls per process.
type provider struct {
	mu    sync.Mutex
	mode  string // "fail", "hang", "ok"
	hang  chan struct{}
	calls map[string]int
}

func newProvider() *provider {
	return &provider{mode: "ok", hang: make(chan struct{}), calls: map[string]int{}}
}

func (p *provider) set(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
}

func (p *provider) count(who string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[who]
}

func (p *provider) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

func (p *provider) call(who string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		p.mu.Lock()
		p.calls[who]++
		mode, hang := p.mode, p.hang
		p.mu.Unlock()
		switch mode {
		case "fail":
			return "", errUnavailable
		case "hang":
			select {
			case <-hang:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "ok", nil
	}
}

// process is one checkout replica or worker as the fleet sees it: a policy,
// its coordinator, and the log lines both wrote.
type process struct {
	name   string
	policy *resilience.Policy
	coord  *fleet.Coordinator
	log    *logs
	reg    *prometheus.Registry
	proxy  *dbtest.Proxy
}

func (p *process) do(prov *provider) error {
	_, err := resilience.Do(context.Background(), p.policy, prov.call(p.name))
	return err
}

func (p *process) connected(t *testing.T) float64 {
	t.Helper()
	n, err := testutil.GatherAndCount(p.reg, "resilience_fleet_connected")
	if err != nil || n != 1 {
		t.Fatalf("resilience_fleet_connected: %d series, %v", n, err)
	}
	mfs, _ := p.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "resilience_fleet_connected" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

func testConfig() resilience.Config {
	cfg := resilience.DefaultConfig()
	cfg.MaxAttempts = 1
	cfg.WindowSize, cfg.MinCalls = 4, 4
	cfg.HalfOpenProbes = 2
	cfg.OpenDuration, cfg.OpenJitter = 300*time.Millisecond, 0
	cfg.AttemptTimeout = 5 * time.Second // a hung probe is judged at the 400 ms slow threshold
	return cfg
}

// backgroundConfig is testConfig for a worker's policy
// (resilience.Config.Background).
func backgroundConfig() resilience.Config {
	cfg := testConfig()
	cfg.Background = true
	return cfg
}

// start builds a process on the database at dbURL, each behind its own
// proxy so a test can cut one off, and runs its coordinator until the
// test ends.
func start(t *testing.T, dbURL, name string, cfg resilience.Config) *process {
	t.Helper()
	return startWith(t, dbURL, name, cfg, nil)
}

// startWith is start with the coordinator's options changed by edit.
func startWith(t *testing.T, dbURL, name string, cfg resilience.Config, edit func(*fleet.Options)) *process {
	t.Helper()
	proxy := dbtest.NewProxy(t, dbURL)
	pc, err := pgxpool.ParseConfig(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := &logs{changed: make(chan struct{})}
	logger := slog.New(l).With("process", name)
	reg := prometheus.NewRegistry()
	rm, err := resilience.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	fm, err := fleet.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := resilience.New(name, cfg, resilience.Options{Metrics: rm, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.Options{
		Identity: name, Lease: time.Second, Metrics: fm, Logger: logger,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	}
	if edit != nil {
		edit(&opts)
	}
	coord, err := fleet.New(pool, "payment", policy, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = coord.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	p := &process{name: name, policy: policy, coord: coord, log: l, reg: reg, proxy: proxy}
	p.log.await(t, "fleet breaker: listening", 5*time.Second)
	return p
}

// logs is a slog.Handler keeping messages, so tests wait for an event
// instead of sleeping.
type logs struct {
	mu      sync.Mutex
	lines   []string // message plus attrs
	changed chan struct{}
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs(as []slog.Attr) slog.Handler {
	return &prefixed{l: l, attrs: as}
}
func (l *logs) WithGroup(string) slog.Handler                 { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error { return l.add(r, nil) }

func (l *logs) add(r slog.Record, extra []slog.Attr) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range extra {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

type prefixed struct {
	l     *logs
	attrs []slog.Attr
}

func (p *prefixed) Enabled(context.Context, slog.Level) bool { return true }
func (p *prefixed) WithAttrs(as []slog.Attr) slog.Handler {
	return &prefixed{l: p.l, attrs: append(append([]slog.Attr(nil), p.attrs...), as...)}
}
func (p *prefixed) WithGroup(string) slog.Handler                 { return p }
func (p *prefixed) Handle(_ context.Context, r slog.Record) error { return p.l.add(r, p.attrs) }

// wake returns a channel closed at the next line logged.
func (l *logs) wake() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// count returns how many lines contain every one of parts.
func (l *logs) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		n++
	}
	return n
}

// await blocks until a line contains every one of parts (counting lines
// already logged), or fails the test after timeout; it returns how long it
// waited.
func (l *logs) await(t *testing.T, msg string, timeout time.Duration, parts ...string) time.Duration {
	t.Helper()
	return l.awaitN(t, 1, msg, timeout, parts...)
}

func (l *logs) awaitN(t *testing.T, n int, msg string, timeout time.Duration, parts ...string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(timeout)
	for {
		ch := l.wake()
		if l.count(append([]string{msg}, parts...)...) >= n {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-deadline:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no %d× log line %q %v within %v; lines:\n%s", n, msg, parts, timeout, strings.Join(l.lines, "\n"))
		}
	}
}

// callUntilReleased calls through each of callers every 10 ms until p has
// logged its nth release of an imposed state, and returns how long it took;
// it fails the test after within.
func callUntilReleased(t *testing.T, p *process, n int, within time.Duration, prov *provider, callers ...*process) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for p.log.count("circuit breaker state released") < n {
		for _, c := range callers {
			_ = c.do(prov)
		}
		select {
		case <-deadline:
			t.Fatalf("%s: the fleet's breaker was not released within %v (release %d)", p.name, within, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return time.Since(start)
}

// trip opens p's own breaker with failing calls.
func trip(t *testing.T, p *process, prov *provider) {
	t.Helper()
	prov.set("fail")
	for range 4 {
		_ = p.do(prov)
	}
	if got := p.policy.State(); got != resilience.StateOpen {
		t.Fatalf("%s: state = %v, want open", p.name, got)
	}
}

func TestOneOpensTheOtherRejects(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	a := start(t, dbURL, "checkout-a", testConfig())
	b := start(t, dbURL, "worker-b", testConfig())

	trip(t, a, prov)
	took := b.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=fleet", "state=open")
	t.Logf("the other process refused calls %v after the first one opened", took)
	if took > 500*time.Millisecond {
		t.Errorf("the other process learned of the opening after %v, want within 500ms", took)
	}
	prov.set("ok")
	for range 20 {
		if err := b.do(prov); !errors.Is(err, resilience.ErrOpen) {
			t.Fatalf("worker-b: err = %v, want ErrOpen (the fleet's breaker)", err)
		}
	}
	if got := prov.count("worker-b"); got != 0 {
		t.Errorf("calls worker-b made while the fleet was open = %d, want 0", got)
	}
	if got := b.policy.RetryAfter(); got <= 0 || got > 300*time.Millisecond {
		t.Errorf("worker-b RetryAfter = %v, want in (0, 300ms]", got)
	}
}

func TestOneProbeForTheFleet(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	a := start(t, dbURL, "checkout-a", testConfig())
	b := start(t, dbURL, "worker-b", testConfig())
	trip(t, a, prov)
	b.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=fleet", "state=open")
	before := prov.total()

	// The provider now hangs; both processes keep calling, as live traffic
	// would, until one of them has probed for the fleet and failed.
	prov.set("hang")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	for _, p := range []*process{a, b} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				wg.Go(func() { _ = p.do(prov) })
			}
		})
	}
	verdicts := func() int {
		return a.log.count("fleet breaker: published", "event=probe_failed") + b.log.count("fleet breaker: published", "event=probe_failed")
	}
	deadline := time.After(5 * time.Second)
	for verdicts() == 0 {
		select {
		case <-a.log.wake():
		case <-b.log.wake():
		case <-deadline:
			t.Fatal("no failed probe published within 5s")
		}
	}
	probes := prov.total() - before
	byA, byB := prov.count("checkout-a")-4, prov.count("worker-b") // a's 4 tripped it
	t.Logf("probes during the fleet's half-open state: %d (checkout-a %d, worker-b %d)", probes, byA, byB)
	// The opener's own breaker re-opens at its first failed probe, so its
	// second may never be made; the other's keeps both in flight.
	if probes < 1 || probes > 2 {
		t.Errorf("provider calls while half-open = %d, want 1 or 2 (one process's HalfOpenProbes for the whole fleet)", probes)
	}
	if byA > 0 && byB > 0 {
		t.Errorf("both processes probed (checkout-a %d, worker-b %d), want one for the fleet", byA, byB)
	}

	// The provider recovers: a later probe round closes the breaker for
	// both, and calls flow from each again.
	aBefore, bBefore := prov.count("checkout-a"), prov.count("worker-b")
	prov.set("ok")
	close(prov.hang)
	for _, p := range []*process{a, b} {
		p.log.await(t, "circuit breaker state released", 10*time.Second)
	}
	deadline = time.After(5 * time.Second)
	for prov.count("checkout-a") < aBefore+20 || prov.count("worker-b") < bBefore+20 {
		select {
		case <-deadline:
			t.Fatalf("after the fleet closed: calls of checkout-a %d, worker-b %d, want 20 more each",
				prov.count("checkout-a")-aBefore, prov.count("worker-b")-bBefore)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestDatabaseCutFallsBackToTheLocalBreaker(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	a := start(t, dbURL, "checkout-a", testConfig())
	b := start(t, dbURL, "worker-b", testConfig())
	if got := a.connected(t); got != 1 {
		t.Fatalf("resilience_fleet_connected = %v, want 1", got)
	}

	a.proxy.Cut()
	a.log.await(t, "fleet breaker: database unreachable", 10*time.Second)
	if got := a.connected(t); got != 0 {
		t.Errorf("cut off: resilience_fleet_connected = %v, want 0", got)
	}
	// a's own breaker still works; b hears nothing of it and keeps calling.
	trip(t, a, prov)
	prov.set("ok")
	var refused atomic.Int64
	for range 5 {
		if err := a.do(prov); errors.Is(err, resilience.ErrOpen) {
			refused.Add(1)
		}
	}
	if refused.Load() != 5 {
		t.Errorf("a refused %d of 5 calls after its own breaker opened, want 5", refused.Load())
	}
	for range 5 {
		if err := b.do(prov); err != nil {
			t.Errorf("b: err = %v; it cannot have heard of a's breaker", err)
		}
	}

	a.proxy.Restore()
	a.log.awaitN(t, 2, "fleet breaker: listening", 10*time.Second)
	if got := a.connected(t); got != 1 {
		t.Errorf("back: resilience_fleet_connected = %v, want 1", got)
	}
}

func TestForcedOpenStopsEveryCallUntilCleared(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	a := start(t, dbURL, "checkout-a", testConfig())
	b := start(t, dbURL, "worker-b", testConfig())
	ctx := context.Background()
	op, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)

	if err := fleet.Force(ctx, op, "payment", 0, "operator"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*process{a, b} {
		p.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=forced")
		for range 20 {
			if err := p.do(prov); !errors.Is(err, resilience.ErrOpen) {
				t.Fatalf("%s forced open: err = %v, want ErrOpen", p.name, err)
			}
		}
		if got := p.policy.RetryAfter(); got <= 0 || got > 10*time.Second {
			t.Errorf("%s forced open: RetryAfter = %v, want in (0, 10s] (the forced slice)", p.name, got)
		}
	}
	if got := prov.total(); got != 0 {
		t.Errorf("provider calls while forced open = %d, want 0", got)
	}
	st, err := fleet.Statuses(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].State != "forced_open" || !st[0].UntilCleared || st[0].Source != "operator" {
		t.Errorf("status = %+v, want payment forced_open until cleared by operator", st)
	}

	if _, err := fleet.Clear(ctx, op, "payment", "operator"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*process{a, b} {
		p.log.await(t, "circuit breaker state released", 2*time.Second, "source=forced")
		if err := p.do(prov); err != nil {
			t.Errorf("%s cleared: err = %v, want the call through", p.name, err)
		}
	}
	if got := prov.total(); got != 2 {
		t.Errorf("provider calls after clearing = %d, want 2", got)
	}
}

// TestTheProcessWithTrafficProbes: a process that has had no call since
// the fleet opened lets one that has take the probe lease, so the probe is
// made at once instead of after an idle holder's lease runs out.
func TestTheProcessWithTrafficProbes(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	idle := start(t, dbURL, "worker-idle", testConfig())
	busy := start(t, dbURL, "checkout-busy", testConfig())
	trip(t, idle, prov) // then no more calls: its jobs snooze
	busy.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=fleet", "state=open")
	prov.set("ok")

	callUntilReleased(t, busy, 1, 5*time.Second, prov, busy)
	if n := idle.log.count("circuit breaker state imposed", "state=probing"); n != 0 {
		t.Errorf("the idle process took the probe lease %d times, want 0", n)
	}
	// The verdict is published by the coordinator's goroutine, which may log
	// it just after the release: wait for it rather than race it.
	busy.log.await(t, "fleet breaker: published", 2*time.Second, "event=probe_succeeded")
	if n := busy.log.count("fleet breaker: published", "event=probe_succeeded"); n != 1 {
		t.Errorf("the busy process published %d successful probes, want 1", n)
	}
}

// TestLiveTrafficProbesBeforeABackgroundProcess: a worker (a background
// policy) and a checkout both call while the fleet is open; when the open
// state ends, the checkout takes the probe lease, so live calls are not
// refused while the worker's jobs wait for their due time. Without the
// rule the worker, which opened the breaker, mostly wins the race for it.
func TestLiveTrafficProbesBeforeABackgroundProcess(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	w := start(t, dbURL, "worker-w", backgroundConfig())
	c := start(t, dbURL, "checkout-c", testConfig())
	for round := 1; round <= 4; round++ {
		trip(t, w, prov)
		c.log.awaitN(t, round, "circuit breaker state imposed", 2*time.Second, "source=fleet", "state=open")
		prov.set("ok")
		callUntilReleased(t, c, round, 5*time.Second, prov, w, c)
		w.log.awaitN(t, round, "circuit breaker state released", 2*time.Second)
		if n := w.log.count("circuit breaker state imposed", "state=probing"); n != 0 {
			t.Fatalf("round %d: the worker took the probe lease %d times, want 0", round, n)
		}
		if n := c.log.count("circuit breaker state imposed", "state=probing"); n != round {
			t.Fatalf("round %d: the checkout took the probe lease %d times, want %d", round, n, round)
		}
	}
}

// TestAHolderWhoseTrafficStoppedLetsTheLeaseGo: the process that took the
// probe lease may have no call left to probe with (its load stopped just
// after); a quarter of the lease in it gives the lease back, so a process
// with traffic probes at once instead of waiting the lease out.
func TestAHolderWhoseTrafficStoppedLetsTheLeaseGo(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	first := start(t, dbURL, "checkout-first", testConfig())
	other := start(t, dbURL, "worker-other", testConfig())
	trip(t, first, prov)
	first.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=fleet", "state=open")
	other.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=fleet", "state=open")
	prov.set("ok")
	// first's load asks once while the fleet is open, so that first takes
	// the lease when the open time ends, and then stops.
	if err := first.do(prov); !resilience.Refused(err) {
		t.Fatalf("checkout-first's call while the fleet is open: %v, want a refusal", err)
	}
	first.log.await(t, "circuit breaker state imposed", 3*time.Second, "state=probing")
	took := callUntilReleased(t, other, 1, 3*time.Second, prov, other)
	t.Logf("worker-other probed %v after checkout-first took the lease (lease 1 s)", took)
	if n := first.log.count("fleet breaker: gave the probe lease back"); n == 0 {
		t.Error("checkout-first kept a lease it had no call to probe with until it ran out")
	}
}

// TestAHolderWithAProbeOutKeepsItsLease: a checkout whose one call so far
// was a probe (of the two that close the fleet's breaker) keeps the lease
// through quiet quarters: giving it back would lose that probe's verdict.
func TestAHolderWithAProbeOutKeepsItsLease(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	c := start(t, dbURL, "checkout-c", testConfig())
	trip(t, c, prov)
	c.log.await(t, "circuit breaker state imposed", 3*time.Second, "state=probing")
	prov.set("ok")
	if err := c.do(prov); err != nil {
		t.Fatalf("the probe: %v", err)
	}
	time.Sleep(700 * time.Millisecond) // two quiet quarters of the 1 s lease
	if n := c.log.count("fleet breaker: gave the probe lease back"); n != 0 {
		t.Fatalf("the checkout gave its lease back %d times with a probe's success recorded", n)
	}
}

// TestABackgroundHolderKeepsItsLease: a worker's jobs come when they are
// due, not as a load does, so a quarter of its lease without a call is no
// sign that its traffic stopped: it keeps the lease for its probe. Giving
// it back, the worker and a checkout whose load had ended passed the lease
// between them for 2 s after the matrix's flapping row.
func TestABackgroundHolderKeepsItsLease(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	w := start(t, dbURL, "worker-w", backgroundConfig())
	trip(t, w, prov)
	w.log.await(t, "circuit breaker state imposed", 3*time.Second, "state=probing")
	time.Sleep(600 * time.Millisecond) // past a quarter of the 1 s lease, twice
	if n := w.log.count("fleet breaker: gave the probe lease back"); n != 0 {
		t.Fatalf("the worker gave its lease back %d times before its jobs were due", n)
	}
	prov.set("ok")
	callUntilReleased(t, w, 1, 5*time.Second, prov, w)
}

// TestForcedOpenHoldsWhileReadsFail: with the row locked, every read of it
// times out while the listening connection stays fine — a busy database.
// The forced state holds for longer than several slices; it ends when a
// read succeeds and says it is cleared.
func TestForcedOpenHoldsWhileReadsFail(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	prov := newProvider()
	ctx := context.Background()
	op, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	a := startWith(t, dbURL, "checkout-a", testConfig(), func(o *fleet.Options) {
		o.ForcedSlice, o.RefreshEvery, o.RetryEvery = time.Second, 300*time.Millisecond, 100*time.Millisecond
	})
	if err := fleet.Force(ctx, op, "payment", 0, "operator"); err != nil {
		t.Fatal(err)
	}
	a.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=forced")

	tx, err := op.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE breaker_states IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// Four failed reads span more than two slices of 1 s.
	a.log.awaitN(t, 4, "fleet breaker: database operation failed", 10*time.Second)
	for range 20 {
		if err := a.do(prov); !errors.Is(err, resilience.ErrOpen) {
			t.Fatalf("forced open, reads failing: err = %v, want ErrOpen", err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := prov.total(); got != 0 {
		t.Errorf("provider calls while forced open and reads failed = %d, want 0", got)
	}
	if _, err := fleet.Clear(ctx, op, "payment", "operator"); err != nil {
		t.Fatal(err)
	}
	a.log.await(t, "circuit breaker state released", 5*time.Second, "source=forced")
	if err := a.do(prov); err != nil {
		t.Errorf("cleared: err = %v, want the call through", err)
	}
}

// TestStartWaitsForTheFirstRead: a process started while the dependency is
// forced open refuses its very first call; one that cannot reach the
// database starts after the short start wait and calls on its own breaker.
func TestStartWaitsForTheFirstRead(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	op, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	if err := fleet.Force(ctx, op, "payment", 0, "operator"); err != nil {
		t.Fatal(err)
	}
	newProcess := func(t *testing.T, url string, wait time.Duration) (*resilience.Policy, *fleet.Coordinator) {
		t.Helper()
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		policy, err := resilience.New("payment", testConfig(), resilience.Options{})
		if err != nil {
			t.Fatal(err)
		}
		coord, err := fleet.New(pool, "payment", policy, fleet.Options{StartWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		return policy, coord
	}

	t.Run("forced", func(t *testing.T) {
		prov := newProvider()
		// Start returns as soon as the read is done; the wait only bounds
		// it, generously, for a database busy with the rest of the suite.
		policy, coord := newProcess(t, dbURL, 10*time.Second)
		t.Cleanup(coord.Start(ctx))
		_, err := resilience.Do(ctx, policy, prov.call("fresh"))
		if !errors.Is(err, resilience.ErrOpen) || prov.total() != 0 {
			t.Errorf("first call after Start: err = %v, provider calls %d; want ErrOpen, 0", err, prov.total())
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		prov := newProvider()
		proxy := dbtest.NewProxy(t, dbURL)
		proxy.Refuse()
		policy, coord := newProcess(t, proxy.URL(), 500*time.Millisecond)
		began := time.Now()
		t.Cleanup(coord.Start(ctx))
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("Start with the database unreachable took %v, want about the 500ms start wait", took)
		}
		if _, err := resilience.Do(ctx, policy, prov.call("cut-off")); err != nil {
			t.Errorf("first call with the database unreachable: err = %v, want it through (own breaker)", err)
		}
	})
}

// TestListenThroughPgBouncerInTransactionMode: behind a pooler in
// transaction mode notifications cannot reach the listening connection, and
// the coordinator says so (connected 0) instead of claiming to hear the
// fleet; with a direct ListenURL for LISTEN only, it hears them again.
func TestListenThroughPgBouncerInTransactionMode(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	bouncer := dbtest.StartPgBouncer(t, dbURL, dbtest.PgBouncerConfig{PoolSize: 2})
	ctx := context.Background()
	join := func(t *testing.T, name, listenURL string) *process {
		t.Helper()
		pc, err := pgxpool.ParseConfig(bouncer.URL() + "&default_query_exec_mode=exec")
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		l := &logs{changed: make(chan struct{})}
		logger := slog.New(l)
		reg := prometheus.NewRegistry()
		fm, err := fleet.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		policy, err := resilience.New(name, testConfig(), resilience.Options{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		coord, err := fleet.New(pool, "payment", policy, fleet.Options{
			Identity: name, ListenURL: listenURL, Metrics: fm, Logger: logger, RefreshEvery: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(coord.Start(ctx))
		return &process{name: name, policy: policy, coord: coord, log: l, reg: reg}
	}
	op, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)

	pooled := join(t, "pooled", "")
	pooled.log.await(t, "fleet breaker: notifications do not arrive", 5*time.Second)
	if got := pooled.connected(t); got != 0 {
		t.Errorf("LISTEN through the bouncer: resilience_fleet_connected = %v, want 0", got)
	}

	direct := join(t, "direct", dbURL)
	direct.log.await(t, "fleet breaker: listening for the shared breaker state", 5*time.Second)
	if got := direct.connected(t); got != 1 {
		t.Errorf("LISTEN on a direct URL: resilience_fleet_connected = %v, want 1", got)
	}
	if err := fleet.Force(ctx, op, "payment", 0, "operator"); err != nil {
		t.Fatal(err)
	}
	if took := direct.log.await(t, "circuit breaker state imposed", 2*time.Second, "source=forced"); took > time.Second {
		t.Errorf("forced open reached the direct listener after %v, want within 1s (a notification, not the re-read)", took)
	}
}
