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

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/payment"
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
)

// Payer charges orders. In production it is the payment client behind the
// resilience stack (payment.Protected); the order package only needs these
// two methods.
type Payer interface {
	Charge(ctx context.Context, req payment.ChargeRequest) (payment.Receipt, error)
	// RetryAfter is how long until the provider may be called again (the
	// circuit breaker's remaining open time), 0 when it may be called now.
	RetryAfter() time.Duration
}

// Renderer turns an order into the HTTP response stored for its
// Idempotency-Key. It belongs to the HTTP layer; the service calls it so the
// response is saved in the same transaction that settles the order.
type Renderer func(Order) idempotency.Response

// Config tunes the checkout flow.
type Config struct {
	// PaymentBudget bounds the synchronous charge, retries included. It must
	// leave room for both transactions within the client's patience (the
	// experiment's clients give up after 3 s). Zero means no bound: mode
	// none, which shows what an unprotected call does.
	PaymentBudget time.Duration
	// DBTimeout bounds each transaction, so a dead database yields a 503
	// within ~2 s (DESIGN.md) instead of holding an API worker.
	DBTimeout time.Duration
	// Fallback saves orders as pending_payment when the provider is
	// unavailable (protected mode). Off, such requests fail with 502/504.
	Fallback bool
}

// DefaultConfig: two 500 ms attempts plus up to 100 ms of backoff fit in
// 1.5 s, and 1.5 s per transaction keeps a database outage's 503 under 2 s.
func DefaultConfig() Config {
	return Config{PaymentBudget: 1500 * time.Millisecond, DBTimeout: 1500 * time.Millisecond, Fallback: true}
}

// lockTTL is how long a request holds its key, and when the order's charge
// job first becomes due: after the request's own deadline, so the worker
// only takes over orders whose request died. The longest request — one
// that resumes a key — runs three transactions and the charge.
func (c Config) lockTTL() time.Duration {
	budget := c.PaymentBudget
	if budget == 0 {
		budget = unboundedCharge
	}
	return budget + 3*c.DBTimeout + time.Second
}

// unboundedCharge stands for the length of a charge without a budget (mode
// none): no response outlives the HTTP server's 30 s write timeout.
const unboundedCharge = 30 * time.Second

// Service runs the checkout flow.
type Service struct {
	db     *pgxpool.Pool
	payer  Payer
	render Renderer
	cfg    Config
	log    *slog.Logger
}

// NewService wires the flow's dependencies.
func NewService(db *pgxpool.Pool, payer Payer, render Renderer, cfg Config, log *slog.Logger) *Service {
	return &Service{db: db, payer: payer, render: render, cfg: cfg, log: log}
}

// Result is what Place answered.
type Result struct {
	Response idempotency.Response
	// Replayed: Response is the stored answer to an earlier request.
	Replayed bool
	// Order is the order as it stands (zero when Replayed).
	Order Order
	// RetryAfter hints when a deferred order is worth polling.
	RetryAfter time.Duration
}

// placement carries one request through the flow.
type placement struct {
	key   string
	order Order
	jobID int64 // 0 when not known (a resumed request)
}

// Place creates the order for one Idempotency-Key and tries to charge it.
//
//  1. One statement claims the key, inserts the order (pending) and its
//     charge job, due after this request's deadline. From here on the order
//     cannot be lost: if this process dies, the worker charges it.
//  2. The charge runs through the Payer (retry → breaker → bulkhead →
//     timeout) within PaymentBudget.
//  3. One batch — a single round trip and an implicit transaction — settles
//     the order, retires or reschedules its job and stores the response
//     for replays.
func (s *Service) Place(ctx context.Context, key string, req PlaceRequest) (Result, error) {
	total, err := req.Validate()
	if err != nil {
		return Result{}, err
	}
	p, claim, err := s.begin(ctx, key, req, total)
	if err != nil {
		return Result{}, classifyDBError(err)
	}
	switch claim.State {
	case idempotency.Finished:
		return Result{Response: claim.Response, Replayed: true}, nil
	case idempotency.InProgress:
		return Result{}, ErrKeyInUse
	case idempotency.Mismatch:
		return Result{}, ErrKeyReused
	}
	if p.order.Status.Terminal() {
		// A resumed request whose order the worker settled meanwhile.
		return s.settle(ctx, p, settlement{Status: p.order.Status})
	}
	return s.charge(ctx, p)
}

