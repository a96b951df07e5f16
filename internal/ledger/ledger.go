// Package ledger reconciles the payment provider's ledger with the orders
// table: a periodic River job of the worker walks the provider's charge list
// and records every charge that no paid order accounts for.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
)

// The ledger reconciliation walks the provider's PaymentIntents list and
// checks every succeeded one — a charge — against the orders table (docs/design.md, "Durability"). The
// checkout flow never charges an order it has not stored, and settles every
// order it charged; a charge that no paid order accounts for therefore
// means something outside the flow happened: an order lost in a failover to
// an asynchronous standby, an order failed although charged, a second
// charge. The walk records each for an operator and settles what it can (an
// unsettled order the provider charged). It never charges anything, and it
// refunds nothing: a refund is a business decision (the customer may want
// the goods), so it is left to a person with the finding in hand.

// ChargeList is the provider's PaymentIntents list (payment.Protected).
type ChargeList interface {
	ListCharges(ctx context.Context, q payment.ListQuery) (payment.ChargePage, error)
}

// Config tunes the walk.
type Config struct {
	// Interval is how often the walk runs (LEDGER_RECONCILE_INTERVAL).
	Interval time.Duration
	// Grace is how long an unsettled order the provider charged is left to
	// its own recovery (the API's settle, the sweep, the charge job) before
	// the walk settles it (LEDGER_RECONCILE_GRACE). Until then the walk
	// leaves the charge to a later window, which starts no later than it.
	Grace time.Duration
	// Late bounds how long after its creation time a charge may first
	// appear in the provider's list as a success (LEDGER_RECONCILE_LATE):
	// the longest the provider may work on a charge request, plus the skew
	// between its clock and this process's. Each window re-reads this much
	// of the one before it; a charge that appears later than this is
	// missed by the walk (see docs/design.md, "Reconciliation").
	Late time.Duration
	// Lookback is where a first walk starts: charges created this long
	// before it (LEDGER_RECONCILE_LOOKBACK).
	Lookback time.Duration
}

// DefaultConfig: a walk a minute finds a lost order's charge within
// about a minute of the database's return; two minutes of grace exceed the
// sweep's recovery of an order whose settle was lost (10 s + 5 s + pickup)
// many times over; two minutes of look-back are twelve times the longest a
// charge is held by the simulator's hang (10 s), and cost a walk two
// minutes of the list read again; a first walk reads a day back, the
// provider's key retention.
func DefaultConfig() Config {
	return Config{Interval: time.Minute, Grace: 2 * time.Minute, Late: 2 * time.Minute, Lookback: 24 * time.Hour}
}

// Kinds of finding.
const (
	// NoOrder: the charge's reference is no stored order.
	NoOrder = "no_order"
	// OrderFailed: the order is payment_failed, yet charged.
	OrderFailed = "order_failed"
	// SecondCharge: the order is paid by another charge.
	SecondCharge = "second_charge"
	// Mismatch: the order is unsettled, or failed, and the charge is
	// for another amount or currency (order.ErrChargeMismatch): the walk
	// does not settle it.
	Mismatch = "charge_mismatch"
	// Settled: the order was unsettled past the grace; the walk
	// settled it as paid by this charge. Resolved: nothing for a person.
	Settled = "settled_paid"
)

// Args is the periodic job that walks the charge list.
type Args struct{}

// Kind is the job kind River stores and routes by.
func (Args) Kind() string { return "reconcile_provider_ledger" }

// Reconciler runs Args jobs.
type Reconciler struct {
	river.WorkerDefaults[Args]
	db       *pgxpool.Pool
	charges  ChargeList
	cfg      Config
	log      *slog.Logger
	findings *prometheus.CounterVec
	checked  prometheus.Counter
	now      func() time.Time
	pageSize int // ledgerPage; smaller in tests
}

// ledgerPage is how many charges one request of the walk asks for (the
// protocol's largest page); ledgerPages bounds one run, the next run goes on.
const (
	ledgerPage  = 100
	ledgerPages = 100
)

