package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// Options tunes a Coordinator; the zero value of each field means its
// default.
type Options struct {
	// ListenURL is the connection string of the listening connection only;
	// empty: the pool's configuration. LISTEN needs a session of its own,
	// which a pooler in transaction mode does not give: point it past the
	// pooler at the server while the pool goes through it.
	ListenURL string
	// Identity names this process in the probe lease and the row's source;
	// default hostname/pid/random.
	Identity string
	// Lease is how long the probe holder has for its verdict before another
	// process may take the lease: default 2 s, four attempt timeouts of the
	// default stack (a hung probe is judged at the 400 ms slow threshold).
	Lease time.Duration
	// RefreshEvery is how often the row is re-read without a notification,
	// what a lost NOTIFY costs at most; default 5 s.
	RefreshEvery time.Duration
	// ForcedSlice is how far ahead a forced state is imposed at a time,
	// renewed at every read (at least every RefreshEvery) and, while reads
	// fail, at every failed one and every RefreshEvery: the longest a
	// worker's job snoozes while forced, hence how soon the backlog drains
	// after a clear. A forced state ends only when a read says so or at its
	// own end time. Default 10 s.
	ForcedSlice time.Duration
	// RetryEvery is how soon a read or write that failed on a live
	// connection (the database busy, a statement timed out) is followed by
	// another read; default 500 ms, so a forced slice sees many tries
	// before it would run out.
	RetryEvery time.Duration
	// StartWait bounds how long Start waits for the first read of the
	// shared state before it returns, so that a process starting while a
	// dependency is open or forced open for the fleet does not call it
	// first; default 2 s, the time one read is given. With the database
	// unreachable Start returns after it and the process's own breaker
	// decides alone, as it would for a process cut off later.
	StartWait time.Duration
	// ReconnectMin and ReconnectMax bound the jittered, doubling wait
	// between attempts to reach the database again; default 250 ms, 5 s.
	ReconnectMin, ReconnectMax time.Duration
	Metrics                    *Metrics
	Logger                     *slog.Logger
}

// Metrics are the coordinator's collectors.
type Metrics struct {
	connected *prometheus.GaugeVec
}

