package e2e

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/chaos"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// The soak's flags: `make chaos` runs it for 5 minutes; `make test` runs the
// short default.
var (
	chaosSeed     = flag.Uint64("chaos.seed", 1, "seed of the chaos soak's faults and load")
	chaosDuration = flag.Duration("chaos.duration", 30*time.Second, "how long the chaos soak injects faults (make chaos: 5m)")
	chaosRate     = flag.Float64("chaos.rate", 25, "orders per second during the chaos soak, open loop")
	// A 5-minute soak leaves a backlog of up to ~4,000 deferred orders
	// (the fleet breaker keeps every process open while one probe decides),
	// and two workers of 4 River workers each charge ~35 a second against the
	// simulator's ~200 ms: the drain is capacity, not a stall, and gets 4 min.
	chaosDrain = flag.Duration("chaos.drain", 4*time.Minute, "how long the healed system gets to settle every order")
	// See soak.fastForward.
	chaosFastForward = flag.Bool("chaos.fastforward", true, "after the heal, make due now the charge jobs the faults left parked more than 15 s ahead")
)

// Worker settings the soak lowers from their defaults, so that minutes
// exercise what takes hours in production; none is set below what its
// docs/operations.md entry says it must exceed.
var soakWorkerEnv = map[string]string{
	// Give up charging at the third attempt (seconds in, instead of one to
	// two hours) and settle from the provider's lookup, so that path runs.
	"CHARGE_GIVE_UP_AFTER": "3",
	// The lookup's "no charge" is trusted 10 s after the last attempt
	// (default 1 m). It must exceed the longest a charge can take at the
	// provider: the soak checks that against the provider's max in-flight.
	"LOOKUP_AFTER": "15s",
	// A killed worker's running jobs are retried after 31 s (default 1 m),
	// the least allowed: just over the 30 s job timeout.
	"RESCUE_STUCK_JOBS_AFTER": "31s",
}

// TestChaos is the randomized soak (`make chaos`): the real
// binaries — paymentsim, checkout and two workers — on a PostgreSQL primary
// of the test's own with a synchronous streaming standby, checkout and the
// workers reaching both through a TCP proxy per server that the soak can
// cut, on a multi-host URL with target_session_attrs=read-write. Open-loop
// orders (new, declined, replayed, a key reused with another body, a key
// left unanswered retried) run while the seeded plan injects provider
// faults through the simulator's admin API, kills checkout and workers
// (SIGKILL), stops a worker (SIGTERM), crashes the primary, fails over to
// the standby and cuts the database connection, one or two at a time. Then everything is healed, the
// orders get -chaos.drain to settle, and chaos.Audit holds Postgres against
// the provider's ledger. Any violation fails the test; the events and the
// audit are logged (go test -v, or make chaos).
func TestChaos(t *testing.T) {
	t.Parallel()
	s := startSoak(t)
	plan := chaos.NewPlan(chaos.PlanConfig{Seed: *chaosSeed, Duration: *chaosDuration, Workers: len(s.workers)})
	s.logf("seed %d, %v of faults at %.0f orders/s: %d events planned", *chaosSeed, *chaosDuration, *chaosRate, len(plan))

	load := chaos.NewLoad(chaos.LoadConfig{
		Seed: *chaosSeed, Rate: *chaosRate, Replays: 0.10, Mismatches: 0.02, Retries: 0.05, Declines: 0.10,
		Timeout: 10 * time.Second, MaxInFlight: 512,
	}, s.checkoutURL, func() int { return int(s.crashes.Load()) })
	ctx, stopLoad := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		load.Run(ctx)
	}()
	s.run(plan, *chaosDuration)
	stopLoad()
	<-loaded
	s.logf("load stopped (%d requests not sent: client at its in-flight limit)", load.Skipped())

	s.healAll()
	s.drain(*chaosDrain)
	ev := s.evidence(load.Exchanges())
	ev.Failovers = s.failoverTimes(load)
	report := chaos.Audit(ev)
	report.Violations = append(s.violations, report.Violations...)
	s.checkLookupAfter(ev.Stats, &report)

	for _, w := range s.workers {
		s.countJobs(w)
	}
	s.logf("worker job outcomes: %s", joinCounts(s.jobs))

	var out strings.Builder
	report.Write(&out)
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		s.logf("%s", line)
	}
	if !report.OK() {
		t.Errorf("chaos soak with seed %d: %d violations (events and audit above)", *chaosSeed, len(report.Violations))
	}
}

