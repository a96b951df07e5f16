package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/idempotency"
)

// Errors Place and Get return besides *ValidationError; the HTTP layer maps
// each to one status.
var (
	// ErrKeyInUse: a request with the same Idempotency-Key is in progress (409).
	ErrKeyInUse = errors.New("a request with this Idempotency-Key is still in progress")
	// ErrKeyReused: the key was used before with a different body (422).
	ErrKeyReused = errors.New("this Idempotency-Key was used with a different request")
	// ErrUnavailable: the order could not be stored durably (503 + Retry-After).
	ErrUnavailable = errors.New("orders cannot be stored right now")
	// ErrProviderUnavailable and ErrProviderTimeout end a request whose
	// charge failed when fallback is off (modes none and timeout): 502 and
	// 504. The order stays pending and the worker charges it later.
	ErrProviderUnavailable = errors.New("payment provider unavailable")
	ErrProviderTimeout     = errors.New("payment provider timed out")
	// ErrOutcomeUnknown: the order's first write was sent, but the database
	// confirmed neither its commit nor its rollback (a connection lost, a
	// commit that did not return in time); or the request found its key
	// stored by an earlier request, and the database failed before saying
	// in what state. The order may be stored, so the answer must not say
	// "nothing stored" (a 503 does): see OutcomeUnknownError.
	ErrOutcomeUnknown = errors.New("the order may or may not have been stored")
	// ErrOtherCustomer: an authenticated customer asked for an order in
	// another customer's name (403).
	ErrOtherCustomer = errors.New("customer_id names a customer other than the authenticated one")
)

// OutcomeUnknownError is ErrOutcomeUnknown with when to ask again: a retry
// with the same Idempotency-Key learns the outcome — it resumes the stored
// order, or places it if nothing was stored — once the key's lock, taken
// by the write or the lookup in doubt, has expired.
type OutcomeUnknownError struct {
	RetryAfter time.Duration
	err        error
}

func (e *OutcomeUnknownError) Error() string        { return ErrOutcomeUnknown.Error() + ": " + e.err.Error() }
func (e *OutcomeUnknownError) Unwrap() error        { return e.err }
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Config tunes the checkout flow.
type Config struct {
	// PaymentBudget bounds the synchronous charge, retries included. It must
	// leave room for both transactions within the client's patience (the
	// experiment's clients give up after 3 s). Zero means no bound: mode
	// none, which shows what an unprotected call does.
	PaymentBudget time.Duration
	// DBTimeout bounds each transaction, so a dead database yields a 503
	// within ~2 s (docs/lifecycle.md, "Timers and bounds") instead of holding an API worker.
	DBTimeout time.Duration
	// Fallback saves orders as pending_payment when the provider is
	// unavailable (protected mode). Off, such requests fail with 502/504.
	Fallback bool
	// AsyncSettle commits the settle of a synchronously charged order
	// without waiting for its WAL flush (synchronous_commit = off for that
	// transaction only; docs/design.md, "The first write"). Its loss in a database
	// crash is recoverable by replay: the order is back to pending without
	// an answer, the sweep gives it a charge job, and the charge under the
	// same provider key is the provider's replay — same status, same order
	// id, same charge; a client's retry then gets an answer recomputed, not
	// byte-identical (its updated_at is the recovery's). The first write,
	// which the provider call depends on, always commits synchronously, as
	// does a deferral, whose job is the 202's promise.
	AsyncSettle bool
	// KeyRetention is how long the provider remembers idempotency keys
	// (PROVIDER_KEY_RETENTION): a request resuming an order older than
	// MayCharge allows defers it to the worker, which resolves it by lookup.
	KeyRetention time.Duration
}

// DefaultConfig: two 500 ms attempts plus up to 100 ms of backoff fit in
// 1.5 s, and 1.5 s per transaction keeps a database outage's 503 under 2 s.
func DefaultConfig() Config {
	return Config{PaymentBudget: 1500 * time.Millisecond, DBTimeout: 1500 * time.Millisecond, Fallback: true, KeyRetention: 24 * time.Hour}
}