// New returns the reconciler, a River worker; reg receives its metrics.
func New(db *pgxpool.Pool, charges ChargeList, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Reconciler, error) {
	r := &Reconciler{db: db, charges: charges, cfg: cfg, log: log, now: time.Now, pageSize: ledgerPage,
		findings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_ledger_findings_total",
			Help: "Provider charges that no paid order accounts for, found by the ledger reconciliation, by kind: no_order, order_failed, second_charge and charge_mismatch need a person; settled_paid was resolved.",
		}, []string{"kind"}),
		checked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_ledger_charges_checked_total",
			Help: "Provider charges the ledger reconciliation has checked against the orders table.",
		}),
	}
	for _, c := range []prometheus.Collector{r.findings, r.checked} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{NoOrder, OrderFailed, SecondCharge, Mismatch, Settled} {
		r.findings.WithLabelValues(k) // exported at 0 from the start, for alerts
	}
	return r, nil
}

// Periodic schedules the walk, once at start too.
func Periodic(cfg Config) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(cfg.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return Args{}, nil },
		&river.PeriodicJobOpts{ID: "reconcile_provider_ledger", RunOnStart: true})
}

// walk is where the reconciliation stands: the window of creation time
// being walked and the last charge checked in it, or, between windows,
// where the next one starts.
//
// The walk never trusts the order of the provider's list. Stripe lists
// newest first, in whole seconds of creation time, and stamps a charge's
// creation time when the request starts, so a charge whose request it
// worked on for long appears after charges created later than it. A window [from, to] walked by cursor
// sees every charge the list held when the window began (a list only ever
// gains charges); a charge that appeared after that was created after to
// less Late, so the next window, which starts at to less Late, sees it.
type walk struct {
	from, to time.Time // the window; both zero between windows
	cursor   string    // the last charge checked in the window
	// waitingFrom is the earliest creation time of a charge the window
	// left for later (its order unsettled within the grace); zero if none.
	waitingFrom time.Time
	nextFrom    time.Time
}

// open reports whether a window is being walked.
func (w walk) open() bool { return !w.to.IsZero() }

// closed is w with its window done: the next one starts Late before this
// one's end, or at the earliest charge it left for later.
func (w walk) closed(late time.Duration) walk {
	next := w.to.Add(-late)
	if !w.waitingFrom.IsZero() && w.waitingFrom.Before(next) {
		next = w.waitingFrom
	}
	return walk{nextFrom: next}
}

// Work walks one window of the charge list, a page at a time: the window
// a run cut short (a crash, a provider that fails, the page bound) left
// open, or a new one from where the last ended to now. Each page's
// findings, settles and the walk's new state commit together, so a walk
// resumes after the last page it finished, and a page walked twice finds
// nothing new.
func (r *Reconciler) Work(ctx context.Context, _ *river.Job[Args]) error {
	w, err := r.load(ctx)
	if err != nil {
		return err
	}
	if !w.open() {
		w = walk{from: w.nextFrom, to: r.now(), nextFrom: w.nextFrom}
	}
	for range ledgerPages {
		q := payment.ListQuery{Limit: r.pageSize, StartingAfter: w.cursor, CreatedGTE: w.from, CreatedLTE: w.to}
		page, err := r.charges.ListCharges(ctx, q)
		if errors.Is(err, payment.ErrPermanent) && w.cursor != "" {
			// The provider no longer knows the cursor's charge: walk the
			// window again from its start. Charges checked already are
			// checked again, which finds nothing new.
			r.log.WarnContext(ctx, "ledger reconciliation: the provider refused the cursor's charge; walking the window again", "charge_id", w.cursor, "err", err)
			w.cursor = ""
			continue
		}
		if err != nil {
			return fmt.Errorf("list provider charges from %s to %s after %q: %w", w.from.Format(time.RFC3339Nano), w.to.Format(time.RFC3339Nano), w.cursor, err)
		}
		if w, err = r.checkPage(ctx, w, page); err != nil {
			return err
		}
		if !w.open() {
			return nil
		}
	}
	return nil
}

