package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
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
	simURL string
	db     *pgxpool.Pool
	client *payment.Client
	r      *Reconciler
}

func setupLedger(t *testing.T, pageSize int) *ledgerBundle {
	t.Helper()
	sim := simtest.Start(t, 0)
	client, err := payment.NewClient(payment.Config{BaseURL: sim.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := &ledgerBundle{simURL: sim.URL, db: dbtest.Pool(t), client: client}
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
// by default, the client's key) and returns the charge id.
func (b *ledgerBundle) charge(t *testing.T, reference string, key ...string) string {
	t.Helper()
	k := "order-" + reference
	if len(key) > 0 {
		k = key[0]
	}
	body := fmt.Sprintf(`{"amount":2598,"currency":"USD","payment_method":"pm_card_visa","reference":%q}`, reference)
	req, _ := http.NewRequest(http.MethodPost, b.simURL+"/v1/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", k)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ch struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("charge %s: %d, %v", reference, resp.StatusCode, err)
	}
	return ch.ID
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
		after = page.Charges[len(page.Charges)-1].ID
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

// TestLedgerResumesFromItsWatermark: a walk cut short by a provider that
// fails keeps what its finished pages found; a new reconciler — a restarted
// worker — resumes after the last page, finds the rest once, and reports
// nothing twice; a later walk finds only charges made since.
func TestLedgerResumesFromItsWatermark(t *testing.T) {
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
		t.Errorf("the restarted walk checked %v charges, want the 3 after the stored watermark", got)
	}
	late := uuid.NewString()
	b.charge(t, late)
	if err := b.work(t, restarted); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(restarted.findings.WithLabelValues(NoOrder)); got != 4 {
		t.Errorf("after a charge made since: %v findings reported, want 4", got)
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
// its first page is found by the same walk.
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
	found := b.findings(t)
	if len(found) != 4 || !strings.Contains(strings.Join(found, ","), late) {
		t.Errorf("findings %v; want 4, the late charge among them", found)
	}
}

// TestLedgerWaitsForAnOrdersOwnRecovery: a charge for an unsettled order
// within its grace is neither a finding nor settled by the walk, which
// stops there; once the order's own recovery has settled it, the next walk
// finds nothing and goes on past it.
func TestLedgerWaitsForAnOrdersOwnRecovery(t *testing.T) {
	t.Parallel()
	b := setupLedger(t, 2)
	young := b.order(t, uuid.New(), order.StatusPending, "", 0)
	chargeID := b.charge(t, young.String())
	after := uuid.NewString()
	b.charge(t, after)
	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	if got := b.findings(t); len(got) != 0 {
		t.Fatalf("walk within the order's grace found %v; want nothing yet (not even the charge after it)", got)
	}
	if o, _ := order.Get(context.Background(), b.db, young); o.Status != order.StatusPending {
		t.Fatalf("order within its grace = %s, want left pending for its own recovery", o.Status)
	}
	// Its own recovery settles it meanwhile (the sweep's charge, a replay).
	if _, _, err := order.Settle(context.Background(), b.db, order.Order{ID: young}, order.Settlement{Status: order.StatusPaid, ChargeID: chargeID}); err != nil {
		t.Fatal(err)
	}
	if err := b.work(t, b.r); err != nil {
		t.Fatal(err)
	}
	if got, want := b.findings(t), []string{NoOrder + " " + after}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the order was settled: %v, want only %v", got, want)
	}
}