// LockTTL is how long a request holds its key: past its own deadline, so a
// retry only resumes a request that died. The longest request — one that
// resumes a key — runs three database steps and the charge. With the
// defaults it is 7 s; the worker's sweep (SWEEP_AFTER) must wait longer
// than this before it takes a pending order over, and the worker checks
// that at start against checkout's PAYMENT_BUDGET and DB_TX_TIMEOUT.
func (c Config) LockTTL() time.Duration {
	budget := c.PaymentBudget
	if budget == 0 {
		budget = unboundedCharge
	}
	return budget + 3*c.DBTimeout + time.Second
}

// unboundedCharge stands for the length of a charge without a budget (mode
// none): no response outlives the HTTP server's 30 s write timeout.
const unboundedCharge = 30 * time.Second

// JobInserter inserts River jobs inside a transaction: a River client's
// InsertTx (an insert-only client is enough).
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Service runs the checkout flow.
type Service struct {
	db      *pgxpool.Pool
	payer   Payer
	jobs    JobInserter
	prices  PriceChecker // nil: prices are trusted (no CATALOG_URL)
	claims  *claimer
	settles *settler
	cfg     Config
	log     *slog.Logger
}

// NewService wires the flow's dependencies.
func NewService(db *pgxpool.Pool, payer Payer, jobs JobInserter, cfg Config, log *slog.Logger) *Service {
	return &Service{db: db, payer: payer, jobs: jobs, claims: newClaimer(db, cfg.DBTimeout),
		settles: newSettler(db, cfg.AsyncSettle, cfg.DBTimeout), cfg: cfg, log: log}
}

// WithPriceCheck makes Place check every new order's prices with prices
// before writing it.
func (s *Service) WithPriceCheck(prices PriceChecker) *Service {
	s.prices = prices
	return s
}

// Placed is the outcome of Place: the order as the request's answer shows
// it. internal/api renders it — 201 paid, 202 pending_payment, 402
// payment_failed — the same way the first time and on replay.
type Placed struct {
	// Order is the order as answered. For a replay it is rebuilt from the
	// stored answer, so it is the first answer's order, not today's: a
	// replayed 202 stays a 202 (clients poll GET /orders/{id}).
	Order Order
	// Replayed: this is the stored answer to an earlier request.
	Replayed bool
	// RetryAfter hints when a deferred order is worth polling.
	RetryAfter time.Duration
	// Prices says how the order's prices were checked (not for replays).
	Prices PriceCheck
}

// placement carries one request through the flow.
type placement struct {
	scope string // the key's scope (see PlaceAs)
	key   string
	order Order
	// resumed: the order was created by an earlier request with the key,
	// whose charge attempt (if any) the insert recorded.
	resumed bool
}

// Place creates the order for one Idempotency-Key and tries to charge it.
//
//  1. One statement claims the key and inserts the order as pending (see
//     insertOrdersWithKeys). From here on the order cannot be lost: if this
//     process dies, the worker's sweep gives it a charge job.
//  2. The charge runs through the Payer (retry → breaker → concurrency
//     limit → timeout) within PaymentBudget; Charge decides what it means.
//  3. One statement settles the order and records the answer for replays
//     — or, when the provider is unavailable, one transaction defers the
//     order and inserts its charge job, due when the breaker will probe.
func (s *Service) Place(ctx context.Context, key string, req PlaceRequest) (Placed, error) {
	return s.place(ctx, "", key, req)
}

// PlaceAs is Place for an authenticated customer (docs/design.md,
// "Authentication"): the order is placed in customer's name — req's
// CustomerID may be empty, and otherwise must be customer, else
// ErrOtherCustomer — and the Idempotency-Key is the customer's own, so the
// same key from another customer is another order, and a replay is only
// ever answered to the customer whose request made it. Place is PlaceAs's
// unauthenticated form: every key shares the empty scope.
func (s *Service) PlaceAs(ctx context.Context, customer, key string, req PlaceRequest) (Placed, error) {
	// An empty customer would share the unauthenticated scope ''.
	if customer == "" || (req.CustomerID != "" && req.CustomerID != customer) {
		return Placed{}, ErrOtherCustomer
	}
	req.CustomerID = customer
	return s.place(ctx, customer, key, req)
}