// checkPage checks a page's charges and commits what it found with the
// walk's new state: the cursor at the page's last charge, or, on the
// window's last page, the window closed.
func (r *Reconciler) checkPage(ctx context.Context, w walk, page payment.ChargePage) (walk, error) {
	var (
		found []finding
		next  walk
	)
	err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		found, next = nil, w
		orders, err := order.GetMany(ctx, tx, orderIDs(page.Charges))
		if err != nil {
			return err
		}
		for _, ch := range page.Charges {
			f, wait, err := r.check(ctx, tx, ch, orders)
			if err != nil {
				return err
			}
			if wait && (next.waitingFrom.IsZero() || ch.Created.Before(next.waitingFrom)) {
				next.waitingFrom = ch.Created
			}
			if f != nil {
				if err := recordFinding(ctx, tx, ch, f); err != nil {
					return err
				}
				found = append(found, *f)
			}
		}
		for _, pi := range page.Pending {
			// It may yet move money: the next window starts no later than it, so
			// it is read again until it succeeds or fails — unless it has been
			// pending longer than a first walk looks back (a requires_action the
			// customer never completed), which would pin every window to it.
			if r.now().Sub(pi.Created) < r.cfg.Lookback && (next.waitingFrom.IsZero() || pi.Created.Before(next.waitingFrom)) {
				next.waitingFrom = pi.Created
			}
		}
		if page.Cursor != "" {
			next.cursor = page.Cursor
		}
		if !page.HasMore {
			next = next.closed(r.cfg.Late)
		}
		return storeWalk(ctx, tx, next)
	})
	if err != nil {
		return w, fmt.Errorf("reconcile provider charges: %w", err)
	}
	for _, f := range found {
		r.report(ctx, f)
	}
	r.checked.Add(float64(len(page.Charges)))
	return next, nil
}