// NewMetrics registers the coordinator's collectors on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "resilience_fleet_connected",
		Help: "1 while the fleet breaker coordinator hears the database's notifications of the dependency's shared breaker state; 0 while it cannot: either the database is out of reach and the process's own breaker decides alone, or notifications do not arrive on its listening connection (a pooler in transaction mode: set a direct FLEET_LISTEN_DATABASE_URL) and it re-reads the shared state every few seconds instead.",
	}, []string{"dependency"})}
	if reg != nil {
		if err := reg.Register(m.connected); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Coordinator shares one dependency's breaker state between this process's
// policy and every other process's, through Postgres (see the package
// documentation). Run it for the life of the process.
type Coordinator struct {
	dependency string
	policy     *resilience.Policy
	pool       *pgxpool.Pool
	opts       Options
	listenCfg  *pgx.ConnConfig
	log        *slog.Logger
	connected  prometheus.Gauge

	// Owned by Run's goroutine.
	last    row
	applied int64 // generation of the last row imposed; 0: none
	timer   *time.Timer
	// retry re-reads the row soon after a database operation failed.
	retry *time.Timer
	// forced records that the last row read was forced open, and
	// forcedEnd when that state ends by its own end time (zero: until
	// cleared). Only a successful read ends it sooner (holdForced).
	forced    bool
	forcedEnd time.Time
	// read is closed after the first successful read of the row.
	read     chan struct{}
	readOnce sync.Once
	// demand is the policy's Demand when the open state was imposed;
	// yielded records that this process, idle since, has let busier ones
	// ask for the probe lease first.
	demand  int64
	yielded bool
	askAt   time.Time // when a yield ends
	// leaseEnd is when this process's probe lease runs out; zero when it holds none.
	leaseEnd time.Time
}

// New returns a coordinator for dependency, imposing the shared state on
// policy and writing through pool. The listening connection is opened from
// Options.ListenURL, or else from pool's configuration, beside the pool.
func New(pool *pgxpool.Pool, dependency string, policy *resilience.Policy, opts Options) (*Coordinator, error) {
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = fmt.Sprintf("%s/%d/%04x", host, os.Getpid(), rand.N(1<<16))
	}
	opts.Lease = orDefault(opts.Lease, 2*time.Second)
	opts.RefreshEvery = orDefault(opts.RefreshEvery, 5*time.Second)
	opts.ForcedSlice = orDefault(opts.ForcedSlice, 10*time.Second)
	opts.RetryEvery = orDefault(opts.RetryEvery, 500*time.Millisecond)
	opts.StartWait = orDefault(opts.StartWait, 2*time.Second)
	opts.ReconnectMin = orDefault(opts.ReconnectMin, 250*time.Millisecond)
	opts.ReconnectMax = orDefault(opts.ReconnectMax, 5*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics, _ = NewMetrics(nil)
	}
	if policy.Mode() != resilience.ModeProtected {
		return nil, fmt.Errorf("fleet: policy %q has no breaker (mode %v)", policy.Name(), policy.Mode())
	}
	listenCfg := pool.Config().ConnConfig
	if opts.ListenURL != "" {
		cfg, err := pgx.ParseConfig(opts.ListenURL)
		if err != nil {
			return nil, fmt.Errorf("fleet: listen URL: %w", err)
		}
		if cfg.ConnectTimeout == 0 {
			cfg.ConnectTimeout = listenCfg.ConnectTimeout
		}
		listenCfg = cfg
	}
	c := &Coordinator{
		dependency: dependency, policy: policy, pool: pool, opts: opts, listenCfg: listenCfg,
		log:       opts.Logger.With("dependency", dependency, "fleet_identity", opts.Identity),
		connected: opts.Metrics.connected.WithLabelValues(dependency),
		read:      make(chan struct{}),
	}
	c.connected.Set(0)
	return c, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Run listens until ctx ends, reconnecting with backoff whenever the
// database is lost, and returns nil then.
func (c *Coordinator) Run(ctx context.Context) error {
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	defer c.timer.Stop()
	c.retry = time.NewTimer(time.Hour)
	c.retry.Stop()
	defer c.retry.Stop()
	ceiling := c.opts.ReconnectMin
	for ctx.Err() == nil {
		listened, err := c.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if listened {
			ceiling = c.opts.ReconnectMin
		}
		c.connected.Set(0)
		wait := ceiling/2 + rand.N(ceiling/2+1) // equal jitter: replicas cut off together don't return together
		c.log.WarnContext(ctx, "fleet breaker: database unreachable, this process's breaker decides alone until it is back",
			"err", err, "retry_in", wait)
		if !c.idle(ctx, wait) {
			break
		}
		ceiling = min(2*ceiling, c.opts.ReconnectMax)
	}
	c.connected.Set(0)
	return nil
}

// idle waits d while disconnected. Local events are dropped meanwhile: no
// one else can hear them, and the row read on reconnecting is what counts.
func (c *Coordinator) idle(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-c.policy.Events():
			c.policy.TakeEvents()
		case <-c.timer.C:
			// A deadline of the last imposed state: it runs out by itself,
			// unless it is forced open (holdForced).
			c.holdForced()
		case <-c.retry.C:
			// Reconnecting reads the row first.
		}
	}
}

// session is one connection's life: LISTEN, read the row, then react to
// notifications, local events and deadlines until the connection fails.
func (c *Coordinator) session(ctx context.Context) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, c.listenCfg.Copy())
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return false, err
	}
	arrive, err := c.notificationsArrive(ctx, conn)
	if err != nil {
		return false, err
	}
	if err := c.refresh(ctx); err != nil {
		return false, err
	}
	if arrive {
		c.connected.Set(1)
		c.log.InfoContext(ctx, "fleet breaker: listening for the shared breaker state")
	} else {
		c.log.WarnContext(ctx, "fleet breaker: notifications do not arrive on the listening connection (a pooler in transaction mode?); re-reading the shared state every refresh interval instead: point FLEET_LISTEN_DATABASE_URL at the server",
			"refresh_every", c.opts.RefreshEvery)
	}

	lctx, stop := context.WithCancel(ctx)
	notes := make(chan struct{}, 1)
	lost := make(chan error, 1)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		c.listen(lctx, conn, notes, lost)
	}()
	// Before the connection closes (deferred above, so run after this):
	// the listener must be done with it.
	defer func() { stop(); <-listening }()

	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-lost:
			return true, err
		case <-notes:
			err = c.refresh(ctx)
		case <-c.policy.Events():
			err = c.handle(ctx, c.policy.TakeEvents())
		case <-c.timer.C:
			err = c.deadline(ctx)
		case <-c.retry.C:
			err = c.refresh(ctx)
		}
		if err != nil && ctx.Err() == nil {
			// A write or read failed on the pool; the listening connection
			// may still be fine. Read again soon rather than at the next
			// notification or refresh, which may be RefreshEvery away, and
			// meanwhile keep a forced state: a busy database says nothing
			// about whether the operator has cleared it.
			c.holdForced()
			c.retry.Reset(c.opts.RetryEvery)
			c.log.WarnContext(ctx, "fleet breaker: database operation failed", "err", err, "retry_in", c.opts.RetryEvery)
		}
	}
}

