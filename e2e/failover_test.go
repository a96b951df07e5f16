package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// startStandby makes a streaming standby of primary on a port of its own
// and starts it.
func startStandby(t *testing.T, primary *cluster) *cluster {
	t.Helper()
	s, err := newStandby(t, primary, freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newStandby makes a streaming standby of primary in a fresh directory
// (pg_basebackup -R with a replication slot, after a fast checkpoint, so a
// primary under load answers at once) and starts it on port. The test's end
// stops it and removes the directory.
func newStandby(t *testing.T, primary *cluster, port int) (*cluster, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "checkout-standby-pg")
	if err != nil {
		return nil, err
	}
	s := &cluster{bin: primary.bin, dir: dir, port: port, asRoot: primary.asRoot}
	t.Cleanup(func() {
		_ = s.pgCtl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	if s.asRoot {
		if out, err := exec.Command("chown", "postgres", dir).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chown: %w\n%s", err, out)
		}
	}
	if out, err := s.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", s.data(), "-R", "-C", "-S", "standby", "-X", "stream", "--checkpoint=fast").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w\n%s", err, out)
	}
	return s, s.start()
}

// replicate makes primary's commits wait for a standby
// (synchronous_standby_names = '*') or not, and waits until a standby
// streams from it in that mode.
func replicate(ctx context.Context, primary *cluster, synchronous bool) error {
	conn, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	names, want := "", "async"
	if synchronous {
		names, want = "*", "sync"
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '%s'`, names)); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	var state string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&state); err != nil {
			return err
		}
		if state == want {
			return nil
		}
	}
	return fmt.Errorf("standby not streaming as %s within 30 s: %q", want, state)
}

// failoverRun is what one run of the failover scenario saw.
type failoverRun struct {
	answers            []failoverAnswer
	killed, promoted   time.Time
	firstNewPrimary201 time.Time // the first 201 sent after the promotion
	// late counts by order id the charges that appeared in the provider's
	// list over a second after they were created (see watchList); with lag
	// only.
	late map[string]int
}

type failoverAnswer struct {
	key, id    string
	status     int
	sent, back time.Time
}

// TestFailoverToASynchronousStandbyLosesNoAcknowledgedOrder: orders arrive
// at 30/s; the primary is killed (pg_ctl stop -m immediate) and a
// synchronous standby promoted a second later. Checkout and worker, on a
// multi-host URL with target_session_attrs=read-write, find the new primary
// by themselves; every order acknowledged before, during or after the
// failover is in it, every one ends terminal, each paid once (invariant 12).
func TestFailoverToASynchronousStandbyLosesNoAcknowledgedOrder(t *testing.T) {
	t.Parallel()
	primary, standby, db := failoverPair(t, true)
	run, sim := runFailover(t, primary, standby, db, false)

	lost, _ := lostOrders(t, db, run)
	if len(lost) != 0 {
		t.Errorf("%d acknowledged orders lost in the failover to a synchronous standby, e.g. %+v", len(lost), lost[0])
	}
	waitAllTerminal(t, db, 90*time.Second)
	if st := simStats(t, sim.URL); st.DuplicateReferences != 0 {
		t.Errorf("%d orders charged twice", st.DuplicateReferences)
	}
	run.report(t)
}

// TestFailoverToALaggingAsynchronousStandbyIsReconciled: the same, with an
// asynchronous standby that stopped receiving 3 s before the primary died.
// Acknowledged orders are lost — counted here — and the provider holds a
// charge for every lost 201; the worker's ledger reconciliation lists each
// of those charges, and only those, within its interval of the heal — also
// the charges the provider took 2 s over, which appear in its list after
// charges created later.
func TestFailoverToALaggingAsynchronousStandbyIsReconciled(t *testing.T) {
	t.Parallel()
	primary, standby, db := failoverPair(t, false)
	run, sim := runFailover(t, primary, standby, db, true)

	lost, lostPaid := lostOrders(t, db, run)
	t.Logf("async failover: %d acknowledged orders lost, %d of them answered 201 (charged)", len(lost), lostPaid)
	if lostPaid == 0 {
		t.Fatal("the lagging standby lost no charged order: the scenario proves nothing")
	}
	// Every charge the provider holds for an order the new primary lacks.
	st := simStats(t, sim.URL)
	orphans := map[string]bool{}
	for ref := range st.ChargesByReference {
		var stored bool
		if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM orders WHERE id::text = $1)`, ref).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !stored {
			orphans[ref] = true
		}
	}
	want := len(orphans)
	late := 0
	for ref := range orphans {
		late += run.late[ref]
	}
	t.Logf("%d orphan charges, %d of them listed over a second after they were created (their requests took 2 s)", want, late)
	if late == 0 {
		t.Fatal("no orphan charge appeared late in the provider's list: the scenario proves nothing about late charges")
	}
	// Within one walk's interval of the promotion, the heal. (The worker's
	// River elects a leader again within its 5 s election interval, and
	// the new leader runs the walk at once.)
	deadline := run.promoted.Add(ledgerInterval)
	var found int
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM ledger_findings WHERE kind = 'no_order'`).Scan(&found); err != nil {
			t.Logf("count findings: %v", err)
			continue
		}
		if found >= want {
			t.Logf("every orphan charge found %.1f s after the promotion", time.Since(run.promoted).Seconds())
			break
		}
	}
	if found != want {
		t.Errorf("ledger reconciliation found %d charges without an order within %s of the promotion, want the %d the provider holds", found, ledgerInterval, want)
	}
	if st.DuplicateReferences != 0 {
		t.Errorf("%d orders charged twice", st.DuplicateReferences)
	}
	run.report(t)
}

// ledgerInterval is the worker's LEDGER_RECONCILE_INTERVAL in the failover
// runs.
const ledgerInterval = 10 * time.Second

// watchList polls the provider's PaymentIntents list (those created since
// since) every 100 ms until stop is called, and counts by order id the
// intents that appeared in it over a second after they were created: a poll
// sent a second after the end of an intent's creation second (Stripe's
// created is in whole seconds) did not list it, a later one did. Those are
// charges the provider worked on for long; they appear after charges created
// later, and the ledger walk must not miss them. Stripe's list is in order of
// creation, so appearing late shows only to a reader who watches it grow.
// Polls do not wait for each other, so a fault that slows the list does not
// slow the watch.
func watchList(t *testing.T, simURL string, since time.Time) (stop func() (late map[string]int)) {
	t.Helper()
	type poll struct {
		sent   time.Time
		listed map[string]bool
	}
	var (
		mu      sync.Mutex
		polls   []poll
		intents = map[string]listedIntent{}
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Go(func() {
				p := poll{sent: time.Now(), listed: map[string]bool{}}
				listed, err := listSince(ctx, simURL, since)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("watch the provider's list: %v", err)
					}
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, pi := range listed {
					p.listed[pi.ID] = true
					intents[pi.ID] = pi
				}
				polls = append(polls, p)
			})
		}
	}()
	return func() map[string]int {
		cancel()
		<-ticking
		wg.Wait()
		late := map[string]int{}
		for id, pi := range intents {
			overdue := time.Unix(pi.Created+2, 0)
			for _, p := range polls {
				if !p.sent.Before(overdue) && !p.listed[id] {
					late[pi.Metadata["order_id"]]++
					break
				}
			}
		}
		return late
	}
}

// listedIntent is a PaymentIntent of the provider's list, as watchList reads it.
type listedIntent struct {
	ID       string            `json:"id"`
	Created  int64             `json:"created"`
	Metadata map[string]string `json:"metadata"`
}

// listSince walks the provider's PaymentIntents list from the newest to
// those created in since's second.
func listSince(ctx context.Context, simURL string, since time.Time) ([]listedIntent, error) {
	var all []listedIntent
	for after := ""; ; {
		query := url.Values{"created[gte]": {strconv.FormatInt(since.Unix(), 10)}, "limit": {"100"}}
		if after != "" {
			query.Set("starting_after", after)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, simURL+"/v1/payment_intents?"+query.Encode(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer sk_test_failover")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return all, err
		}
		var page struct {
			Data    []listedIntent `json:"data"`
			HasMore bool           `json:"has_more"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return all, fmt.Errorf("list: status %d: %w", resp.StatusCode, err)
		}
		if resp.StatusCode != http.StatusOK {
			return all, fmt.Errorf("list: status %d", resp.StatusCode)
		}
		for _, pi := range page.Data {
			all = append(all, pi)
			after = pi.ID
		}
		if !page.HasMore {
			return all, nil
		}
	}
}