// orderIDs returns the references of charges that are order ids.
func orderIDs(charges []payment.ListedCharge) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(charges))
	for _, ch := range charges {
		if id, err := uuid.Parse(ch.Reference); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// finding is what the walk found about one charge.
type finding struct {
	charge      payment.ListedCharge
	kind        string
	orderStatus order.Status // "" for no_order
	recorded    bool         // new: not found by an earlier walk
}

// check classifies one charge against its order, among the page's orders.
// wait: the order is unsettled and within its grace, or was settled while
// the walk looked at it; a later window checks the charge again.
func (r *Reconciler) check(ctx context.Context, tx pgx.Tx, ch payment.ListedCharge, orders map[uuid.UUID]order.Order) (*finding, bool, error) {
	id, err := uuid.Parse(ch.Reference)
	o, ok := orders[id]
	if err != nil || !ok { // no order of ours: lost, or a charge someone else made
		return &finding{charge: ch, kind: NoOrder}, false, nil //nolint:nilerr // the error is the finding
	}
	switch o.Status {
	case order.StatusPaid:
		if o.ChargeID == ch.ID {
			return nil, false, nil
		}
		return &finding{charge: ch, kind: SecondCharge, orderStatus: o.Status}, false, nil
	case order.StatusPaymentFailed:
		return &finding{charge: ch, kind: OrderFailed, orderStatus: o.Status}, false, nil
	}
	if r.now().Sub(o.UpdatedAt) < r.cfg.Grace {
		return nil, true, nil
	}
	to, err := order.SettlementFor(o, []order.Receipt{{ChargeID: ch.ID, Amount: ch.Amount, Currency: ch.Currency}})
	if errors.Is(err, order.ErrChargeMismatch) {
		return &finding{charge: ch, kind: Mismatch, orderStatus: o.Status}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	settled, changed, err := order.Settle(ctx, tx, o, to)
	if err != nil {
		return nil, false, err
	}
	if !changed { // settled meanwhile: checked again by a later window
		return nil, true, nil
	}
	// A second charge of the same order later in the page is a second
	// charge: the order is paid by this one now.
	orders[id] = settled
	return &finding{charge: ch, kind: Settled, orderStatus: settled.Status}, false, nil
}

// recordFinding stores f unless an earlier walk found it.
func recordFinding(ctx context.Context, tx pgx.Tx, ch payment.ListedCharge, f *finding) error {
	var status *string
	if f.orderStatus != "" {
		s := string(f.orderStatus)
		status = &s
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO ledger_findings (charge_id, reference, amount, currency, charged_at, kind, order_status)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (charge_id) DO NOTHING`, ch.ID, ch.Reference, ch.Amount, ch.Currency, ch.Created, f.kind, status)
	if err != nil {
		return fmt.Errorf("record finding for charge %s: %w", ch.ID, err)
	}
	f.recorded = tag.RowsAffected() == 1
	return nil
}

// report counts and logs a finding once.
func (r *Reconciler) report(ctx context.Context, f finding) {
	if !f.recorded {
		return
	}
	r.findings.WithLabelValues(f.kind).Inc()
	level, msg := slog.LevelError, "provider charge that no paid order accounts for; a person must decide (refund or fulfil)"
	if f.kind == Settled {
		level, msg = slog.LevelWarn, "provider charge for an order left unsettled; settled it as paid"
	}
	r.log.Log(ctx, level, msg, "kind", f.kind, "charge_id", f.charge.ID, "reference", f.charge.Reference,
		"amount", f.charge.Amount, "currency", f.charge.Currency, "charged_at", f.charge.Created)
}

// load reads where the walk stands. Before this release's first walk the
// previous release's watermark, the creation time of the last charge it
// checked, less Late, is where the first window starts; with neither, a
// first walk starts Lookback ago.
func (r *Reconciler) load(ctx context.Context) (walk, error) {
	var (
		w                   walk
		from, to, waitingAt *time.Time
	)
	err := r.db.QueryRow(ctx, `SELECT window_from, window_to, cursor, waiting_from, next_from FROM ledger_walk WHERE provider = 'payment'`).
		Scan(&from, &to, &w.cursor, &waitingAt, &w.nextFrom)
	switch {
	case err == nil:
		w.from, w.to, w.waitingFrom = deref(from), deref(to), deref(waitingAt)
		return w, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return w, fmt.Errorf("load the ledger walk: %w", err)
	}
	var last time.Time
	err = r.db.QueryRow(ctx, `SELECT last_created FROM ledger_watermark WHERE provider = 'payment'`).Scan(&last)
	switch {
	case err == nil:
		return walk{nextFrom: last.Add(-r.cfg.Late)}, nil
	case errors.Is(err, pgx.ErrNoRows):
		return walk{nextFrom: r.now().Add(-r.cfg.Lookback)}, nil
	}
	return w, fmt.Errorf("load the previous ledger watermark: %w", err)
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func orNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func storeWalk(ctx context.Context, tx pgx.Tx, w walk) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO ledger_walk (provider, window_from, window_to, cursor, waiting_from, next_from, updated_at)
		VALUES ('payment', $1, $2, $3, $4, $5, now())
		ON CONFLICT (provider) DO UPDATE SET window_from = $1, window_to = $2, cursor = $3, waiting_from = $4, next_from = $5, updated_at = now()`,
		orNull(w.from), orNull(w.to), w.cursor, orNull(w.waitingFrom), w.nextFrom)
	if err != nil {
		return fmt.Errorf("store the ledger walk: %w", err)
	}
	return nil
}

// Finding is one stored finding, for `checkout reconcile`.
type Finding struct {
	ChargeID, Reference, Currency, Kind string
	Amount                              int64
	OrderStatus                         string // empty for no_order
	ChargedAt, FoundAt                  time.Time
}

// Findings lists the stored findings, newest first.
func Findings(ctx context.Context, q order.Querier) ([]Finding, error) {
	rows, err := q.Query(ctx, `SELECT charge_id, reference, currency, kind, amount, coalesce(order_status, ''), charged_at, found_at
		FROM ledger_findings ORDER BY found_at DESC, charge_id`)
	if err != nil {
		return nil, fmt.Errorf("list ledger findings: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Finding, error) {
		var f Finding
		err := row.Scan(&f.ChargeID, &f.Reference, &f.Currency, &f.Kind, &f.Amount, &f.OrderStatus, &f.ChargedAt, &f.FoundAt)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list ledger findings: %w", err)
	}
	return found, nil
}