func (s *Service) place(ctx context.Context, scope, key string, req PlaceRequest) (Placed, error) {
	total, err := req.Validate()
	if err != nil {
		return Placed{}, err
	}
	var prices PriceCheck
	if s.prices != nil {
		if prices, err = s.prices.CheckPrices(ctx, req.Currency, req.Items); err != nil {
			return s.placeStored(ctx, scope, key, req, err)
		}
	}
	p, claim, err := s.begin(ctx, scope, key, req, total)
	if err != nil {
		return Placed{}, s.beginError(err)
	}
	placed, err := s.proceed(ctx, p, claim)
	placed.Prices = prices
	return placed, err
}

// placeStored answers a request whose prices the catalog did not confirm
// (unavailable, a changed price, an unknown SKU). That refuses a new order
// only. An order an earlier request stored under the key had its prices
// checked then, and the sweep charges it whatever the catalog says now, so
// it is answered from the store as begin answers a key it finds: a replay,
// a 409 while its request runs, or its charge resumed. Were the catalog's
// refusal the answer, its 503 would tell the client nothing was stored,
// and its 409 price-changed to order again with a new key: a second order.
//
// If the database cannot say whether the key exists, neither answer is
// true; this request stored nothing, which is what ErrUnavailable (503)
// says, and the client retries with the same key.
func (s *Service) placeStored(ctx context.Context, scope, key string, req PlaceRequest, refused error) (Placed, error) {
	p, claim, err := s.lookup(ctx, scope, key, req)
	if errors.Is(err, errKeyVanished) { // no earlier request stored the key
		return Placed{}, refused
	}
	if err != nil {
		return Placed{}, classifyDBError(err)
	}
	return s.proceed(ctx, p, claim)
}

// beginError is the error a request answers when begin fails. Its first
// write failing before COMMIT stored nothing (ErrUnavailable: 503). An
// unanswered COMMIT, or a key found stored whose lookup then failed, leaves
// an order that may exist (see OutcomeUnknownError): never "nothing stored".
func (s *Service) beginError(err error) error {
	if errors.Is(err, errOutcomeUnknown) || errors.Is(err, errKeyUnread) {
		return &OutcomeUnknownError{RetryAfter: s.cfg.LockTTL(), err: err}
	}
	return classifyDBError(err)
}

// proceed takes a request on from its key: a key it claimed, or one an
// earlier request stored (see lookupKey).
func (s *Service) proceed(ctx context.Context, p placement, claim keyClaim) (Placed, error) {
	switch claim.state {
	case idempotency.Finished:
		return Placed{Order: claim.answer, Replayed: true}, nil
	case idempotency.InProgress:
		return Placed{}, ErrKeyInUse
	case idempotency.Mismatch:
		return Placed{}, ErrKeyReused
	}
	if p.order.Status.Terminal() {
		// A resumed request whose order the worker settled meanwhile.
		return s.settle(ctx, p, Settlement{Status: p.order.Status})
	}
	return s.charge(ctx, p)
}

// begin is step 1. Its common case — a new key — is one statement. A key
// seen before (a replay, a retry) writes nothing there and costs a
// transaction to look the key up.
func (s *Service) begin(ctx context.Context, scope, key string, req PlaceRequest, total int64) (placement, keyClaim, error) {
	p := placement{scope: scope, key: key}
	o, err := newOrder(req, total)
	if err != nil {
		return p, keyClaim{}, err
	}
	dbCtx, cancel := s.dbContext(ctx)
	op, err := s.claims.claim(dbCtx, claimOp{order: o, scope: scope, key: key, fingerprint: req.Fingerprint(), lockFor: s.cfg.LockTTL()})
	cancel()
	if err != nil {
		return p, keyClaim{}, err
	}
	if op.claimed {
		p.order = op.order
		return p, keyClaim{state: idempotency.Claimed}, nil
	}
	// The key existed: an earlier request stored it.
	p, claim, err := s.lookup(ctx, scope, key, req)
	if errors.Is(err, errKeyVanished) {
		return s.begin(ctx, scope, key, req, total) // the claim can now succeed
	}
	if database.IsUnavailable(err) {
		err = fmt.Errorf("%w: %w", errKeyUnread, err)
	}
	return p, claim, err
}