// failoverPair starts a primary, migrates it, and starts a streaming
// standby, synchronous (the primary's commits wait for it) or not.
func failoverPair(t *testing.T, synchronous bool) (primary, standby *cluster, db *pgxpool.Pool) {
	t.Helper()
	primary = startCluster(t)
	migrate := exec.Command(binary("checkout"), "migrate")
	migrate.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + primary.URL()}
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("checkout migrate: %v\n%s", err, out)
	}
	standby = startStandby(t, primary)
	ctx := context.Background()
	if err := replicate(ctx, primary, synchronous); err != nil {
		t.Fatal(err)
	}
	var err error
	db, err = pgxpool.New(ctx, multiHostURL(primary.addr(), standby.addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return primary, standby, db
}

// multiHostURL names every server (host:port); pgx connects to whichever
// accepts writes.
func multiHostURL(hosts ...string) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","))
}

// runFailover sends orders at 30/s for 12 s with checkout and a worker on
// the multi-host URL; kills the primary at 6 s and promotes the standby at
// 7 s. With lag, the standby is stopped at 3 s and started again just
// before its promotion, so it lacks the primary's last 3 s.
func runFailover(t *testing.T, primary, standby *cluster, db *pgxpool.Pool, lag bool) (*failoverRun, *process.Process) {
	t.Helper()
	url := multiHostURL(primary.addr(), standby.addr())
	sim := process.StartBinary(t, binary("paymentsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "PAYMENTSIM_LATENCY": "100ms"})
	if lag {
		// Charges that reach the provider from 4 s to 5 s take 2 s there:
		// checkout gives up on them and defers their orders, the provider
		// finishes them, and they appear in its list after charges created
		// later — orphans once the lagging standby loses their orders.
		fault(t, sim.URL, http.MethodPost, `{"latency":"2s","start_in":"4s","duration":"1s"}`)
	}
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": url, "STRIPE_API_BASE": sim.URL}
	checkout := process.StartBinary(t, binary("checkout"), nil, env)
	process.StartBinary(t, binary("worker"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": url,
		"STRIPE_API_BASE": sim.URL, "LEDGER_RECONCILE_INTERVAL": ledgerInterval.String()})

	run := &failoverRun{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := time.Now()
	if lag {
		stopWatch := watchList(t, sim.URL, start)
		defer func() { run.late = stopWatch() }()
	}
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		if lag {
			time.Sleep(time.Until(start.Add(3 * time.Second)))
			if err := standby.pgCtl("stop", "-m", "fast"); err != nil {
				t.Errorf("stop the standby: %v", err)
			}
		}
		time.Sleep(time.Until(start.Add(6 * time.Second)))
		if err := primary.crash(); err != nil {
			t.Errorf("kill the primary: %v", err)
		}
		mu.Lock()
		run.killed = time.Now()
		mu.Unlock()
		if lag {
			if err := standby.start(); err != nil {
				t.Errorf("start the standby: %v", err)
			}
		}
		time.Sleep(time.Until(start.Add(7 * time.Second)))
		if err := standby.pgCtl("promote", "-w"); err != nil {
			t.Errorf("promote the standby: %v", err)
		}
		mu.Lock()
		run.promoted = time.Now()
		mu.Unlock()
	}()
	tick := time.NewTicker(time.Second / 30)
	for i := 0; time.Since(start) < 12*time.Second; i++ {
		<-tick.C
		wg.Go(func() {
			key := fmt.Sprintf("failover-%d", i)
			sent := time.Now()
			id, status := placeOrder(checkout.URL, key)
			mu.Lock()
			run.answers = append(run.answers, failoverAnswer{key: key, id: id, status: status, sent: sent, back: time.Now()})
			mu.Unlock()
		})
	}
	tick.Stop()
	wg.Wait()
	<-faults
	for _, a := range run.answers {
		if a.status == 201 && a.sent.After(run.promoted) && (run.firstNewPrimary201.IsZero() || a.back.Before(run.firstNewPrimary201)) {
			run.firstNewPrimary201 = a.back
		}
	}
	return run, sim
}

// lostOrders returns the acknowledged orders the database lacks, and how
// many of them were answered 201 (charged before they were lost).
func lostOrders(t *testing.T, db *pgxpool.Pool, run *failoverRun) ([]failoverAnswer, int) {
	t.Helper()
	var lost []failoverAnswer
	paid := 0
	for _, a := range run.answers {
		if a.id == "" {
			continue
		}
		var stored bool
		if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM orders WHERE id::text = $1)`, a.id).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !stored {
			lost = append(lost, a)
			if a.status == 201 {
				paid++
			}
		}
	}
	return lost, paid
}

// report logs the answers by status, the seconds of 503s and the time from
// the kill to the first 201 on the new primary.
func (r *failoverRun) report(t *testing.T) {
	t.Helper()
	byStatus := map[int]int{}
	var first503, last503 time.Time
	for _, a := range r.answers {
		byStatus[a.status]++
		if a.status == 503 {
			if first503.IsZero() || a.back.Before(first503) {
				first503 = a.back
			}
			if a.back.After(last503) {
				last503 = a.back
			}
		}
	}
	t.Logf("answers %v; 503s for %.1f s; first 201 on the new primary %.1f s after the kill (promoted %.1f s after it)",
		byStatus, last503.Sub(first503).Seconds(), r.firstNewPrimary201.Sub(r.killed).Seconds(), r.promoted.Sub(r.killed).Seconds())
	if r.firstNewPrimary201.IsZero() {
		t.Error("no order was charged on the new primary: the processes did not follow the promotion")
	}
}
