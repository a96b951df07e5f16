package api_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

func TestPlaceOrderPaid(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	before := time.Now().UTC().Add(-time.Second)

	r := b.post(t, newKey(), validBody)
	if got, want := r.status, http.StatusCreated; got != want {
		t.Fatalf("POST /orders = %v, want %d", r, want)
	}
	if got, want := r.header.Get("Content-Type"), "application/json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	o := decodeOrder(t, r)
	if got, want := r.header.Get("Location"), "/orders/"+o.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first response carries Idempotent-Replayed: %q", r.header.Get("Idempotent-Replayed"))
	}
	if o.Status != "paid" || o.CustomerID != "cus_123" || o.Currency != "USD" || o.Total != 3098 ||
		!strings.HasPrefix(o.ChargeID, "pi_") || o.FailureReason != "" {
		t.Errorf("order = %+v, want paid, cus_123, USD, total 3098, a pi_ PaymentIntent id, no failure reason", o)
	}
	if got, want := len(o.Items), 2; got != want || o.Items[0].SKU != "SKU-1" || o.Items[0].Quantity != 2 || o.Items[0].UnitPrice != 1299 {
		t.Errorf("items = %+v, want SKU-1 ×2 at 1299 first", o.Items)
	}
	if o.CreatedAt.Before(before) || o.UpdatedAt.Before(o.CreatedAt) || o.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at %v, updated_at %v: want recent UTC timestamps, updated ≥ created", o.CreatedAt, o.UpdatedAt)
	}
	for _, field := range []string{`"created_at":"`, `Z","updated_at"`} {
		if !bytes.Contains(r.body, []byte(field)) {
			t.Errorf("body %s lacks %s: timestamps must be RFC 3339 UTC", r.body, field)
		}
	}

	if got, want := b.orderStatus(t, o.ID), "paid"; got != want {
		t.Errorf("orders.status = %q, want %q", got, want)
	}
	if got, want := b.charges(t, o.ID), 1; got != want {
		t.Errorf("provider charges for the order = %d, want %d", got, want)
	}
	if jobs := b.chargeJobs(t, o.ID); len(jobs) != 0 {
		t.Errorf("charge jobs of a paid order = %+v, want none (a paid order never gets one)", jobs)
	}

	get := b.do(t, http.MethodGet, "/orders/"+o.ID, "")
	if got, want := get.status, http.StatusOK; got != want {
		t.Fatalf("GET %s = %v, want %d", o.ID, get, want)
	}
	if !bytes.Equal(get.body, r.body) {
		t.Errorf("GET body = %s, want the POST body %s", get.body, r.body)
	}
}

func TestGetOrderNotFound(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	tests := []struct{ name, path string }{
		{"unknown uuid", "/orders/0190a6f5-8b5e-7c4e-9f00-000000000000"},
		{"not a uuid", "/orders/abc"},
		{"uuid with junk", "/orders/0190a6f5-8b5e-7c4e-9f00-000000000000x"},
		{"sql-ish", "/orders/1%27%20OR%20%271%27=%271"},
		{"percent-encoded nul", "/orders/%00"},
		{"very long", "/orders/" + strings.Repeat("9", 5000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := b.do(t, http.MethodGet, tt.path, "")
			if got, want := r.status, http.StatusNotFound; got != want {
				t.Fatalf("GET %s = %v, want %d", tt.path, r, want)
			}
			decodeProblem(t, r)
		})
	}
}

func TestReplayRepeatsTheFirstResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		fault      string // simulator fault during the first request
		wantStatus int
	}{
		{"paid 201", validBody, "", http.StatusCreated},
		{"declined 402", declinedBody, "", http.StatusPaymentRequired},
		{"deferred 202", validBody, `{"down":true}`, http.StatusAccepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := setup(t, options{})
			if tt.fault != "" {
				b.admin(t, http.MethodPost, "/admin/faults", tt.fault)
			}
			key := newKey()
			first := b.post(t, key, tt.body)
			if got, want := first.status, tt.wantStatus; got != want {
				t.Fatalf("first POST = %v, want %d", first, want)
			}
			if tt.fault != "" {
				// The provider recovers and the order gets paid meanwhile; a
				// replay still answers what the first request answered.
				b.admin(t, http.MethodDelete, "/admin/faults", "")
				if _, err := b.db.Exec(context.Background(),
					`UPDATE orders SET status = 'paid', charge_id = 'ch_later' WHERE id::text = $1`,
					strings.TrimPrefix(first.header.Get("Location"), "/orders/")); err != nil {
					t.Fatal(err)
				}
			}

			// Another formatting of the same document is the same request.
			reformatted := strings.ReplaceAll(tt.body, ",", " ,\n ")
			for i, body := range []string{tt.body, reformatted} {
				again := b.post(t, key, body)
				if again.status != first.status || !bytes.Equal(again.body, first.body) {
					t.Errorf("replay #%d = %v, want the first response %v byte for byte", i+1, again, first)
				}
				for _, h := range []string{"Content-Type", "Location"} {
					if got, want := again.header.Get(h), first.header.Get(h); got != want || want == "" {
						t.Errorf("replay #%d %s = %q, want %q (non-empty)", i+1, h, got, want)
					}
				}
				if got, want := again.header.Get("Idempotent-Replayed"), "true"; got != want {
					t.Errorf("replay #%d Idempotent-Replayed = %q, want %q", i+1, got, want)
				}
			}
			if orders, keys := b.rows(t); orders != 1 || keys != 1 {
				t.Errorf("rows: %d orders, %d keys; want 1 and 1", orders, keys)
			}
		})
	}
}

func TestKeyReusedWithAnotherBody(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	key := newKey()
	if r := b.post(t, key, validBody); r.status != http.StatusCreated {
		t.Fatalf("first POST = %v, want 201", r)
	}
	other := strings.Replace(validBody, `"quantity":2`, `"quantity":3`, 1)
	r := b.post(t, key, other)
	if got, want := r.status, http.StatusUnprocessableEntity; got != want {
		t.Fatalf("POST with the key and another body = %v, want %d", r, want)
	}
	if got, want := decodeProblem(t, r).Type, "urn:problem-type:checkout:idempotency-key-reused"; got != want {
		t.Errorf("problem type = %q, want %q", got, want)
	}
	if orders, _ := b.rows(t); orders != 1 {
		t.Errorf("orders = %d, want 1", orders)
	}
}

func TestQuotedKeyIsTheSameKey(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	first := b.post(t, "abc", validBody)
	if first.status != http.StatusCreated {
		t.Fatalf("POST with abc = %v, want 201", first)
	}
	r := b.post(t, `"abc"`, validBody)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, first.body) {
		t.Errorf(`POST with "abc" = %v (replayed %q), want a replay of the abc request`, r, r.header.Get("Idempotent-Replayed"))
	}
	var key string
	if err := b.db.QueryRow(context.Background(), `SELECT key FROM idempotency_keys`).Scan(&key); err != nil || key != "abc" {
		t.Errorf("stored key = %q (%v), want abc without quotes", key, err)
	}
}

func TestConcurrentIdenticalRequestsMakeOneOrder(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	key := newKey()
	const n = 20
	results := make([]response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var asked atomic.Int32
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = b.post(t, key, validBody)
			// A 503 or 504 tells the client to ask again with the same key
			// (a slow test machine can take the database past DBTimeout);
			// this client does, as the API says a client should.
			for try := 0; try < 3 && (results[i].status == http.StatusServiceUnavailable || results[i].status == http.StatusGatewayTimeout); try++ {
				asked.Add(1)
				time.Sleep(200 * time.Millisecond)
				results[i] = b.post(t, key, validBody)
			}
		})
	}
	close(start)
	wg.Wait()
	if asked.Load() > 0 {
		t.Logf("%d requests asked again after a 503 or 504", asked.Load())
	}

	var created, replayed, conflicts int
	var body []byte
	for _, r := range results {
		switch {
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
			body = r.body
		case r.status == http.StatusCreated:
			created++
			body = r.body
		case r.status == http.StatusConflict:
			conflicts++
			decodeProblem(t, r)
		default:
			t.Errorf("response %v: want 201 or 409", r)
		}
	}
	// The request that created the order may itself have been answered 504
	// (its COMMIT unconfirmed) and then replayed: at most one is "created".
	if created > 1 || body == nil || created+replayed+conflicts != n {
		t.Fatalf("%d created, %d replayed, %d conflicts; want at most 1 created, the rest replays or 409", created, replayed, conflicts)
	}
	for _, r := range results {
		if r.status == http.StatusCreated && !bytes.Equal(r.body, body) {
			t.Errorf("replay body %s, want %s", r.body, body)
		}
	}
	if orders, keys := b.rows(t); orders != 1 || keys != 1 {
		t.Errorf("rows: %d orders, %d keys; want 1 and 1", orders, keys)
	}
	if got, want := b.charges(t, decodeOrder(t, response{body: body}).ID), 1; got != want {
		t.Errorf("provider charges = %d, want %d", got, want)
	}
	if got, want := b.sim.Stats().TotalCharges, 1; got != want {
		t.Errorf("provider total charges = %d, want %d", got, want)
	}
}

