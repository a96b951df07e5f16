package paymentsim

import (
	"crypto/rand"
	"sync"
	"time"
)

// claim is what the ledger says about an incoming Idempotency-Key.
type claim int

const (
	claimNew      claim = iota // first use: the caller processes it and calls finish
	claimDone                  // finished earlier: replay the stored response
	claimInFlight              // a request with this key is still processing
	claimMismatch              // the key was used with other parameters
	claimRefused               // a confirm its intent's state refuses; nothing recorded
)

// entry is one idempotency key's record. resp is written once, under the ledger's lock, and
// never changes after done is set, so replays may read it without the lock.
type entry struct {
	params intentRequest
	at     time.Time
	done   bool
	resp   response
	gen    int
}

// Stats are the ledger's figures for an experiment; DuplicateReferences must stay 0 while
// clients behave.
type Stats struct {
	// TotalCharges counts successful charges.
	TotalCharges int `json:"total_charges"`
	// Declines counts declined charge attempts.
	Declines int `json:"declines"`
	// ChargesByReference counts successful charges (succeeded PaymentIntents) per reference
	// (order id), from the PaymentIntents kept (Config.ChargeCap), which outlive the
	// idempotency keys.
	ChargesByReference map[string]int `json:"charges_by_reference"`
	// DuplicateReferences counts references charged successfully more than once, since start
	// or reset. It is counted from the PaymentIntents kept, not from the key cache, so it also
	// catches the second charge a client makes by retrying after the provider forgot its key.
	// (A reference whose first charge had already been forgotten is not caught.)
	DuplicateReferences int `json:"duplicate_references"`
	// IdempotencyKeys is how many keys the ledger holds.
	IdempotencyKeys int `json:"idempotency_keys"`
	// InFlight is how many charge requests are being processed now.
	InFlight int `json:"in_flight"`
	// MaxInFlight is the most charge requests processed at once since start or reset.
	MaxInFlight int `json:"max_in_flight"`
	// MaxInFlightDuringFault is the most processed at once while a fault was active, since
	// start or reset: how much work callers piled on the failing provider.
	MaxInFlightDuringFault int `json:"max_in_flight_during_fault"`
	// ChargesDuringFault counts the charge requests that arrived while a fault was active,
	// since start or reset: what callers sent into the trouble.
	ChargesDuringFault int `json:"charges_during_fault"`
	// LookupsDuringFault counts the reads of PaymentIntents (retrieve, list, search) that
	// arrived while a fault was active: questions callers sent into the trouble (a breaker's
	// probe, a lookup, the ledger walk), which charge nothing.
	LookupsDuringFault int `json:"lookups_during_fault"`
	// ChargesProcessed counts the charges that began processing, and ChargesOverCapacity
	// those that began it with more charges processing than the capacity (Config.Capacity or
	// a capacity fault's): each of them slowed every charge then processing.
	ChargesProcessed    int `json:"charges_processed"`
	ChargesOverCapacity int `json:"charges_over_capacity"`
	// Capacity is Config.Capacity, 0 for unlimited.
	Capacity int `json:"capacity"`
	// RateLimited counts the charge requests answered 429 by the rate limit, since start or
	// reset; they charged nothing.
	RateLimited int `json:"rate_limited"`
}

// ledger is the provider's memory: the idempotency keys (a bounded cache, as at a real
// provider) and, apart from them, the PaymentIntents created (see intentLog).
type ledger struct {
	mu           sync.Mutex
	keyCap       int
	keyRetention time.Duration
	intentCap    int
	gen          int // bumped by reset, so creates begun before it do not count after it
	entries      *boundedMap[string, *entry]
	intents      *intentLog
	total        int
	declines     int
	duplicates   int
}

func newLedger(keyCap int, keyRetention time.Duration, intentCap int) *ledger {
	l := &ledger{keyCap: keyCap, keyRetention: keyRetention, intentCap: intentCap}
	l.reset()
	return l
}

// claim looks key up and, on first use, records it as in flight and returns the intent the
// request works on. For a create that is a new intent, stamped with the time the request
// was accepted, as a real provider stamps it: an intent that took long therefore appears in
// the list after intents created later than it, which the ledger walk must not miss. For a
// confirm it is the intent confirmed, taken for the confirm (see intentLog.beginConfirm); a
// confirm its state refuses records nothing (claimRefused, with the reason), as Stripe saves
// no result for a request it refused before executing it. A key older than the retention is
// forgotten, as Stripe forgets keys after 24 hours: its reuse is a new request.
func (l *ledger) claim(key string, req intentRequest) (*entry, claim, intent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if e, ok := l.entries.get(key); ok && now.Sub(e.at) < l.keyRetention {
		switch {
		case e.params != req:
			return e, claimMismatch, intent{}, nil
		case !e.done:
			return e, claimInFlight, intent{}, nil
		}
		return e, claimDone, intent{}, nil
	}
	pi := intent{
		ID: "pi_" + rand.Text(), Amount: req.Amount, Currency: req.Currency, PaymentMethod: req.PaymentMethod,
		OrderID: req.OrderID, Created: now.UTC().Truncate(time.Microsecond),
	}
	if req.Intent != "" {
		var err error
		if pi, err = l.intents.beginConfirm(req.Intent, req.PaymentMethod); err != nil {
			return nil, claimRefused, intent{}, err
		}
	}
	e := &entry{params: req, at: now, gen: l.gen}
	l.entries.put(key, e)
	return e, claimNew, pi, nil
}

// finish stores a claimed key's response for replays and records the PaymentIntent the
// request created or confirmed, whatever its status: a succeeded one is a charge, a
// requires_payment_method one a decline, a requires_action or requires_confirmation one
// neither.
func (l *ledger) finish(e *entry, resp response, pi intent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.resp, e.done = resp, true
	if e.gen != l.gen {
		return
	}
	switch pi.Status {
	case "succeeded":
		l.total++
	case "requires_payment_method":
		l.declines++
	}
	if l.intents.add(pi) == 2 {
		l.duplicates++
	}
}

// getIntent returns the PaymentIntent with id.
func (l *ledger) getIntent(id string) (intent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.intents.get(id)
}

// searchIntents returns orderID's intents recorded at or before visible (see
// intentLog.search).
func (l *ledger) searchIntents(orderID string, visible time.Time) []intent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.intents.search(orderID, visible)
}

// listIntents returns a page of the PaymentIntents list (see intentLog.page).
func (l *ledger) listIntents(q intentQuery) ([]intent, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.intents.page(q)
}

func (l *ledger) stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		TotalCharges:        l.total,
		Declines:            l.declines,
		ChargesByReference:  l.intents.chargesByReference(),
		DuplicateReferences: l.duplicates,
		IdempotencyKeys:     l.entries.len(),
	}
}

// duplicateReferences returns Stats.DuplicateReferences without copying the rest.
func (l *ledger) duplicateReferences() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.duplicates
}

func (l *ledger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.entries = newBoundedMap[string, *entry](l.keyCap)
	l.intents = newIntentLog(l.intentCap)
	l.total, l.declines, l.duplicates = 0, 0, 0
}
