package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// ledgerBundle is a reconciler on a fresh database, walking the charge list
// of a simulator over HTTP.
type ledgerBundle struct {
	sim    *simtest.Server
	db     *pgxpool.Pool
	client *payment.Client
	r      *Reconciler
}

func setupLedger(t *testing.T, pageSize int) *ledgerBundle {
	t.Helper()
	sim := simtest.Start(t, 0)
	client, err := payment.NewClient(payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"})
	if err != nil {
		t.Fatal(err)
	}
	b := &ledgerBundle{sim: sim, db: dbtest.Pool(t), client: client}
	b.r = b.reconciler(t, client, pageSize)
	return b
}

// reconciler is a new reconciler on b's database, as a restarted worker
// builds one.
func (b *ledgerBundle) reconciler(t *testing.T, charges ChargeList, pageSize int) *Reconciler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Grace = time.Minute
	r, err := New(b.db, charges, cfg, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r.pageSize = pageSize
	return r
}

// charge has the provider charge reference under key ("order-<reference>"
// by default, the client's key) and returns the PaymentIntent's id.
func (b *ledgerBundle) charge(t *testing.T, reference string, key ...string) string {
	t.Helper()
	k := "order-" + reference
	if len(key) > 0 {
		k = key[0]
	}
	return b.sim.Charge(t, reference, k)
}

// order stores an order in status, last changed age ago, paid by chargeID
// when paid.
func (b *ledgerBundle) order(t *testing.T, id uuid.UUID, status order.Status, chargeID string, age time.Duration) uuid.UUID {
	t.Helper()
	var reason any
	if status == order.StatusPaymentFailed {
		reason = order.ReasonProviderUnavailable
	}
	var charge any
	if chargeID != "" {
		charge = chargeID
	}
	if _, err := b.db.Exec(context.Background(), `
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, charge_id, failure_reason,
		                    created_at, updated_at, last_attempt_at)
		VALUES ($1, $2, 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]', 2598, $3, $4,
		        now() - make_interval(secs => $5), now() - make_interval(secs => $5), now() - make_interval(secs => $5))`,
		id, status, charge, reason, age.Seconds()); err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *ledgerBundle) work(t *testing.T, r *Reconciler) error {
	t.Helper()
	return r.Work(context.Background(), nil)
}

// findings returns the stored findings as "kind reference" lines, sorted.
func (b *ledgerBundle) findings(t *testing.T) []string {
	t.Helper()
	found, err := Findings(context.Background(), b.db)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range found {
		lines = append(lines, f.Kind+" "+f.Reference)
	}
	sort.Strings(lines)
	return lines
}

func sorted(lines ...string) []string { sort.Strings(lines); return lines }

// TestLedgerFindsEveryChargeNoPaidOrderAccountsFor: a walk checks every
// charge, over several pages, and records the four kinds of finding; the
// unsettled order past its grace is settled as paid, and nothing is
// charged.
func TestLedgerFindsEveryChargeNoPaidOrderAccountsFor(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	paid := uuid.New()
	b.order(t, paid, order.StatusPaid, b.charge(t, paid.String()), time.Hour)
	lost := uuid.New() // no such order: lost in a failover
	b.charge(t, lost.String())
	failed := b.order(t, uuid.New(), order.StatusPaymentFailed, "", time.Hour)
	b.charge(t, failed.String())
	twice := uuid.New()
	b.order(t, twice, order.StatusPaid, b.charge(t, twice.String()), time.Hour)
	b.charge(t, twice.String(), "a-second-key")
	stuck := b.order(t, uuid.New(), order.StatusPending, "", time.Hour)
	stuckCharge := b.charge(t, stuck.String())
	b.charge(t, "not-an-order-id")
	st := b.stats(t)

	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	want := sorted(NoOrder+" "+lost.String(), OrderFailed+" "+failed.String(),
		SecondCharge+" "+twice.String(), Settled+" "+stuck.String(), NoOrder+" not-an-order-id")
	if got := b.findings(t); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if o, err := order.Get(context.Background(), b.db, stuck); err != nil || o.Status != order.StatusPaid || o.ChargeID != stuckCharge {
		t.Errorf("unsettled order past its grace = %+v, %v; want paid by %s", o, err, stuckCharge)
	}
	if got := testutil.ToFloat64(b.r.checked); got != 7 {
		t.Errorf("charges checked = %v, want 7", got)
	}
	if after := b.stats(t); after != st {
		t.Errorf("the provider's charges changed during the walk: %d → %d", st, after)
	}
}

// stats is how many charges the provider holds.
func (b *ledgerBundle) stats(t *testing.T) int {
	t.Helper()
	n := 0
	for after := ""; ; {
		page, err := b.client.ListCharges(context.Background(), payment.ListQuery{Limit: 100, StartingAfter: after})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Charges)
		if !page.HasMore {
			return n
		}
		after = page.Cursor
	}
}