// listen forwards notifications for this dependency, re-reads the row every
// RefreshEvery (a ping of the listening connection too), and reports a
// failed connection on lost.
func (c *Coordinator) listen(ctx context.Context, conn *pgx.Conn, notes chan<- struct{}, lost chan<- error) {
	poke := func() {
		select {
		case notes <- struct{}{}:
		default:
		}
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, c.opts.RefreshEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			c.heard(ctx, n.Payload, poke)
			continue
		case conn.PgConn().IsClosed() || (!errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)):
			lost <- err
			return
		}
		// No notification for RefreshEvery: check the connection is alive
		// (a silently dropped one would wait forever) and re-read the row.
		pctx, cancel := context.WithTimeout(ctx, min(c.opts.RefreshEvery, 2*time.Second))
		_, err = conn.Exec(pctx, "SELECT 1")
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				lost <- fmt.Errorf("ping listening connection: %w", err)
			}
			return
		}
		poke()
	}
}

// A coordinator checks its listening connection with "ping <identity>
// <nonce>" on Channel, sent through the pool.
const pingPrefix = "ping "

// notificationsArrive sends a notification through the pool and reports
// whether it reaches conn. Behind a pooler in transaction mode the LISTEN
// ran on a server session that went back to the pooler's pool, and nothing
// sent later reaches conn: the coordinator then still works by re-reading
// the row, and says so rather than claim it hears the fleet.
func (c *Coordinator) notificationsArrive(ctx context.Context, conn *pgx.Conn) (bool, error) {
	payload := pingPrefix + c.opts.Identity + " " + strconv.FormatUint(rand.Uint64(), 36)
	wait := min(2*time.Second, c.opts.RefreshEvery)
	nctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if _, err := c.pool.Exec(nctx, "SELECT pg_notify($1, $2)", Channel, payload); err != nil {
		return false, fmt.Errorf("check notifications: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(nctx)
		switch {
		case err == nil && n.Payload == payload:
			return true, nil
		case err == nil:
			// Anything else is older than the row read that follows.
			continue
		case ctx.Err() != nil:
			return false, ctx.Err()
		case nctx.Err() != nil && !conn.PgConn().IsClosed():
			return false, nil
		}
		return false, fmt.Errorf("check notifications: %w", err)
	}
}

// heard acts on one notification: this dependency's row changed (poke).
// Anything else on the channel — another dependency's row, a coordinator
// checking its own listening connection — is not for this coordinator.
func (c *Coordinator) heard(ctx context.Context, payload string, poke func()) {
	if payload == c.dependency {
		poke()
		return
	}
	if !strings.HasPrefix(payload, pingPrefix) {
		c.log.DebugContext(ctx, "fleet breaker: notification ignored", "payload", payload)
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// refresh reads the row and imposes it. A read is given 2 s, and never more
// than half a forced slice, so a forced state is renewed (holdForced)
// before a read that hangs could let it run out.
func (c *Coordinator) refresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, min(2*time.Second, c.opts.ForcedSlice/2))
	defer cancel()
	r, err := read(rctx, c.pool, c.dependency)
	if err != nil {
		return err
	}
	c.retry.Stop()
	c.apply(ctx, r)
	c.readOnce.Do(func() { close(c.read) })
	return nil
}

// holdForced imposes the next slice of a forced state that no successful
// read has ended, up to the state's own end time. Without it a forced
// state would lapse ForcedSlice after the last successful read, and calls
// would reach the dependency during the maintenance window whenever the
// database was busy or unreachable for that long. Holding it costs nothing
// a process could have done instead: without the database checkout cannot
// accept an order durably and the worker cannot fetch a job.
func (c *Coordinator) holdForced() {
	if !c.forced {
		return
	}
	slice := c.opts.ForcedSlice
	if !c.forcedEnd.IsZero() {
		left := time.Until(c.forcedEnd)
		if left <= 0 {
			c.forced = false
			return // ended by its own end time; the slice imposed runs out
		}
		slice = min(slice, left)
	}
	c.policy.Impose(resilience.Imposed{Source: resilience.SourceForced, OpenFor: slice, HoldFor: slice})
	c.arm(min(slice, c.opts.RefreshEvery))
}

// apply imposes r on the policy and arms the timer for its next deadline.
func (c *Coordinator) apply(ctx context.Context, r row) {
	c.last = r
	c.timer.Stop()
	c.leaseEnd = time.Time{}
	grace := c.opts.Lease / 4
	left := func(d *time.Duration) time.Duration {
		if d == nil {
			return 0
		}
		return max(*d, 0)
	}
	switch {
	case r.State == stateForcedOpen && (r.Left == nil || *r.Left > 0):
		slice := c.opts.ForcedSlice
		if r.Left != nil {
			slice = min(slice, *r.Left)
		}
		c.policy.Impose(resilience.Imposed{Source: resilience.SourceForced, OpenFor: slice, HoldFor: slice})
		c.applied = r.Generation
		c.forced, c.forcedEnd = true, time.Time{}
		if r.Left != nil {
			c.forcedEnd = time.Now().Add(*r.Left)
		}
		c.arm(min(slice, c.opts.RefreshEvery))
		return
	}
	c.forced = false
	switch {
	case r.State != stateOpen:
		if c.applied != 0 {
			c.policy.Release()
			c.applied = 0
		}
	case left(r.Left) > 0:
		if c.applied != r.Generation {
			c.demand, c.yielded, c.askAt = c.policy.Demand(), false, time.Time{}
			c.policy.Impose(resilience.Imposed{Source: resilience.SourceFleet, OpenFor: *r.Left, HoldFor: *r.Left + c.opts.Lease + grace})
			c.applied = r.Generation
		}
		c.arm(*r.Left)
	case r.Holder != nil && left(r.LeaseLeft) > 0:
		if c.applied != r.Generation {
			probes := 0
			if *r.Holder == c.opts.Identity {
				probes = c.policy.HalfOpenProbes()
			}
			if probes > 0 {
				c.demand, c.yielded, c.askAt = c.policy.Demand(), false, time.Time{}
			}
			c.policy.Impose(resilience.Imposed{Source: resilience.SourceFleet, HoldFor: *r.LeaseLeft + grace, Probes: probes})
			c.applied = r.Generation
		}
		if *r.Holder == c.opts.Identity && !c.policy.Background() {
			// Look every quarter lease whether calls still come to probe
			// with. Not a worker's: its jobs come when they are due, and a
			// quiet quarter says nothing of them.
			c.leaseEnd = time.Now().Add(*r.LeaseLeft)
			c.arm(min(*r.LeaseLeft, c.opts.Lease/4))
			return
		}
		c.arm(*r.LeaseLeft)
	default:
		// Half-open for the fleet with no lease out: keep refusing while we
		// ask for it, and ask now, or once a yield (below) is over.
		if c.applied != r.Generation {
			c.policy.Impose(resilience.Imposed{Source: resilience.SourceFleet, HoldFor: c.opts.Lease + grace})
			c.applied = r.Generation
		}
		c.arm(time.Until(c.askAt))
	}
}

func (c *Coordinator) arm(d time.Duration) { c.timer.Reset(max(d, 0)) }

// yield lets other processes ask for the probe lease first, for d.
func (c *Coordinator) yield(d time.Duration) {
	c.yielded, c.askAt = true, time.Now().Add(d)
	c.arm(d)
}

// deadline runs when the last imposed state reaches a deadline: try the
// probe lease if the open state is over, then read the row again.
func (c *Coordinator) deadline(ctx context.Context) error {
	mine := c.last.Holder != nil && *c.last.Holder == c.opts.Identity
	if mine && time.Now().Before(c.leaseEnd) {
		if d := c.policy.Demand(); d != c.demand || c.policy.ProbeSent() {
			// Calls still come, or a probe is out: its verdict ends the
			// lease. Look again in a quarter lease.
			c.demand = d
			c.arm(min(time.Until(c.leaseEnd), c.opts.Lease/4))
			return nil
		}
		// No call has come for a quarter of the lease: this process's
		// traffic stopped as it took the lease, or before its probes were
		// done (a load that ended, a replica being drained). It gives the
		// lease back rather than make the fleet wait it out, and, idle,
		// asks again only after the others (below).
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := write(wctx, c.pool, dropLease, c.dependency, c.opts.Identity)
		cancel()
		if err != nil {
			return fmt.Errorf("give the probe lease back: %w", err)
		}
		c.log.InfoContext(ctx, "fleet breaker: gave the probe lease back, no call to probe with")
		return c.refresh(ctx)
	}
	if c.last.State == stateOpen && (c.last.Holder == nil || mine) && !c.yielded && c.policy.Demand() == c.demand {
		// No call has come since the open state began, or since this
		// process took the lease it now lets run out: as the holder it
		// would probe nothing and the fleet would wait out the lease —
		// again and again, if it renewed it the moment it ran out (its
		// own traffic may have stopped just after it took it). Let
		// processes with traffic ask first; ask in a quarter of the lease
		// if none has (still within the hold imposed above).
		c.yield(c.opts.Lease / 4)
		return nil
	}
	if c.last.State == stateOpen && c.last.Holder == nil && !c.yielded && c.policy.Background() {
		// A background process (a worker) has demand, but its jobs may
		// not be due for a while: they were scheduled for when the
		// breaker would let a probe through, and as the holder it would
		// keep the fleet's live calls refused until it probed or the
		// lease ran out. Live processes ask first; it asks in half a
		// lease if none has.
		c.yield(c.opts.Lease / 2)
		return nil
	}
	if c.last.State == stateOpen {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := write(wctx, c.pool, takeLease, c.dependency, c.opts.Identity, secs(c.opts.Lease))
		cancel()
		if err != nil {
			return fmt.Errorf("take probe lease: %w", err)
		}
	}
	return c.refresh(ctx)
}

// handle publishes local events: an opening, or the verdict of probes this
// process made for the fleet.
func (c *Coordinator) handle(ctx context.Context, events []resilience.Event) error {
	var errs []error
	for _, ev := range events {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var changed bool
		var err error
		switch ev.Kind {
		case resilience.EventOpened:
			left := ev.OpenFor - time.Since(ev.At)
			if left <= 0 {
				cancel()
				continue
			}
			changed, err = write(wctx, c.pool, opened, c.dependency, c.opts.Identity, secs(left))
		case resilience.EventProbeSucceeded:
			changed, err = write(wctx, c.pool, probeSucceeded, c.dependency, c.opts.Identity)
		case resilience.EventProbeFailed:
			d := c.policy.BreakDuration()
			changed, err = write(wctx, c.pool, probeFailed, c.dependency, c.opts.Identity, secs(d))
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("publish %v: %w", ev.Kind, err))
			continue
		}
		if changed {
			c.log.InfoContext(ctx, "fleet breaker: published", "event", ev.Kind.String())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.refresh(ctx)
}

// Identity is the name this process holds the probe lease under.
func (c *Coordinator) Identity() string { return c.opts.Identity }

// String helps logs and tests.
func (c *Coordinator) String() string {
	return "fleet coordinator " + strconv.Quote(c.dependency) + " (" + c.opts.Identity + ")"
}

// Start runs c in the background and returns once it has read the shared
// state, or after Options.StartWait if it cannot: a process that starts
// serving only then does not call a dependency the fleet holds open, or
// an operator has forced open, before it knows. stop ends c and waits
// until it has released its connection, so a caller can close the pool
// after it.
func (c *Coordinator) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	wait := time.NewTimer(c.opts.StartWait)
	defer wait.Stop()
	select {
	case <-c.read:
	case <-wait.C:
		c.log.WarnContext(ctx, "fleet breaker: shared state not read yet, starting with this process's breaker alone", "waited", c.opts.StartWait)
	case <-ctx.Done():
	}
	return func() { cancel(); <-done }
}

// Join is the wiring of a binary in one call: it registers the metrics on
// reg, starts a coordinator sharing policy's breaker under dependency, and
// returns the function that stops it (call it before closing pool).
// listenURL is Options.ListenURL (empty: the pool's configuration).
func Join(ctx context.Context, pool *pgxpool.Pool, listenURL, dependency string, policy *resilience.Policy, reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	c, err := New(pool, dependency, policy, Options{ListenURL: listenURL, Metrics: m, Logger: log})
	if err != nil {
		return nil, err
	}
	return c.Start(ctx), nil
}