// lookup reads key, stored by an earlier request, in a transaction of its
// own, and takes its order over if that request died (lookupKey).
// errKeyVanished: there is no such key.
func (s *Service) lookup(ctx context.Context, scope, key string, req PlaceRequest) (placement, keyClaim, error) {
	var claim keyClaim
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		claim, err = lookupKey(ctx, tx, scope, key, req.Fingerprint(), s.cfg.LockTTL())
		return err
	})
	p := placement{scope: scope, key: key, order: claim.order, resumed: claim.state == idempotency.Resumed}
	return p, claim, err
}

// errKeyUnread: begin found the key stored, and the database did not
// answer its lookup.
var errKeyUnread = errors.New("the idempotency key is stored and could not be read")

func newOrder(req PlaceRequest, total int64) (Order, error) {
	id, err := uuid.NewV7() // time-ordered: new rows land at the end of the primary key index
	if err != nil {
		return Order{}, fmt.Errorf("new order id: %w", err)
	}
	return Order{
		ID: id, Status: StatusPending, CustomerID: req.CustomerID, Currency: req.Currency,
		PaymentMethod: req.PaymentMethod, Items: req.Items, Total: total,
	}, nil
}

// charge is step 2; it always ends in settle or defer unless fallback is off.
func (s *Service) charge(ctx context.Context, p placement) (Placed, error) {
	// The charge outlives a client that hangs up: finishing it and storing
	// the answer lets the client's retry get a replay instead of a 409.
	chargeCtx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if s.cfg.PaymentBudget > 0 {
		chargeCtx, cancel = context.WithTimeout(chargeCtx, s.cfg.PaymentBudget)
	}
	defer cancel()
	var (
		to      Settlement
		settled bool
		err     = errChargeWindowClosed
	)
	if MayCharge(p.order, s.cfg.KeyRetention, time.Now()) {
		if p.resumed {
			// A new attempt for an old order: the worker must not trust a
			// lookup's "no charge" until this one has had time to land,
			// nor settle the order from a lookup made before it (see
			// MarkAttempt); and an order the worker settled meanwhile is
			// answered as it stands, not charged again.
			dbCtx, cancelDB := s.dbContext(ctx)
			marked, err := MarkAttempt(dbCtx, s.db, p.order.ID)
			cancelDB()
			if err != nil {
				return s.stored(ctx, p, err)
			}
			if !marked {
				return s.settledMeanwhile(ctx, p)
			}
		}
		to, settled, err = Charge(chargeCtx, s.payer, p.order)
	}
	switch {
	case settled:
		if to.FailureReason == ReasonProviderRejected {
			s.log.ErrorContext(ctx, "payment provider rejected the charge request", "order_id", p.order.ID, "err", err)
		}
		return s.settle(ctx, p, to)
	case s.cfg.Fallback:
		s.log.WarnContext(ctx, "payment deferred to the worker", "order_id", p.order.ID, "err", err)
		trace.SpanFromContext(ctx).AddEvent("payment deferred", trace.WithAttributes(
			attribute.String("order.id", p.order.ID.String()), attribute.String("error", err.Error())))
		return s.deferOrder(ctx, p, s.deferDelay(err))
	}
	// No fallback: the order stays pending and the worker's sweep charges
	// it. Free the key so a client retry resumes right away.
	dbCtx, cancelDB := s.dbContext(ctx)
	defer cancelDB()
	if relErr := releaseKey(dbCtx, s.db, p.scope, p.key); relErr != nil {
		s.log.WarnContext(ctx, "could not release idempotency key", "err", relErr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Placed{}, fmt.Errorf("%w: order %s: %w", ErrProviderTimeout, p.order.ID, err)
	}
	return Placed{}, fmt.Errorf("%w: order %s: %w", ErrProviderUnavailable, p.order.ID, err)
}

// settle is step 3 for a charge with an outcome: one statement, shared
// with the settles of concurrent requests (settler), moves the order to its
// new state and records the answer (see settle in store.go). If the worker
// settled the order first, the answer is the order as the worker left it.
func (s *Service) settle(ctx context.Context, p placement, to Settlement) (Placed, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	res, err := s.settles.settle(ctx, p.order, to)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return s.stored(ctx, p, fmt.Errorf("settle order %s as %s: %w", p.order.ID, to.Status, err))
	}
	return Placed{Order: res.answered}, nil
}