func TestDeclinedIsAFinalAnswerNotABreakerFailure(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	const n = 25
	for i := range n {
		r := b.post(t, newKey(), declinedBody)
		if got, want := r.status, http.StatusPaymentRequired; got != want {
			t.Fatalf("decline #%d = %v, want %d", i+1, r, want)
		}
		p := decodeProblem(t, r)
		if p.OrderID == "" || r.header.Get("Location") != "/orders/"+p.OrderID {
			t.Fatalf("decline #%d: order_id %q, Location %q; want both naming the order", i+1, p.OrderID, r.header.Get("Location"))
		}
		if got, want := b.orderStatus(t, p.OrderID), "payment_failed"; got != want {
			t.Errorf("decline #%d: status = %q, want %q", i+1, got, want)
		}
		if i == 0 {
			o := decodeOrder(t, b.do(t, http.MethodGet, "/orders/"+p.OrderID, ""))
			if o.Status != "payment_failed" || o.FailureReason != order.ReasonCardDeclined || o.ChargeID != "" {
				t.Errorf("GET declined order = %+v, want payment_failed, %s, no charge id", o, order.ReasonCardDeclined)
			}
		}
	}
	if got, want := b.policy.State(), resilience.StateClosed; got != want {
		t.Errorf("breaker after %d declines = %v, want %v", n, got, want)
	}
	if got, want := b.sim.Stats().Declines, n; got != want {
		t.Errorf("provider declines = %d, want %d (one call each, no retries)", got, want)
	}
	metrics := b.do(t, http.MethodGet, "/metrics", "")
	if want := `resilience_breaker_state{name="payment"} 0`; !bytes.Contains(metrics.body, []byte(want)) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// fastBreaker trips after 4 slow calls in a row, so a hang opens it in
// 100 ms, and stays open long enough for the test's assertions.
func fastBreaker() *resilience.Config {
	cfg := resilience.DefaultConfig()
	cfg.AttemptTimeout = 200 * time.Millisecond
	cfg.SlowCallThreshold = 100 * time.Millisecond
	cfg.WindowSize, cfg.MinCalls = 4, 4
	cfg.OpenDuration, cfg.OpenJitter = 5*time.Second, 0
	return &cfg
}

func TestProviderHangDefersOrdersOnceTheBreakerOpens(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{resilience: fastBreaker()})
	b.admin(t, http.MethodPost, "/admin/faults", `{"hang":true}`)

	// A burst fills the bulkhead with hung calls; they count as slow while
	// still running and open the breaker. Every request still gets a 202.
	var wg sync.WaitGroup
	burst := make([]response, 6)
	for i := range burst {
		wg.Go(func() { burst[i] = b.post(t, newKey(), validBody) })
	}
	wg.Wait()
	for _, r := range burst {
		if r.status != http.StatusAccepted {
			t.Errorf("burst response %v, want 202", r)
		}
	}
	if got, want := b.policy.State(), resilience.StateOpen; got != want {
		t.Fatalf("breaker after the burst = %v, want %v", got, want)
	}

	for i := range 5 {
		start := time.Now()
		r := b.post(t, newKey(), validBody)
		elapsed := time.Since(start)
		if got, want := r.status, http.StatusAccepted; got != want {
			t.Fatalf("request %d with the breaker open = %v, want %d", i+1, r, want)
		}
		if elapsed > 250*time.Millisecond {
			t.Errorf("request %d took %v, want a prompt fallback (< 250 ms)", i+1, elapsed)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("202 without a Retry-After polling hint")
		}
		reopenAt := time.Now().Add(b.policy.RetryAfter())
		o := decodeOrder(t, r)
		if o.Status != "pending_payment" || b.orderStatus(t, o.ID) != "pending_payment" {
			t.Errorf("order %s: body status %q, stored %q; want pending_payment", o.ID, o.Status, b.orderStatus(t, o.ID))
		}
		jobs := b.chargeJobs(t, o.ID)
		if len(jobs) != 1 || jobs[0].state != "scheduled" {
			t.Fatalf("charge jobs = %+v, want one scheduled", jobs)
		}
		// Not before the breaker lets a probe through, and not much later:
		// at most the open period plus half of it as jitter.
		if at := jobs[0].scheduledAt; at.Before(reopenAt.Add(-50*time.Millisecond)) || at.After(reopenAt.Add(5*time.Second)) {
			t.Errorf("job scheduled at %v, want after the breaker reopens at %v, within 1.5 × its open period",
				at.Format(time.StampMilli), reopenAt.Format(time.StampMilli))
		}
	}
	if got := b.sim.Stats().TotalCharges; got != 0 {
		t.Errorf("provider charges during the hang = %d, want 0", got)
	}
}

