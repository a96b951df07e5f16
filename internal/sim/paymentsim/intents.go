package paymentsim

import (
	"errors"
	"maps"
	"slices"
	"sort"
	"time"
)

// intent is a PaymentIntent as the provider keeps it: every one it created, whatever its
// status, as Stripe lists them.
type intent struct {
	ID            string
	Amount        int64
	Currency      string // lowercase, as Stripe writes it
	Status        string
	PaymentMethod string
	OrderID       string // metadata[order_id]; empty when the create carried none
	Created       time.Time
	LatestCharge  string    // the charge a succeeded intent made; empty otherwise
	seq           int       // the order it was recorded in, which breaks ties of Created
	recorded      time.Time // when it was recorded: search sees it only SearchLag later
	confirming    bool      // a confirm is processing it (see beginConfirm)
}

// reference is the order a succeeded intent charged, by which duplicate charges are
// counted: its metadata[order_id], or for a payment of no order its own id, never a
// duplicate.
func (pi intent) reference() string {
	if pi.OrderID == "" {
		return pi.ID
	}
	return pi.OrderID
}

// intentLog is the PaymentIntents list: newest first by creation time, as Stripe lists them.
// An intent is recorded when its processing ends, stamped with the time its request was
// accepted, so one whose request took long is inserted among older ones — it appears late,
// which the ledger walk must cope with. It also counts the succeeded intents (the charges)
// of each reference, what duplicate charges are counted from.
//
// It is kept apart from the idempotency keys on purpose. A provider forgets keys (Stripe
// after 24 h, this simulator beyond LedgerCap) but not payments, and the list is how a
// caller whose key may be forgotten learns whether an order was charged; a list that forgot
// with the keys would say "not charged" exactly when it matters. Memory is bounded all the
// same, by a count of intents rather than of references, so a client charging one order
// under ever new keys cannot grow it without limit: beyond capacity the oldest intent is
// forgotten. Every intent needs a key of its own, so with capacity at least the key cache's
// an intent is never forgotten before its key; see Config.ChargeCap for the default margin.
// It is not safe for concurrent use; the ledger's lock guards it.
type intentLog struct {
	cap     int
	seq     int
	byID    map[string]*intent
	list    []*intent      // oldest first, so a new intent is appended; read newest first through at
	charged map[string]int // succeeded intents kept, by reference
}

func newIntentLog(capacity int) *intentLog {
	return &intentLog{cap: capacity, byID: make(map[string]*intent), charged: make(map[string]int)}
}

// newer reports whether a comes before b in the list as Stripe lists it, newest first.
func newer(a, b *intent) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	return a.seq > b.seq
}

// add records pi at its place in the list, or the outcome of its confirm if the list holds
// it already, and returns how many charges its reference now has: 0 unless pi succeeded.
func (l *intentLog) add(pi intent) int {
	if p, ok := l.byID[pi.ID]; ok {
		p.Status, p.PaymentMethod, p.LatestCharge, p.confirming = pi.Status, pi.PaymentMethod, pi.LatestCharge, false
		return l.charge(p)
	}
	l.seq++
	pi.seq, pi.recorded = l.seq, time.Now()
	p := &pi
	i, _ := slices.BinarySearchFunc(l.list, p, func(e, t *intent) int {
		if newer(t, e) {
			return -1
		}
		return 1
	})
	l.list = slices.Insert(l.list, i, p) // nearly always at the end: O(1), not a copy of the list
	l.byID[p.ID] = p
	charges := l.charge(p)
	for len(l.list) > l.cap {
		l.evictOldest()
	}
	return charges
}

// charge counts p among its reference's charges if it succeeded and returns how many that
// reference now has: 0 unless p succeeded.
func (l *intentLog) charge(p *intent) int {
	if p.Status != "succeeded" {
		return 0
	}
	l.charged[p.reference()]++
	return l.charged[p.reference()]
}

// errIntentLocked: a confirm of an intent another confirm is processing.
var errIntentLocked = errors.New("payment_intent locked by another request")

// unexpectedStateError: a confirm of an intent whose status allows none.
type unexpectedStateError struct{ intent intent }

func (e *unexpectedStateError) Error() string {
	return "payment_intent " + e.intent.ID + " is " + e.intent.Status
}