// soak is the system under test and what the soak knows about it.
type soak struct {
	t     *testing.T
	start time.Time
	// servers are the primary and its synchronous standby; primary is the
	// index of the one that accepts writes. A failover promotes the other
	// and puts a new standby in the old primary's place, on its port.
	servers [2]*cluster
	primary int
	db      *pgxpool.Pool    // direct to both servers, for the drain and the audit
	proxies [2]*dbtest.Proxy // one in front of each server's port
	// failovers are the kill and promotion times of each failover.
	failovers []struct{ killed, promoted time.Time }

	sim      *process.Process
	provider *chaos.Provider
	env      map[string]string // checkout's; the workers' adds soakWorkerEnv
	checkout atomic.Pointer[process.Process]
	workers  []*process.Process
	stopping map[int]chan error // workers sent SIGTERM, until they are restarted
	crashes  atomic.Int32       // Postgres crashes and failovers begun
	jobs     map[string]int     // checkout_charge_jobs_total by outcome, over every worker process

	fastForwarded int      // jobs made due early, see fastForward
	violations    []string // found by the soak itself rather than the audit
}

func startSoak(t *testing.T) *soak {
	t.Helper()
	s := &soak{t: t, stopping: map[int]chan error{}, jobs: map[string]int{}}
	primary := startCluster(t)
	migrate := exec.Command(binary("checkout"), "migrate")
	migrate.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + primary.URL()}
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("checkout migrate: %v\n%s", err, out)
	}
	s.servers = [2]*cluster{primary, startStandby(t, primary)}
	if err := replicate(context.Background(), primary, true); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.db, err = pgxpool.New(context.Background(), multiHostURL(s.servers[0].addr(), s.servers[1].addr())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.db.Close)
	var proxied []string
	for i, c := range s.servers {
		s.proxies[i] = dbtest.NewProxy(t, c.URL())
		u, err := url.Parse(s.proxies[i].URL())
		if err != nil {
			t.Fatal(err)
		}
		proxied = append(proxied, u.Host)
	}
	s.sim = process.StartBinary(t, binary("paymentsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0"})
	s.provider = chaos.NewProvider(s.sim.URL)
	// The load comes from one address; checkout's per-client rate limit
	// (6000 a minute) would refuse a soak above 100 orders/s, so it is off:
	// the soak measures the protection stack and the invariants, not it.
	s.env = map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": multiHostURL(proxied...), "STRIPE_API_BASE": s.sim.URL, "RATE_LIMIT": "0"}
	s.startCheckout()
	for range 2 {
		s.workers = append(s.workers, s.startWorker())
	}
	s.start = time.Now()
	return s
}

func (s *soak) startCheckout() {
	s.checkout.Store(process.StartBinary(s.t, binary("checkout"), nil, s.env))
}

func (s *soak) checkoutURL() string { return s.checkout.Load().URL }

func (s *soak) startWorker() *process.Process {
	env := maps.Clone(s.env)
	maps.Copy(env, soakWorkerEnv)
	return process.StartBinary(s.t, binary("worker"), nil, env)
}

func (s *soak) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("%+8.1fs  %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

func (s *soak) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// run applies the plan's events at their times, heals each when it ends,
// and returns once duration has passed.
func (s *soak) run(plan []chaos.Event, duration time.Duration) {
	type step struct {
		at   time.Duration
		heal bool
		e    chaos.Event
	}
	var steps []step
	for _, e := range plan {
		steps = append(steps, step{e.At, false, e}, step{e.End(), true, e})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.at, b.at) })
	for _, st := range steps {
		time.Sleep(time.Until(s.start.Add(st.at)))
		if st.heal {
			s.heal(st.e)
		} else {
			s.apply(st.e)
		}
	}
	time.Sleep(time.Until(s.start.Add(duration)))
}