// failingAfter serves pages, then fails, as a provider going down mid-walk.
type failingAfter struct {
	ChargeList
	pages atomic.Int32
	limit int32
}

func (f *failingAfter) ListCharges(ctx context.Context, q payment.ListQuery) (payment.ChargePage, error) {
	if f.pages.Add(1) > f.limit {
		return payment.ChargePage{}, fmt.Errorf("provider down: %w", payment.ErrTransient)
	}
	return f.ChargeList.ListCharges(ctx, q)
}

// TestLedgerResumesWhereItStopped: a walk cut short by a provider that
// fails keeps what its finished pages found; a new reconciler — a restarted
// worker — resumes the window after the last page, finds the rest once,
// and reports nothing twice; the next window reads the last one's
// look-back again and reports only the charge made since.
func TestLedgerResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	var lost []string
	for range 5 {
		id := uuid.NewString()
		b.charge(t, id)
		lost = append(lost, NoOrder+" "+id)
	}
	if err := b.work(t, b.reconciler(t, &failingAfter{ChargeList: b.client, limit: 1}, 2)); err == nil {
		t.Fatal("a walk whose provider failed on its second page reported no error")
	}
	if got := len(b.findings(t)); got != 2 {
		t.Fatalf("after the first page: %d findings, want 2", got)
	}
	restarted := b.reconciler(t, b.client, 2)
	if err := b.work(t, restarted); err != nil {
		t.Fatal(err)
	}
	if got, want := b.findings(t), sorted(lost...); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the restart: %v, want each lost charge once: %v", got, want)
	}
	if got := testutil.ToFloat64(restarted.findings.WithLabelValues(NoOrder)); got != 3 {
		t.Errorf("the restarted walk reported %v findings, want the 3 the first did not", got)
	}
	if got := testutil.ToFloat64(restarted.checked); got != 3 {
		t.Errorf("the restarted walk checked %v charges, want the 3 after its cursor", got)
	}
	b.charge(t, uuid.NewString())
	if err := b.work(t, restarted); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(restarted.findings.WithLabelValues(NoOrder)); got != 4 {
		t.Errorf("after a charge made since: %v findings reported, want 4", got)
	}
	if got := testutil.ToFloat64(restarted.checked); got != 3+6 {
		t.Errorf("charges checked = %v, want 3 and then all 6 again (the look-back covers them)", got)
	}
}

// chargingDuring makes a charge after serving the first page, as one
// landing while the walk is under way.
type chargingDuring struct {
	ChargeList
	b     *ledgerBundle
	t     *testing.T
	ref   string
	calls atomic.Int32
}

func (c *chargingDuring) ListCharges(ctx context.Context, q payment.ListQuery) (payment.ChargePage, error) {
	page, err := c.ChargeList.ListCharges(ctx, q)
	if c.calls.Add(1) == 1 {
		c.b.charge(c.t, c.ref)
	}
	return page, err
}

// TestLedgerSeesAChargeMadeWhileItWalks: a charge made after the walk read
// its first page is created after the window's end; the next window finds
// it.
func TestLedgerSeesAChargeMadeWhileItWalks(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	for range 3 {
		b.charge(t, uuid.NewString())
	}
	late := uuid.NewString()
	if err := b.work(t, b.reconciler(t, &chargingDuring{ChargeList: b.client, b: b, t: t, ref: late}, 2)); err != nil {
		t.Fatal(err)
	}
	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	found := b.findings(t)
	if len(found) != 4 || !strings.Contains(strings.Join(found, ","), late) {
		t.Errorf("findings %v; want 4, the late charge among them", found)
	}
}

// TestLedgerWaitsForAnOrdersOwnRecovery: a charge for an unsettled order
// within its grace is neither a finding nor settled by the walk, which goes
// on past it; the next window starts no later than that charge, so once
// the grace has passed it is checked again — even with no look-back — and
// settled.
func TestLedgerWaitsForAnOrdersOwnRecovery(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	b.r.cfg.Late = 0 // no look-back
	young := b.order(t, uuid.New(), order.StatusPending, "", 0)
	chargeID := b.charge(t, young.String())
	after := uuid.NewString()
	b.charge(t, after)
	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	if got, want := b.findings(t), []string{NoOrder + " " + after}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("walk within the order's grace found %v; want only the charge after it, %v", got, want)
	}
	if o, _ := order.Get(context.Background(), b.db, young); o.Status != order.StatusPending {
		t.Fatalf("order within its grace = %s, want left pending for its own recovery", o.Status)
	}
	// Its own recovery has not settled it by the end of the grace.
	if _, err := b.db.Exec(context.Background(), `UPDATE orders SET updated_at = now() - interval '1 hour' WHERE id = $1`, young); err != nil {
		t.Fatal(err)
	}
	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	if got, want := b.findings(t), sorted(NoOrder+" "+after, Settled+" "+young.String()); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the grace: %v, want %v", got, want)
	}
	if o, _ := order.Get(context.Background(), b.db, young); o.Status != order.StatusPaid || o.ChargeID != chargeID {
		t.Errorf("order past its grace = %s by %q, want paid by %s", o.Status, o.ChargeID, chargeID)
	}
}