// beginConfirm takes the intent id for a confirm with paymentMethod (empty: the intent's
// own) and returns it as the confirm will process it. As Stripe's, a confirm is refused
// (errNoSuchIntent, errIntentLocked, *unexpectedStateError) unless the intent is
// requires_confirmation, or requires_payment_method after a decline and given another
// payment method; a succeeded intent is never confirmed again. Until add records the
// outcome, a second confirm is refused as Stripe refuses a request on an object another
// request holds (lock_timeout).
func (l *intentLog) beginConfirm(id, paymentMethod string) (intent, error) {
	p, ok := l.byID[id]
	switch {
	case !ok:
		return intent{}, errNoSuchIntent
	case p.confirming:
		return intent{}, errIntentLocked
	case p.Status == "requires_confirmation", p.Status == "requires_payment_method" && paymentMethod != "":
	default:
		return intent{}, &unexpectedStateError{intent: *p}
	}
	p.confirming = true
	pi := *p
	if paymentMethod != "" {
		pi.PaymentMethod = paymentMethod
	}
	return pi, nil
}

// evictOldest forgets the intent created first.
func (l *intentLog) evictOldest() {
	oldest := l.list[0]
	l.list[0] = nil
	l.list = l.list[1:]
	delete(l.byID, oldest.ID)
	if oldest.Status != "succeeded" {
		return
	}
	if ref := oldest.reference(); l.charged[ref] > 1 {
		l.charged[ref]--
	} else {
		delete(l.charged, ref)
	}
}

// get returns the intent with id.
func (l *intentLog) get(id string) (intent, bool) {
	p, ok := l.byID[id]
	if !ok {
		return intent{}, false
	}
	return *p, true
}

// errNoSuchIntent: a list's cursor names an intent the log does not hold.
var errNoSuchIntent = errors.New("no such payment_intent")

// intentQuery is one request for a page of the list. Created bounds are inclusive, in Unix
// seconds as Stripe compares them; a nil bound is no bound.
type intentQuery struct {
	createdGTE, createdLTE *int64
	limit                  int
	startingAfter          string // page towards older intents, after this one
	endingBefore           string // page towards newer intents, before this one
}

func (q intentQuery) matches(pi *intent) bool {
	c := pi.Created.Unix()
	return (q.createdGTE == nil || c >= *q.createdGTE) && (q.createdLTE == nil || c <= *q.createdLTE)
}

// page returns up to limit intents of the list that match q, newest first, and whether more
// follow in the direction of paging. With endingBefore the page is the limit intents just
// newer than the cursor, still newest first, as Stripe answers it. It reads no further into
// the list than the page needs, so a lookup of a recent window stays cheap however long
// the list is.
func (l *intentLog) page(q intentQuery) ([]intent, bool, error) {
	from, step := 0, 1
	switch {
	case q.startingAfter != "":
		i, err := l.position(q.startingAfter)
		if err != nil {
			return nil, false, err
		}
		from = i + 1
	case q.endingBefore != "":
		i, err := l.position(q.endingBefore)
		if err != nil {
			return nil, false, err
		}
		from, step = i-1, -1
	default:
		// Intents newer than the window are skipped by a binary search, not a scan.
		if q.createdLTE != nil {
			from = sort.Search(len(l.list), func(i int) bool { return l.at(i).Created.Unix() <= *q.createdLTE })
		}
	}
	var out []intent
	for i := from; i >= 0 && i < len(l.list); i += step {
		pi := l.at(i)
		if step == 1 && q.createdGTE != nil && pi.Created.Unix() < *q.createdGTE {
			break // older than the window, as is everything after it
		}
		if !q.matches(pi) {
			continue
		}
		if len(out) == q.limit {
			if step == -1 {
				slices.Reverse(out)
			}
			return out, true, nil
		}
		out = append(out, *pi)
	}
	if step == -1 {
		slices.Reverse(out)
	}
	return out, false, nil
}

// position finds id's place in the list, newest first (at's index).
func (l *intentLog) position(id string) (int, error) {
	p, ok := l.byID[id]
	if !ok {
		return 0, errNoSuchIntent
	}
	i, _ := slices.BinarySearchFunc(l.list, p, func(e, t *intent) int {
		switch {
		case e == t:
			return 0
		case newer(t, e):
			return -1
		}
		return 1
	})
	return len(l.list) - 1 - i, nil
}

// at returns the intent i-th newest.
func (l *intentLog) at(i int) *intent { return l.list[len(l.list)-1-i] }

// search returns the intents of orderID recorded at or before visible, newest first: what a
// search index that lags the list shows.
func (l *intentLog) search(orderID string, visible time.Time) []intent {
	out := []intent{}
	for i := range l.list {
		pi := l.at(i)
		if pi.OrderID == orderID && !pi.recorded.After(visible) {
			out = append(out, *pi)
		}
	}
	return out
}

// chargesByReference returns how many succeeded intents are kept for each reference.
func (l *intentLog) chargesByReference() map[string]int {
	return maps.Clone(l.charged)
}