func (s *soak) apply(e chaos.Event) {
	s.logf("apply %v", e)
	var err error
	switch e.Kind {
	case chaos.KillCheckout:
		s.checkout.Load().Kill()
	case chaos.KillWorker:
		s.countJobs(s.workers[e.Target])
		s.workers[e.Target].Kill()
	case chaos.StopWorker:
		stopped, w := make(chan error, 1), s.workers[e.Target]
		s.countJobs(w) // a moment early: what it does while stopping is not counted
		go func() { stopped <- w.Stop() }()
		s.stopping[e.Target] = stopped
	case chaos.CrashPostgres:
		s.crashes.Add(1)
		err = s.servers[s.primary].crash()
	case chaos.CutDatabase:
		for _, p := range s.proxies {
			p.Cut()
		}
	case chaos.Failover:
		// A settle committed asynchronously may be lost to a failover as to
		// a crash: the load counts both alike.
		s.crashes.Add(1)
		err = s.servers[s.primary].crash()
		s.failovers = append(s.failovers, struct{ killed, promoted time.Time }{killed: time.Now()})
	default:
		err = s.provider.Inject(context.Background(), e.FaultJSON())
	}
	if err != nil {
		s.t.Fatalf("apply %v: %v", e, err)
	}
}

func (s *soak) heal(e chaos.Event) {
	var err error
	switch e.Kind {
	case chaos.KillCheckout:
		s.startCheckout()
	case chaos.KillWorker:
		s.workers[e.Target] = s.startWorker()
	case chaos.StopWorker:
		if err := <-s.stopping[e.Target]; err != nil {
			s.violate("worker %d did not stop cleanly on SIGTERM: %v", e.Target, err)
		}
		delete(s.stopping, e.Target)
		s.workers[e.Target] = s.startWorker()
	case chaos.CrashPostgres:
		err = s.servers[s.primary].start()
	case chaos.CutDatabase:
		for _, p := range s.proxies {
			p.Restore()
		}
	case chaos.Failover:
		err = s.failover()
	default:
		s.logf("heal  %s (ended by the simulator)", e.Kind)
		return
	}
	if err != nil {
		s.t.Fatalf("heal %v: %v", e, err)
	}
	s.logf("heal  %s", e.Kind)
}

// failover promotes the standby of a primary the plan killed, then makes a
// new synchronous standby of the new primary in the old one's place: a
// fresh base backup on the old primary's port, behind its proxy, so the
// multi-host URL still names both servers. The old primary's directory is
// removed, never started again: it may hold commits that no standby
// confirmed, which would fork its history from the new primary's.
func (s *soak) failover() error {
	old, promoted := s.servers[s.primary], s.servers[1-s.primary]
	if err := promoted.pgCtl("promote", "-w"); err != nil {
		return err
	}
	s.failovers[len(s.failovers)-1].promoted = time.Now()
	s.primary = 1 - s.primary
	s.logf("      standby on port %d promoted; rebuilding the old primary as its standby", promoted.port)
	if err := os.RemoveAll(old.dir); err != nil {
		return err
	}
	standby, err := newStandby(s.t, promoted, old.port)
	if err != nil {
		return err
	}
	s.servers[1-s.primary] = standby
	return replicate(context.Background(), promoted, true)
}

// failoverTimes are the soak's failovers in the load's time.
func (s *soak) failoverTimes(load *chaos.Load) []chaos.FailoverTimes {
	var out []chaos.FailoverTimes
	for _, f := range s.failovers {
		out = append(out, chaos.FailoverTimes{Killed: load.Since(f.killed), Promoted: load.Since(f.promoted)})
	}
	return out
}