// fakeList is a provider's charge list in memory, so a test decides when
// each charge appears in it. It pages by cursor in the order the provider
// keeps: the order charges appeared in, as the simulator's, or newest
// first by creation time, as Stripe's.
type fakeList struct {
	mu          sync.Mutex
	newestFirst bool
	charges     []payment.ListedCharge // in the order they appeared
}

// appear adds a charge for reference created at created, and returns it.
func (f *fakeList) appear(reference string, created time.Time, amount int64, currency string) payment.ListedCharge {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := payment.ListedCharge{ID: fmt.Sprintf("ch_%03d", len(f.charges)), Reference: reference, Amount: amount, Currency: currency, Created: created}
	f.charges = append(f.charges, ch)
	return ch
}

func (f *fakeList) ListCharges(_ context.Context, q payment.ListQuery) (payment.ChargePage, error) {
	f.mu.Lock()
	listed := slices.Clone(f.charges)
	f.mu.Unlock()
	if f.newestFirst {
		sort.SliceStable(listed, func(i, j int) bool {
			if !listed[i].Created.Equal(listed[j].Created) {
				return listed[i].Created.After(listed[j].Created)
			}
			return listed[i].ID > listed[j].ID
		})
	}
	if q.StartingAfter != "" {
		i := slices.IndexFunc(listed, func(ch payment.ListedCharge) bool { return ch.ID == q.StartingAfter })
		if i < 0 {
			return payment.ChargePage{}, fmt.Errorf("no such charge %s: %w", q.StartingAfter, payment.ErrPermanent)
		}
		listed = listed[i+1:]
	}
	var page payment.ChargePage
	for _, ch := range listed {
		if ch.Created.Before(q.CreatedGTE) || !q.CreatedLTE.IsZero() && ch.Created.After(q.CreatedLTE) {
			continue
		}
		if len(page.Charges) == q.Limit {
			page.HasMore = true
			break
		}
		page.Charges = append(page.Charges, ch)
		page.Cursor = ch.ID
	}
	return page, nil
}