// dyingPayer stands in for a process that dies while the provider call is
// in flight: the first charge is handed to the provider (or not, see
// reachProvider) and then never returns to the flow until the test ends.
type dyingPayer struct {
	order.Payer
	reachProvider bool
	mu            sync.Mutex
	died          bool
	dead          chan struct{} // closed once the first charge is stuck
	end           <-chan struct{}
}

func (p *dyingPayer) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	p.mu.Lock()
	first := !p.died
	p.died = true
	p.mu.Unlock()
	if !first {
		return p.Payer.Charge(ctx, req)
	}
	if p.reachProvider {
		_, _ = p.Payer.Charge(ctx, req) // charged; the answer is lost with the process
	}
	close(p.dead)
	<-p.end
	return order.Receipt{}, context.Canceled
}

func TestRequestDyingAfterTheFirstWrite(t *testing.T) {
	t.Parallel()
	end := make(chan struct{})
	payer := &dyingPayer{reachProvider: true, dead: make(chan struct{}), end: end}
	b, _ := setup(t, options{wrapPayer: func(p order.Payer) order.Payer { payer.Payer = p; return payer }})
	t.Cleanup(func() { close(end) }) // the "dead" handler returns before the server closes

	key := newKey()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-payer.dead
		cancel() // the client gives up on a process that will never answer
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/orders", strings.NewReader(validBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the dying request answered %d", resp.StatusCode)
	}

	// What the first write left: a pending order, the durable intent to
	// charge it, which the worker's sweep turns into a charge job once the
	// request's deadline has passed (internal/worker holds that half).
	var id string
	if err := b.db.QueryRow(context.Background(), `SELECT id::text FROM orders`).Scan(&id); err != nil {
		t.Fatalf("order after the crash: %v", err)
	}
	if got, want := b.orderStatus(t, id), "pending"; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	orphans, err := order.Unsettled(context.Background(), b.db, order.StatusPending, 0, 10)
	if err != nil || len(orphans) != 1 || orphans[0].String() != id {
		t.Fatalf("pending orders the sweep takes over = %v, %v; want [%s]", orphans, err, id)
	}
	if got, want := b.charges(t, id), 1; got != want {
		t.Fatalf("provider charges = %d, want %d", got, want)
	}

	// The client's retry while the dead request's lock holds: 409.
	if r := b.post(t, key, validBody); r.status != http.StatusConflict {
		t.Errorf("retry while locked = %v, want 409", r)
	}
	// Once the lock expires, the retry resumes the same order and the
	// provider's idempotency key makes the second charge a replay.
	if _, err := b.db.Exec(context.Background(), `UPDATE idempotency_keys SET locked_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	r := b.post(t, key, validBody)
	if r.status != http.StatusCreated {
		t.Fatalf("retry after the lock expired = %v, want 201", r)
	}
	o := decodeOrder(t, r)
	if o.ID != id || o.Status != "paid" {
		t.Errorf("resumed order = %s %s, want %s paid", o.ID, o.Status, id)
	}
	if got, want := b.charges(t, id), 1; got != want {
		t.Errorf("provider charges after the resume = %d, want %d", got, want)
	}
	if orders, keys := b.rows(t); orders != 1 || keys != 1 {
		t.Errorf("rows: %d orders, %d keys; want 1 and 1", orders, keys)
	}
	if again := b.post(t, key, validBody); again.status != http.StatusCreated || !bytes.Equal(again.body, r.body) {
		t.Errorf("replay after the resume = %v, want %v", again, r)
	}
}

func TestValidationFailureLetsTheKeyBeReused(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	key := newKey()
	invalid := strings.Replace(validBody, `"quantity":2`, `"quantity":0`, 1)
	if r := b.post(t, key, invalid); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid order = %v, want 422", r)
	}
	malformed := validBody + "}"
	if r := b.post(t, key, malformed); r.status != http.StatusBadRequest {
		t.Fatalf("malformed order = %v, want 400", r)
	}
	if orders, keys := b.rows(t); orders != 0 || keys != 0 {
		t.Fatalf("after rejected requests: %d orders, %d keys; want none", orders, keys)
	}
	if r := b.post(t, key, validBody); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("corrected order with the same key = %v, want a fresh 201", r)
	}
}

// TestUnknownRoutesAnswerProblems: every error the API gives is a problem
// document, also the router's own 404 and 405.
func TestUnknownRoutesAnswerProblems(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	tests := []struct {
		method, path string
		want         int
		allow        []string // the Allow header of a 405 (RFC 9110)
	}{
		{http.MethodGet, "/nope", http.StatusNotFound, nil},
		{http.MethodDelete, "/orders", http.StatusMethodNotAllowed, []string{"POST"}},
		{http.MethodPut, "/orders/" + uuid.NewString(), http.StatusMethodNotAllowed, []string{"GET", "HEAD"}},
	}
	for _, tt := range tests {
		r := b.do(t, tt.method, tt.path, "")
		if r.status != tt.want || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s = %d %s, want %d application/problem+json", tt.method, tt.path, r.status, r.header.Get("Content-Type"), tt.want)
		}
		if got := r.header.Values("Allow"); !slices.Equal(got, tt.allow) {
			t.Errorf("%s %s: Allow = %q, want %q", tt.method, tt.path, got, tt.allow)
		}
		if p := decodeProblem(t, r); p.Status != tt.want {
			t.Errorf("%s %s: problem status %d, want %d", tt.method, tt.path, p.Status, tt.want)
		}
	}
}

// TestHeadOfAnOrder: HEAD is GET without the body (RFC 9110), not a 405.
func TestHeadOfAnOrder(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	o := decodeOrder(t, b.post(t, newKey(), validBody))
	if r := b.do(t, http.MethodHead, "/orders/"+o.ID, ""); r.status != http.StatusOK || len(r.body) != 0 {
		t.Errorf("HEAD /orders/{id} = %d with %d bytes, want 200 and no body", r.status, len(r.body))
	}
}

// TestClientRequestIDIsBounded: a client's X-Request-Id goes into every log
// line of its request, so only a short, plain one is kept.
func TestClientRequestIDIsBounded(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	b, _ := setup(t, options{logTo: &logs})
	for _, id := range []string{"req-123.abc_DEF:9", strings.Repeat("x", 100_000), "inject level=ERROR"} {
		req, _ := http.NewRequest(http.MethodGet, b.url+"/orders/"+uuid.NewString(), nil)
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	out := logs.String()
	if !strings.Contains(out, "req-123.abc_DEF:9") {
		t.Errorf("a plain client request id was not kept in the log")
	}
	if strings.Contains(out, strings.Repeat("x", 65)) || strings.Contains(out, "inject") {
		t.Errorf("an oversized or unsafe client request id reached the log")
	}
}