// begin is step 1. Its common case — a new key — is one statement. A key
// seen before (a replay, a retry) writes nothing there and costs a
// transaction to look the key up.
func (s *Service) begin(ctx context.Context, key string, req PlaceRequest, total int64) (placement, idempotency.Claim, error) {
	lockFor := s.cfg.lockTTL()
	p := placement{key: key}
	o, err := newOrder(req, total)
	if err != nil {
		return p, idempotency.Claim{}, err
	}
	dbCtx, cancel := s.dbContext(ctx)
	p.jobID, err = insertOrderWithKeyAndJob(dbCtx, s.db, &o, key, req.Fingerprint(), lockFor, time.Now().Add(lockFor))
	cancel()
	if err == nil {
		p.order = o
		return p, idempotency.Claim{State: idempotency.Claimed}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) { // ErrNoRows: the key existed
		return p, idempotency.Claim{}, err
	}

	var claim idempotency.Claim
	err = s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if claim, err = idempotency.Lookup(ctx, tx, key, req.Fingerprint(), lockFor); err != nil {
			return err
		}
		if claim.State == idempotency.Resumed {
			p.order, err = Get(ctx, tx, claim.OrderID)
		}
		return err
	})
	return p, claim, err
}

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

// charge is step 2; it always ends in settle unless fallback is off.
func (s *Service) charge(ctx context.Context, p placement) (Result, error) {
	// The charge outlives a client that hangs up: finishing it and storing
	// the response lets the client's retry get a replay instead of a 409.
	chargeCtx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if s.cfg.PaymentBudget > 0 {
		chargeCtx, cancel = context.WithTimeout(chargeCtx, s.cfg.PaymentBudget)
	}
	defer cancel()
	o := p.order
	receipt, err := s.payer.Charge(chargeCtx, payment.ChargeRequest{
		OrderID: o.ID.String(), Amount: o.Total, Currency: o.Currency, PaymentMethod: o.PaymentMethod,
	})
	switch {
	case err == nil:
		return s.settle(ctx, p, settlement{Status: StatusPaid, ChargeID: receipt.ChargeID})
	case payment.IsDeclined(err):
		return s.settle(ctx, p, settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined})
	case errors.Is(err, payment.ErrPermanent):
		// The provider rejected our request itself: retrying cannot help.
		s.log.ErrorContext(ctx, "payment provider rejected the charge request", "order_id", o.ID, "err", err)
		return s.settle(ctx, p, settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderRejected})
	case s.cfg.Fallback:
		s.log.WarnContext(ctx, "payment deferred to the worker", "order_id", o.ID, "err", err)
		return s.settle(ctx, p, settlement{Status: StatusPendingPayment})
	}
	// No fallback: the order stays pending and its job (due after lockTTL)
	// charges it. Free the key so a client retry resumes right away.
	if relErr := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return idempotency.Release(ctx, tx, p.key)
	}); relErr != nil {
		s.log.WarnContext(ctx, "could not release idempotency key", "err", relErr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Result{}, fmt.Errorf("%w: order %s: %w", ErrProviderTimeout, o.ID, err)
	}
	return Result{}, fmt.Errorf("%w: order %s: %w", ErrProviderUnavailable, o.ID, err)
}

// settle is step 3: the order's new state, its job and the stored response
// change together or not at all, in one round trip. The order update only
// applies to an order still unsettled: the API and the worker may race to
// settle it (only when a request outlives its lock) and the first one wins.
// The loser still stores its own rendering as the key's response; both
// charged with the same provider key, so a paid or declined answer names
// the same charge or decline, and a 202 stays a 202 that clients poll.
func (s *Service) settle(ctx context.Context, p placement, to settlement) (Result, error) {
	o := p.order
	b := &pgx.Batch{}
	if !o.Status.Terminal() {
		o.Status, o.ChargeID, o.FailureReason = to.Status, to.ChargeID, to.FailureReason
		o.UpdatedAt = now()
		queueSettle(b, o)
	}
	res := Result{Order: o, Response: s.render(o)}
	if p.jobID != 0 { // 0: a resumed request; its job stays as scheduled
		if o.Status == StatusPendingPayment {
			res.RetryAfter = s.probeDelay()
			b.Queue(rescheduleJobSQL, p.jobID, time.Now().Add(res.RetryAfter))
		} else {
			b.Queue(retireJobSQL, p.jobID)
		}
	}
	idempotency.QueueFinish(b, p.key, res.Response)

	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, classifyDBError(fmt.Errorf("settle order %s as %s: %w", o.ID, o.Status, err))
	}
	return res, nil
}

// probeDelay is when a deferred order's job should run: once the breaker
// lets a probe through, plus jitter so a burst of deferred orders does not
// become a burst of worker calls.
func (s *Service) probeDelay() time.Duration {
	wait := max(s.payer.RetryAfter(), 500*time.Millisecond)
	return wait + rand.N(wait/2+1)
}

// Get returns an order.
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
// one. A timeout can still fire after Postgres committed: the client gets a
// 503 for an order that exists, which is safe — the worker charges it, and a
// retry with the same key resumes it once the key's lock expires.
func (s *Service) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.DBTimeout)
}

// inTx runs fn in a transaction bounded by DBTimeout (see dbContext).
func (s *Service) inTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return fn(ctx, tx) })
}

func classifyDBError(err error) error {
	if err != nil && database.IsUnavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
