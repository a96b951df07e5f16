package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/experiment"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// TestFleetBreaker runs the fleet breaker on the real binaries: three checkout
// processes and two workers on one PostgreSQL, each process reaching the
// provider through a proxy of its own so the test knows who called.
//
// First the seed outage (docs/design.md, "Experiment"; 30 req/s round-robin):
// every order is answered 201 or 202 and paid exactly once after the
// drain, /health never fails on any replica, and the fleet's shared state
// reached every process — each one exported and logged the imposed open
// state, and none sent the provider a charge while the fleet refused for
// it (open, or half-open while another process probes).
//
// Then an operator forces the payment dependency open with the real
// `checkout breaker open` under 20 req/s: every order is deferred (202),
// the workers snooze their charges, the provider sees no charge at all;
// `checkout breaker clear` → every order is paid exactly once.
func TestFleetBreaker(t *testing.T) {
	t.Parallel()
	f := startFleet(t, "on")
	t.Run("seed outage", f.seedOutage)
	if t.Failed() {
		return // the forced phase needs a drained, closed fleet
	}
	t.Run("forced open", f.forcedOpen)
}

// fleet is the stack of TestFleetBreaker.
type fleet struct {
	dbURL     string
	db        *pgxpool.Pool
	sim       *process.Process
	checkouts []*member
	members   []*member // the checkouts, then the workers
}

// member is one checkout or worker process and its way to the provider.
type member struct {
	name   string
	proc   *process.Process
	edge   *edge
	policy string // its payment policy's name in metrics and logs
}

