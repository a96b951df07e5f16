package lookupcost

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// The charge every order asks for.
const (
	amount        = 2598
	currency      = "USD"
	paymentMethod = "pm_card_visa"
	secretKey     = "sk_test_lookupcost"
)

// oneStep is the product's design, through the product's client: Charge creates and
// confirms in one request, FindCharges is the lookup.
type oneStep struct {
	client      *payment.Client
	timeout     time.Duration
	lookupAfter time.Duration // the worker's LookupAfter, which order.LookupFor widens the window by
}

func newOneStep(baseURL string, cfg Config) (*oneStep, error) {
	// MaxConns -1: no connection cap, which is a bulkhead, part of the protection stack the
	// lab leaves out; every request is sent when its order asks.
	client, err := payment.NewClient(payment.Config{BaseURL: baseURL, SecretKey: secretKey, MaxConns: -1})
	if err != nil {
		return nil, err
	}
	return &oneStep{client: client, timeout: cfg.Timeout, lookupAfter: worker.DefaultChargePolicy().LookupAfter}, nil
}

func (d *oneStep) name() string { return "one-step" }

// prepare has nothing to do: the design keeps nothing of an order's charge.
func (d *oneStep) prepare(context.Context, []*trackedOrder) error { return nil }

func (d *oneStep) charge(ctx context.Context, t *tally, o *trackedOrder) (outcome, time.Duration, error) {
	ctx, cancel := context.WithTimeout(t.track(ctx, kindCharge), d.timeout)
	defer cancel()
	_, err := d.client.Charge(ctx, payment.ChargeRequest{OrderID: o.id.String(), Amount: amount, Currency: currency, PaymentMethod: paymentMethod})
	if err == nil {
		return paid, 0, nil
	}
	if wait, ok := payment.RetryAfterOf(err); ok {
		return throttled, wait, nil
	}
	if !errors.Is(err, payment.ErrTransient) {
		return unknown, 0, fmt.Errorf("%w: %w", errUnexpected, err)
	}
	return unknown, 0, nil
}

// settle is the product's lookup: FindCharges over the window order.LookupFor gives the
// order's attempts, the list read page by page and filtered by metadata.order_id.
func (d *oneStep) settle(ctx context.Context, t *tally, o *trackedOrder) (bool, error) {
	l := order.LookupFor(order.Order{ID: o.id, CreatedAt: o.due, LastAttemptAt: o.lastAttempt}, d.lookupAfter)
	found, err := d.client.FindCharges(t.track(ctx, kindLookup), payment.Lookup{OrderID: l.Reference, CreatedFrom: l.CreatedFrom, CreatedTo: l.CreatedTo})
	return len(found) > 0, err
}

// twoStep is Stripe's rocket-rides-atomic pattern: create the PaymentIntent unconfirmed,
// store its id, confirm it; the lookup retrieves it by that id.
type twoStep struct {
	sc      *stripe.Client
	db      *store
	timeout time.Duration
}

// newTwoStep builds a stripe-go client with the settings internal/payment gives the
// product's (payment.NewClient): the SDK's retries, telemetry and logging off, our
// http.Client, redirects not followed, no connection cap (see newOneStep).
func newTwoStep(baseURL string, cfg Config, db *store) *twoStep {
	httpClient := &http.Client{
		Transport:     &http.Transport{MaxIdleConnsPerHost: 256},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(baseURL),
		HTTPClient:        httpClient,
		MaxNetworkRetries: stripe.Int64(0),
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return &twoStep{sc: stripe.NewClient(secretKey, stripe.WithBackends(backends)), db: db, timeout: cfg.Timeout}
}

func (d *twoStep) name() string { return "two-step" }

func (d *twoStep) prepare(ctx context.Context, orders []*trackedOrder) error {
	return d.db.prepare(ctx, orders)
}

// charge creates the intent unless an earlier attempt stored one, stores its id, then
// confirms it. A create that fails leaves the order certainly not charged: only the
// confirm moves money.
func (d *twoStep) charge(ctx context.Context, t *tally, o *trackedOrder) (outcome, time.Duration, error) {
	if o.intentID == "" {
		params := &stripe.PaymentIntentCreateParams{
			Amount: stripe.Int64(amount), Currency: stripe.String("usd"), PaymentMethod: stripe.String(paymentMethod),
			PaymentMethodTypes: []*string{stripe.String("card")},
		}
		params.AddMetadata("order_id", o.id.String())
		params.SetIdempotencyKey("order-" + o.id.String() + "-create")
		pi, err := d.call(t.track(ctx, kindCreate), func(ctx context.Context) (*stripe.PaymentIntent, error) {
			return d.sc.V1PaymentIntents.Create(ctx, params)
		})
		if out, wait, err := d.classify(pi, err, stripe.PaymentIntentStatusRequiresConfirmation); out != paid {
			if out == unknown && err == nil {
				out = notCharged
			}
			return out, wait, err
		}
		if err := d.db.storeIntent(ctx, o.id, pi.ID); err != nil {
			return unknown, 0, err
		}
		o.intentID = pi.ID
	}
	params := &stripe.PaymentIntentConfirmParams{}
	params.SetIdempotencyKey("order-" + o.id.String() + "-confirm")
	pi, err := d.call(t.track(ctx, kindCharge), func(ctx context.Context) (*stripe.PaymentIntent, error) {
		return d.sc.V1PaymentIntents.Confirm(ctx, o.intentID, params)
	})
	return d.classify(pi, err, stripe.PaymentIntentStatusSucceeded)
}

// call makes one request under the attempt timeout.
func (d *twoStep) call(ctx context.Context, req func(context.Context) (*stripe.PaymentIntent, error)) (*stripe.PaymentIntent, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return req(ctx)
}

// classify reads a create's or a confirm's answer: the status wanted is paid (the step
// done), a 429 is throttled with its Retry-After (1 s if absent, as the product reads it),
// any other answer of the provider is errUnexpected, and no answer is unknown.
func (d *twoStep) classify(pi *stripe.PaymentIntent, err error, want stripe.PaymentIntentStatus) (outcome, time.Duration, error) {
	se, answered := errors.AsType[*stripe.Error](err)
	switch {
	case err == nil && pi.Status == want:
		return paid, 0, nil
	case err == nil:
		return unknown, 0, fmt.Errorf("%w: PaymentIntent %s is %s, want %s", errUnexpected, pi.ID, pi.Status, want)
	case answered && se.HTTPStatusCode == http.StatusTooManyRequests:
		wait := time.Second
		if se.LastResponse != nil {
			if s, err := strconv.Atoi(se.LastResponse.Header.Get("Retry-After")); err == nil {
				wait = time.Duration(s) * time.Second
			}
		}
		return throttled, wait, nil
	case answered && se.HTTPStatusCode != 0:
		return unknown, 0, fmt.Errorf("%w: %w", errUnexpected, err)
	}
	return unknown, 0, nil
}

// settle retrieves the stored intent: succeeded is charged; requires_confirmation (the
// confirm never landed) and requires_payment_method are not.
func (d *twoStep) settle(ctx context.Context, t *tally, o *trackedOrder) (bool, error) {
	pi, err := d.sc.V1PaymentIntents.Retrieve(t.track(ctx, kindLookup), o.intentID, nil)
	if err != nil {
		return false, err
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		return true, nil
	case stripe.PaymentIntentStatusRequiresConfirmation, stripe.PaymentIntentStatusRequiresPaymentMethod:
		return false, nil
	}
	return false, fmt.Errorf("%w: PaymentIntent %s is %s", errUnexpected, pi.ID, pi.Status)
}