// TestLedgerFindsAChargeThatAppearsLate: charge A's request reached the
// provider first and hung there; charge B, created 50 µs later, finished
// first. A walk checks B; then A appears, after B, created before it. The
// next walk finds A.
func TestLedgerFindsAChargeThatAppearsLate(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	list := &fakeList{}
	r := b.reconciler(t, list, 2)
	createdA := time.Now().Add(-10 * time.Second)
	refA, refB := uuid.NewString(), uuid.NewString()
	list.appear(refB, createdA.Add(50*time.Microsecond), 2598, "USD")
	if err := b.work(t, r); err != nil {
		t.Fatal(err)
	}
	list.appear(refA, createdA, 2598, "USD")
	for range 3 {
		if err := b.work(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.findings(t), sorted(NoOrder+" "+refA, NoOrder+" "+refB); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("findings %v, want both charges: %v", got, want)
	}
}

// TestLedgerFindsLateChargesInANewestFirstList: a provider that lists
// newest first, a page of two at a time. Five charges are walked; then a
// charge created among them appears (its request hung), and one made since;
// the next walk finds both and reports nothing twice.
func TestLedgerFindsLateChargesInANewestFirstList(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	list := &fakeList{newestFirst: true}
	r := b.reconciler(t, list, 2)
	start := time.Now().Add(-30 * time.Second)
	var want []string
	for i := range 5 {
		ref := uuid.NewString()
		list.appear(ref, start.Add(time.Duration(i)*time.Second), 2598, "USD")
		want = append(want, NoOrder+" "+ref)
	}
	if err := b.work(t, r); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(r.findings.WithLabelValues(NoOrder)); got != 5 {
		t.Fatalf("first walk reported %v findings, want 5", got)
	}
	hung, since := uuid.NewString(), uuid.NewString()
	list.appear(hung, start.Add(1500*time.Millisecond), 2598, "USD")
	list.appear(since, time.Now(), 2598, "USD")
	want = append(want, NoOrder+" "+hung, NoOrder+" "+since)
	for range 2 {
		if err := b.work(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.findings(t); strings.Join(got, ",") != strings.Join(sorted(want...), ",") {
		t.Errorf("findings %v, want %v", got, sorted(want...))
	}
	if got := testutil.ToFloat64(r.findings.WithLabelValues(NoOrder)); got != 7 {
		t.Errorf("findings reported = %v, want each of the 7 once", got)
	}
}

// TestLedgerDoesNotSettleAMismatchedCharge: an unsettled order past its
// grace and a charge for its reference of another amount or currency: the
// walk records the charge for a person and leaves the order unsettled, as
// the lookup does; a matching charge settles its own order.
func TestLedgerDoesNotSettleAMismatchedCharge(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	list := &fakeList{}
	r := b.reconciler(t, list, 2)
	euro := b.order(t, uuid.New(), order.StatusPending, "", time.Hour)  // 2598 USD
	cents := b.order(t, uuid.New(), order.StatusPending, "", time.Hour) // 2598 USD
	good := b.order(t, uuid.New(), order.StatusPending, "", time.Hour)  // 2598 USD
	now := time.Now()
	list.appear(euro.String(), now.Add(-3*time.Second), 2598, "EUR")
	list.appear(cents.String(), now.Add(-2*time.Second), 1, "USD")
	paidBy := list.appear(good.String(), now.Add(-time.Second), 2598, "USD")
	if err := b.work(t, r); err != nil {
		t.Fatal(err)
	}
	want := sorted(Mismatch+" "+euro.String(), Mismatch+" "+cents.String(), Settled+" "+good.String())
	if got := b.findings(t); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("findings %v, want %v", got, want)
	}
	for id, status := range map[uuid.UUID]order.Status{euro: order.StatusPending, cents: order.StatusPending, good: order.StatusPaid} {
		if o, err := order.Get(context.Background(), b.db, id); err != nil || o.Status != status {
			t.Errorf("order %s = %s, %v; want %s", id, o.Status, err, status)
		}
	}
	if o, _ := order.Get(context.Background(), b.db, good); o.ChargeID != paidBy.ID {
		t.Errorf("matching order paid by %q, want %s", o.ChargeID, paidBy.ID)
	}
}

// TestLedgerStartsFromThePreviousReleasesWatermark: the first walk after
// an upgrade starts where the previous release's walk stopped, less the
// look-back: a charge created a minute before that watermark is checked,
// one created an hour before it (walked by then) is not.
func TestLedgerStartsFromThePreviousReleasesWatermark(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	list := &fakeList{}
	r := b.reconciler(t, list, 2)
	mark := time.Now().Add(-10 * time.Second)
	if _, err := b.db.Exec(context.Background(), `INSERT INTO ledger_watermark (provider, last_charge_id, last_created, updated_at) VALUES ('payment', 'ch_old', $1, now())`, mark); err != nil {
		t.Fatal(err)
	}
	walked, late := uuid.NewString(), uuid.NewString()
	list.appear(walked, mark.Add(-time.Hour), 2598, "USD")
	list.appear(late, mark.Add(-time.Minute), 2598, "USD")
	if err := b.work(t, r); err != nil {
		t.Fatal(err)
	}
	if got, want := b.findings(t), []string{NoOrder + " " + late}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("findings %v, want %v", got, want)
	}
}

// TestLedgerHoldsTheWindowForAPendingPaymentIntent: a PaymentIntent waiting for the
// customer (requires_action) has moved no money yet, so it is no finding, but it may still
// succeed: the next window starts no later than its creation, so the walk reads it again
// until it settles — even with no look-back.
func TestLedgerHoldsTheWindowForAPendingPaymentIntent(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	b.r.cfg.Late = 0 // no look-back
	_, err := b.client.Charge(context.Background(), payment.ChargeRequest{
		OrderID: uuid.NewString(), Amount: 2598, Currency: "USD", PaymentMethod: "pm_card_authenticationRequired"})
	if !payment.IsPending(err) {
		t.Fatalf("charge with a card asking for authentication: %v, want a pending PaymentIntent", err)
	}
	created := time.Now()
	b.charge(t, uuid.NewString()) // a charge beside it, which the walk reports
	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	if got := len(b.findings(t)); got != 1 {
		t.Errorf("findings: %d, want the one charge (a pending PaymentIntent is none)", got)
	}
	var nextFrom time.Time
	if err := b.db.QueryRow(context.Background(), `SELECT next_from FROM ledger_walk WHERE provider = 'payment'`).Scan(&nextFrom); err != nil {
		t.Fatal(err)
	}
	if nextFrom.After(created) {
		t.Errorf("next window starts at %v, after the pending PaymentIntent's creation (before %v): it would not be read again",
			nextFrom.Format(time.RFC3339Nano), created.Format(time.RFC3339Nano))
	}
}