func startFleet(t *testing.T, fleetBreaker string) *fleet {
	t.Helper()
	f := &fleet{dbURL: dbtest.URL(t)}
	db, err := pgxpool.New(context.Background(), f.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	f.db = db
	f.sim = process.StartBinary(t, binary("paymentsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0"})
	for _, m := range []struct {
		binary, policy string
		n              int
	}{{"checkout", "payment", 3}, {"worker", "payment-worker", 2}} {
		for i := range m.n {
			e := newEdge(t, f.sim.URL)
			p := process.StartBinary(t, binary(m.binary), nil, map[string]string{
				"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": f.dbURL, "STRIPE_API_BASE": e.URL,
				"FLEET_BREAKER": fleetBreaker,
			})
			mem := &member{name: fmt.Sprintf("%s%d", m.binary, i), proc: p, edge: e, policy: m.policy}
			f.members = append(f.members, mem)
			if m.binary == "checkout" {
				f.checkouts = append(f.checkouts, mem)
			}
		}
	}
	return f
}

func (f *fleet) checkoutURLs() string {
	urls := make([]string, len(f.checkouts))
	for i, m := range f.checkouts {
		urls[i] = m.proc.URL
	}
	return strings.Join(urls, ",")
}

func (f *fleet) seedOutage(t *testing.T) {
	cfg := experiment.DefaultConfig() // the seed outage: 6 s, provider +10 s from 0.5 s for 3 s
	cfg.CheckoutURL, cfg.SimulatorURL, cfg.DatabaseURL = f.checkoutURLs(), f.sim.URL, f.dbURL
	cfg.Rate = 30
	cfg.DrainTimeout = 45 * time.Second
	// Six processes and this test share the machine: a request that goes
	// out late changes the figures, which are the experiment's business
	// (scripts/experiment-fleet), not the invariants held here.
	cfg.MaxLag = time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := experiment.Run(context.Background(), cfg)
	if late, ok := errors.AsType[*experiment.ScheduleError](err); ok {
		t.Fatalf("the load generator fell behind schedule, so the run proves nothing: %v", late)
	}
	if err != nil {
		t.Fatalf("experiment: %v", err)
	}

	// Every order answered 201/202, and paid exactly once after the drain.
	// Six processes, this test and the rest of make test share two cores:
	// a starved checkout's API pool may fill and answer 503 "at capacity",
	// which stores nothing. Those orders must have left nothing behind.
	orders := r.Checkout.All.Count
	refused := r.Checkout.All.Outcomes["503"]
	if refused > 0 {
		t.Logf("%d orders answered 503 (a checkout's API pool full on a busy machine): checked to have stored nothing", refused)
	}
	checkEveryOrderAccepted(t, r, "503")
	a := r.Audit
	if accepted := orders - refused; !a.Drained || a.Accepted != accepted || a.Stored != accepted || a.Paid != accepted || a.ProviderCharges != accepted {
		t.Errorf("after the drain (drained %v): %d orders sent, %d accepted, %d stored, %d paid, %d still pending, %d provider charges; want every order not refused 503 paid once",
			a.Drained, orders, a.Accepted, a.Stored, a.Paid, a.StillPending, a.ProviderCharges)
	}

	// /health never failed, on any replica: probe i went to replica i mod 3.
	probes, failures := make([]int, len(f.checkouts)), make([]int, len(f.checkouts))
	for _, s := range r.Samples {
		if s.Probe != experiment.ProbeHealth {
			continue
		}
		i := int(math.Round(float64(s.At)/float64(cfg.HealthInterval))) % len(f.checkouts)
		probes[i]++
		if s.Outcome != "200" {
			failures[i]++
		}
	}
	for i, m := range f.checkouts {
		if probes[i] == 0 || failures[i] != 0 {
			t.Errorf("%s: /health failed %d of %d probes, want 0 of at least 1", m.name, failures[i], probes[i])
		}
	}

	// Sharing: every process had the fleet's refusing state imposed
	// (exported and logged) — open, or half-open with another process
	// holding the probe lease, for one that read the row only after the
	// open time (a busy machine delays a notification past the 1 s) — and
	// sent no charge while the fleet refused for it. Each checkout still
	// trips its own breaker on the first wave (it sees a third of the load,
	// and the fleet only shares the opening); what sharing saves shows
	// after it: one process probes for all.
	for _, m := range f.members {
		fam := scrape(t, m.proc.URL)
		imposed := value(fam, "resilience_breaker_imposed_total", "name", m.policy, "source", "fleet", "state", "open") +
			value(fam, "resilience_breaker_imposed_total", "name", m.policy, "source", "fleet", "state", "half-open")
		tripped := value(fam, "resilience_breaker_transitions_total", "name", m.policy, "to", "open")
		probed := value(fam, "resilience_breaker_imposed_total", "name", m.policy, "source", "fleet", "state", "probing")
		windows := refusals(t, m)
		if imposed == 0 || len(windows) == 0 {
			t.Errorf("%s: the fleet's refusing state was imposed %v times (metric), logged in %d windows; want at least once: the fleet did not share the opening",
				m.name, imposed, len(windows))
		}
		var checked time.Duration
		for _, w := range windows {
			checked += w.end.Sub(w.start)
			if sent := m.edge.chargesBetween(w.start, w.end); len(sent) != 0 {
				t.Errorf("%s: %d charges reached the provider while the fleet's %s state was imposed on it (%s to %s): %v; want none",
					m.name, len(sent), w.state, w.start.Format(time.StampMilli), w.end.Format(time.StampMilli), sent)
			}
		}
		t.Logf("%s: tripped its own breaker %v times, probed for the fleet %v times; %d windows (%v) of fleet refusal checked; %d charges in all",
			m.name, tripped, probed, len(windows), checked.Round(time.Millisecond), m.edge.charges())
	}
	t.Logf("seed outage: %d orders %v, provider max in flight %d (outage) / %d (run), breaker %d transitions on %s, drained in %v",
		orders, r.Checkout.All.Outcomes, a.ProviderMaxInFlightOutage, a.ProviderMaxInFlight, len(r.Breaker.Transitions),
		f.checkouts[0].name, time.Duration(a.DrainWait).Round(time.Millisecond))
}

// admitSlack is how long after a process logged that the fleet refuses
// for it a charge it let through before may still reach its proxy: a call
// is checked against the breaker's state again once it has its slot of the
// concurrency limit, and the request is written after that by a process
// sharing two cores with five others and this test.
const admitSlack = 500 * time.Millisecond

// window is a span in which the fleet refused every call for a process:
// state open, or half-open (another process probes).
type window struct {
	state      string
	start, end time.Time
}

// refusals reads m's "circuit breaker state imposed" and "… released" log
// lines. A fleet state open or half-open refuses every call from the line
// until its hold ends or the next line changes it (this process takes the
// probe lease, the verdict releases it). A window that does not follow
// another starts admitSlack late (see there). A renewal of the same state
// is not logged, so a window may end early: that only checks less.
func refusals(t *testing.T, m *member) []window {
	t.Helper()
	var out []window
	var cur *window
	for line := range strings.SplitSeq(m.proc.Logs(), "\n") {
		if !strings.Contains(line, `"circuit breaker state imposed"`) && !strings.Contains(line, `"circuit breaker state released"`) {
			continue
		}
		var e struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Name   string    `json:"name"`
			Source string    `json:"source"`
			State  string    `json:"state"`
			Hold   int64     `json:"hold_for"` // nanoseconds, as slog's JSON handler writes a Duration
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%s: unreadable log line %q: %v", m.name, line, err)
		}
		if e.Name != m.policy {
			continue
		}
		follows := false
		if cur != nil {
			follows = e.Time.Before(cur.end)
			cur.end = minTime(cur.end, e.Time)
			out = append(out, *cur)
			cur = nil
		}
		if e.Msg != "circuit breaker state imposed" || e.Source != "fleet" || (e.State != "open" && e.State != "half-open") {
			continue
		}
		cur = &window{state: e.State, start: e.Time, end: e.Time.Add(time.Duration(e.Hold))}
		if !follows {
			cur.start = cur.start.Add(admitSlack)
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return slices.DeleteFunc(out, func(w window) bool { return !w.end.After(w.start) })
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (f *fleet) forcedOpen(t *testing.T) {
	ctx := context.Background()
	const orders, interval = 40, 50 * time.Millisecond // 20 req/s for 2 s
	f.resetProvider(t)

	f.breaker(t, "open", "payment", "--for", "2m")
	for _, m := range f.members {
		m.await(t, "the forced state", func(fam families) bool {
			return value(fam, "resilience_breaker_source", "name", m.policy, "source", "forced") == 1
		})
	}
	snoozedBefore := f.snoozed(t)

	ids := f.placeRoundRobin(t, "forced", orders, interval)
	// Hold the switch until the workers have met the orders' jobs and
	// snoozed them: "no provider call" must hold for them too, not only
	// for checkout, which never calls while forced.
	deadline := time.Now().Add(30 * time.Second)
	for f.snoozed(t) == snoozedBefore {
		if time.Now().After(deadline) {
			t.Error("no worker snoozed a charge job within 30 s of the forced orders")
			break
		}
		time.Sleep(200 * time.Millisecond) // polling real processes
	}
	st := fullStats(t, f.sim.URL)
	whileForced := st.TotalCharges
	if st.MaxInFlight != 0 || st.TotalCharges != 0 || st.Declines != 0 {
		t.Errorf("while forced open the provider saw charges: max in flight %d, %d charges, %d declines; want none",
			st.MaxInFlight, st.TotalCharges, st.Declines)
	}
	for _, m := range f.members {
		if n := m.edge.charges(); n != 0 {
			t.Errorf("%s sent %d charges while the dependency was forced open, want 0", m.name, n)
		}
	}

	f.breaker(t, "clear", "payment")
	waitAllTerminal(t, f.db, 45*time.Second)
	var paid int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1::uuid[]) AND status = 'paid'`, ids).Scan(&paid); err != nil {
		t.Fatal(err)
	}
	st = fullStats(t, f.sim.URL)
	if paid != len(ids) || st.TotalCharges != len(ids) || st.DuplicateReferences != 0 {
		t.Errorf("after the clear: %d of %d forced orders paid, %d provider charges, %d references charged twice; want each paid once",
			paid, len(ids), st.TotalCharges, st.DuplicateReferences)
	}
	for _, id := range ids {
		if n := st.ChargesByReference[id]; n != 1 {
			t.Errorf("order %s charged %d times, want once", id, n)
		}
	}
	t.Logf("forced open: %d orders deferred, %d charges until the clear; after it %d paid, %d charges", len(ids), whileForced, paid, st.TotalCharges)
}

// placeRoundRobin sends n orders, one every interval, to the checkouts in
// turn, and returns the ids of those answered 202; any other answer fails
// the test: while forced open every order is deferred.
func (f *fleet) placeRoundRobin(t *testing.T, prefix string, n int, interval time.Duration) []string {
	t.Helper()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		ids      []string
		statuses = map[int]int{}
	)
	client := &http.Client{Timeout: 3 * time.Second}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		base := f.checkouts[i%len(f.checkouts)].proc.URL
		wg.Go(func() {
			id, status := sendOrder(client, base, fmt.Sprintf("%s-%d", prefix, i))
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == http.StatusAccepted {
				ids = append(ids, id)
			}
		})
	}
	wg.Wait()
	if statuses[http.StatusAccepted] != n {
		t.Errorf("answers while forced open: %v (0: no answer); want %d × 202", statuses, n)
	}
	return ids
}

func sendOrder(client *http.Client, base, key string) (id string, status int) {
	req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(orderBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	var o struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&o)
	return o.ID, resp.StatusCode
}

// breaker runs the operator's switch, `checkout breaker ARGS…`, as an
// operator would: a one-off process with the fleet's DATABASE_URL.
func (f *fleet) breaker(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(binary("checkout"), append([]string{"breaker"}, args...)...)
	cmd.Env = []string{"DATABASE_URL=" + f.dbURL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("checkout breaker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("checkout breaker %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
}

// resetProvider clears the provider's ledger and counters, and each
// member's proxy tally, between the two phases.
func (f *fleet) resetProvider(t *testing.T) {
	t.Helper()
	resp, err := http.Post(f.sim.URL+"/admin/reset", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("reset the provider: status %d", resp.StatusCode)
	}
	if st := fullStats(t, f.sim.URL); st.MaxInFlight != 0 {
		t.Fatalf("the provider still has %d charges in flight after the drain", st.MaxInFlight)
	}
	for _, m := range f.members {
		m.edge.reset()
	}
}

// snoozed sums the workers' snoozed charge jobs.
func (f *fleet) snoozed(t *testing.T) float64 {
	t.Helper()
	var n float64
	for _, m := range f.members {
		if m.policy == "payment-worker" {
			n += value(scrape(t, m.proc.URL), "checkout_charge_jobs_total", "outcome", "snoozed")
		}
	}
	return n
}

// await polls m's /metrics until ok holds, for at most 10 s.
func (m *member) await(t *testing.T, what string, ok func(families) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(scrape(t, m.proc.URL)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not exported within 10 s", m.name, what)
		}
		time.Sleep(50 * time.Millisecond) // polling a real process
	}
}

type statsWithDeclines struct {
	providerStats
	Declines int `json:"declines"`
}

func fullStats(t *testing.T, simURL string) statsWithDeclines {
	t.Helper()
	resp, err := http.Get(simURL + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st statsWithDeclines
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// edge is one process's way to the provider: a transparent reverse proxy
// that notes when each charge request arrives, so the test can tell which
// process called the provider when. It changes nothing else: the
// simulator keeps working on requests whose caller gave up, whether the
// caller is checkout or this proxy.
type edge struct {
	*httptest.Server
	mu      sync.Mutex
	arrived []time.Time
}

func newEdge(t *testing.T, target string) *edge {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	e := &edge{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		// A caller that gave up (an attempt timeout) cancels its request
		// here too; that is no news worth a log line.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			e.mu.Lock()
			e.arrived = append(e.arrived, time.Now())
			e.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *edge) charges() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.arrived)
}

func (e *edge) chargesBetween(from, to time.Time) []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []time.Time
	for _, at := range e.arrived {
		if !at.Before(from) && at.Before(to) {
			out = append(out, at)
		}
	}
	return out
}

func (e *edge) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.arrived = nil
}

// families is a scrape of /metrics.
type families map[string]*dto.MetricFamily

func scrape(t *testing.T, baseURL string) families {
	t.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fam, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", baseURL, err)
	}
	return fam
}

// value sums the counters or gauges of family name whose labels include
// the given name/value pairs.
func value(fam families, name string, labels ...string) float64 {
	mf, ok := fam[name]
	if !ok {
		return 0
	}
	var sum float64
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}