// settledMeanwhile answers a resumed request whose order was settled
// between its key lookup and its charge attempt: the order as it stands.
func (s *Service) settledMeanwhile(ctx context.Context, p placement) (Placed, error) {
	dbCtx, cancel := s.dbContext(ctx)
	o, err := Get(dbCtx, s.db, p.order.ID)
	cancel()
	if err != nil {
		return s.stored(ctx, p, err)
	}
	p.order = o
	return s.settle(ctx, p, Settlement{Status: o.Status})
}

// stored answers a request whose order is stored when a later database
// step fails: never 503, which would say nothing was stored. The answer is
// 202 with the order as this request last knew it — the worker's sweep
// charges or settles it, under the same provider key — and a retry with
// the same Idempotency-Key gets the order as it then stands once the key's
// lock expires. This answer is not recorded for replays: the database
// that was to record it failed.
func (s *Service) stored(ctx context.Context, p placement, err error) (Placed, error) {
	if !database.IsUnavailable(err) {
		return Placed{}, err
	}
	s.log.WarnContext(ctx, "database failed after the order was stored; the worker finishes it", "order_id", p.order.ID, "err", err)
	return Placed{Order: p.order, RetryAfter: s.cfg.LockTTL()}, nil
}

// deferOrder is step 3 without an outcome: the order becomes
// pending_payment and gets its charge job, due after wait (deferDelay), in
// one transaction — the answer 202 is only given once the job that keeps
// its promise exists. A job already live for the order (the sweep's, for a
// request that outlived its lock) is kept.
func (s *Service) deferOrder(ctx context.Context, p placement, wait time.Duration) (Placed, error) {
	res := Placed{RetryAfter: wait}
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, answered, _, err := settle(ctx, tx, p.order, Settlement{Status: StatusPendingPayment}, true)
		if err != nil {
			return err
		}
		res.Order = answered
		opts := ChargeArgs{}.InsertOpts()
		opts.ScheduledAt = time.Now().Add(res.RetryAfter)
		_, err = s.jobs.InsertTx(ctx, tx, ChargeArgs{OrderID: p.order.ID}, &opts)
		return err
	})
	if err != nil {
		return s.stored(ctx, p, fmt.Errorf("defer order %s: %w", p.order.ID, err))
	}
	return res, nil
}

// deferDelay is when the job of an order deferred on err should run: once
// the breaker lets a probe through and, after a 429, once the provider's
// Retry-After has passed (ErrThrottled), plus jitter so a burst of deferred
// orders does not become a burst of worker calls.
func (s *Service) deferDelay(err error) time.Duration {
	wait := max(s.payer.RetryAfter(), 500*time.Millisecond)
	if throttled, ok := RetryAfterOf(err); ok {
		wait = max(wait, throttled)
	}
	return wait + rand.N(wait/2+1)
}

// GetAs returns the order if it is customer's, and ErrNotFound otherwise:
// the answer for another customer's order is the answer for an unknown id,
// so order ids reveal nothing to whoever holds them.
func (s *Service) GetAs(ctx context.Context, customer string, id uuid.UUID) (Order, error) {
	o, err := s.Get(ctx, id)
	if err == nil && o.CustomerID != customer {
		return Order{}, ErrNotFound
	}
	return o, err
}

// Get returns an order, whoever's it is (see GetAs).
func (s *Service) Get(ctx context.Context, id uuid.UUID) (Order, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DBTimeout)
	defer cancel()
	o, err := Get(ctx, s.db, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Order{}, classifyDBError(err)
	}
	return o, err
}

// dbContext bounds one database step of the flow by DBTimeout. A client that
// hangs up does not cancel it: a half-done request is worse than a finished
// one. A timeout can fire after Postgres committed; what the client is told
// then never claims "nothing stored": the first write's COMMIT unanswered is
// a 504 outcome-unknown (OutcomeUnknownError), and any later step's failure
// a 202 for the stored order (stored), which the worker finishes.
func (s *Service) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.DBTimeout)
}

// inTx runs fn in a transaction bounded by DBTimeout (see dbContext).
func (s *Service) inTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return fn(ctx, tx) })
}

// errChargeWindowClosed: a resumed order too old to charge (see MayCharge).
var errChargeWindowClosed = errors.New("order too old to charge under a key the provider still remembers")

func classifyDBError(err error) error {
	if err != nil && database.IsUnavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