// healAll makes sure nothing is left broken (every event healed itself by
// the plan's end; this is the belt to those braces) and that every process
// still answers /health: one that died on its own is a finding.
func (s *soak) healAll() {
	if err := s.provider.Heal(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	for _, p := range s.proxies {
		p.Restore()
	}
	// The direct pool may hold connections to a server that a failover
	// killed.
	s.db.Reset()
	procs := map[string]*process.Process{"paymentsim": s.sim, "checkout": s.checkout.Load()}
	for i, w := range s.workers {
		procs[fmt.Sprintf("worker %d", i)] = w
	}
	for name, p := range procs {
		if err := healthy(p.URL); err != nil {
			s.violate("%s is not healthy after the soak: %v\nlast logs:\n%s", name, err, tail(p.Logs(), 20))
		}
	}
	s.logf("healed: provider faults cleared, database proxies restored, every process healthy")
}

// drain waits, at most within, until no order is pending or
// pending_payment, and lists the stragglers if some still are.
func (s *soak) drain(within time.Duration) {
	began := time.Now()
	ctx := context.Background()
	for report := began; ; {
		s.fastForward(ctx, began)
		var open int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status IN ('pending', 'pending_payment')`).Scan(&open); err != nil {
			s.t.Fatalf("count unsettled orders: %v", err)
		}
		if open == 0 {
			s.logf("drained: every order terminal %.1fs after healing (%d parked jobs fast-forwarded)", time.Since(began).Seconds(), s.fastForwarded)
			break
		}
		if time.Since(began) > within {
			s.logf("%d orders still unsettled %v after healing:", open, within)
			s.logStragglers(ctx)
			break
		}
		if time.Since(report) > 10*time.Second {
			s.logf("draining: %d orders unsettled", open)
			report = time.Now()
		}
		time.Sleep(250 * time.Millisecond) // polling real processes' effect on Postgres
	}
	// The provider finishes charges whose callers gave up; wait for those
	// before reading its ledger.
	if err := s.provider.WaitIdle(ctx, 30*time.Second); err != nil {
		s.violate("%v", err)
	}
}

// fastForward makes due now the charge jobs that waits caused by the faults
// left scheduled more than 15 s ahead after the heal: above all the worker's
// pace for unresolved orders (past CHARGE_GIVE_UP_AFTER a failed lookup is
// asked again a minute later), and snoozes behind a breaker whose open time
// grew during the faults. In production an order reaches the unresolved
// pace one to two hours in; the soak's low CHARGE_GIVE_UP_AFTER brings it
// to seconds-old orders, and waiting it out would double the short soak.
// Skipping the wait skips no check: the job runs as it would have, and the
// breaker and LOOKUP_AFTER are judged again when it does. Only jobs last
// touched before the heal are moved; one parked after it, when nothing
// should fail, is left to the drain's bound. Each one is logged;
// -chaos.fastforward=false waits them out instead.
func (s *soak) fastForward(ctx context.Context, healed time.Time) {
	if !*chaosFastForward {
		return
	}
	rows, err := s.db.Query(ctx, `
		WITH parked AS (
			SELECT id, scheduled_at FROM river_job
			WHERE kind = 'charge_order' AND state = 'scheduled'
			  AND scheduled_at > now() + interval '15 seconds' AND coalesce(attempted_at, created_at) < $1
			FOR UPDATE
		)
		UPDATE river_job j SET scheduled_at = now() FROM parked WHERE j.id = parked.id
		RETURNING j.args->>'order_id', j.attempt, extract(epoch FROM parked.scheduled_at - now())::float8`, healed)
	if err != nil {
		s.t.Fatalf("fast-forward parked jobs: %v", err)
	}
	ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var (
			id      string
			attempt int
			wait    float64
		)
		err := row.Scan(&id, &attempt, &wait)
		return fmt.Sprintf("%s (attempt %d, due in %.0fs)", id, attempt, wait), err
	})
	if err != nil {
		s.t.Fatalf("fast-forward parked jobs: %v", err)
	}
	if len(ids) > 0 {
		s.logf("fast-forward: %d charge jobs parked before the heal made due now: %s", len(ids), strings.Join(ids, ", "))
	}
	s.fastForwarded += len(ids)
}

func (s *soak) logStragglers(ctx context.Context) {
	rows, err := s.db.Query(ctx, `
		SELECT o.id, o.status, o.created_at, o.last_attempt_at,
		       coalesce(j.state::text, 'no job'), coalesce(j.attempt, 0), coalesce(extract(epoch FROM j.scheduled_at - now())::float8, 0),
		       coalesce(j.errors[array_length(j.errors, 1)]->>'error', '')
		FROM orders o
		LEFT JOIN river_job j ON j.kind = 'charge_order' AND j.args->>'order_id' = o.id::text
		WHERE o.status IN ('pending', 'pending_payment')
		ORDER BY o.created_at LIMIT 20`)
	if err != nil {
		s.t.Fatalf("list unsettled orders: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, status, state, lastErr string
			created, attempted         time.Time
			attempt                    int
			dueIn                      float64
		)
		if err := rows.Scan(&id, &status, &created, &attempted, &state, &attempt, &dueIn, &lastErr); err != nil {
			s.t.Fatal(err)
		}
		s.logf("  %s %s created +%.1fs, last attempt +%.1fs; job %s, attempt %d, due in %.0fs; last error %q",
			id, status, created.Sub(s.start).Seconds(), attempted.Sub(s.start).Seconds(), state, attempt, dueIn, lastErr)
	}
}

// evidence reads Postgres and the provider for the audit.
func (s *soak) evidence(exchanges []chaos.Exchange) chaos.Evidence {
	ctx := context.Background()
	ev := chaos.Evidence{Exchanges: exchanges, Orders: map[string]chaos.Order{}, Keys: map[string]string{}, Charges: map[string][]chaos.Charge{}}
	rows, err := s.db.Query(ctx, `
		SELECT id::text, status, payment_method, total, currency, coalesce(charge_id, ''), coalesce(failure_reason, '')
		FROM orders`)
	if err != nil {
		s.t.Fatal(err)
	}
	for rows.Next() {
		var o chaos.Order
		if err := rows.Scan(&o.ID, &o.Status, &o.PaymentMethod, &o.Total, &o.Currency, &o.ChargeID, &o.FailureReason); err != nil {
			s.t.Fatal(err)
		}
		ev.Orders[o.ID] = o
	}
	if rows.Err() != nil {
		s.t.Fatal(rows.Err())
	}
	rows, err = s.db.Query(ctx, `SELECT key, order_id::text FROM idempotency_keys`)
	if err != nil {
		s.t.Fatal(err)
	}
	for rows.Next() {
		var key, id string
		if err := rows.Scan(&key, &id); err != nil {
			s.t.Fatal(err)
		}
		ev.Keys[key] = id
	}
	if rows.Err() != nil {
		s.t.Fatal(rows.Err())
	}
	if ev.Stats, err = s.provider.Stats(ctx); err != nil {
		s.t.Fatal(err)
	}
	if ev.Charges, err = s.provider.Charges(ctx); err != nil {
		s.violate("reading the provider's list failed after healing: %v", err)
	}
	s.logf("audit: %d orders, %d keys, %d provider charges, %d orders charged in its list", len(ev.Orders), len(ev.Keys), ev.Stats.TotalCharges, len(ev.Charges))
	return ev
}

// checkLookupAfter makes sure the soak's lowered LOOKUP_AFTER was sound: a
// charge took at most the base latency, stretched by the simulator's
// capacity model (× in-flight / 16 beyond 16 at once), plus the largest
// injected latency. If that could reach LOOKUP_AFTER, a "no charge" answer might
// have been overtaken by a charge landing later, and the soak's own
// configuration — not the code — would be to blame for what it found.
func (s *soak) checkLookupAfter(st chaos.Stats, r *chaos.Report) {
	const capacity, base = 16, 220 * time.Millisecond // paymentsim's defaults: capacity, latency + jitter
	longest := base*time.Duration(max(st.MaxInFlight, capacity))/capacity + chaos.MaxLatency
	lookupAfter, _ := time.ParseDuration(soakWorkerEnv["LOOKUP_AFTER"])
	s.logf("provider max in flight %d: a charge took at most %v; LOOKUP_AFTER %v", st.MaxInFlight, longest.Round(time.Millisecond), lookupAfter)
	if longest >= lookupAfter {
		r.Violations = append(r.Violations, fmt.Sprintf("the soak's LOOKUP_AFTER %v does not exceed the longest charge (%v): raise it", lookupAfter, longest))
	}
}

// countJobs adds a worker's checkout_charge_jobs_total to s.jobs: called
// before the soak kills or stops a worker and for the live ones at the end,
// so the counts cover every worker process.
func (s *soak) countJobs(w *process.Process) {
	resp, err := http.Get(w.URL + "/metrics")
	if err != nil {
		s.logf("worker metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	const prefix = `checkout_charge_jobs_total{outcome="`
	for sc.Scan() {
		outcome, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), prefix), `"} `)
		if !ok || !strings.HasPrefix(sc.Text(), prefix) {
			continue
		}
		n, _ := strconv.ParseFloat(value, 64)
		s.jobs[outcome] += int(n)
	}
}

func joinCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func healthy(baseURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/health answered %d", resp.StatusCode)
	}
	return nil
}

func tail(logs string, n int) string {
	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
