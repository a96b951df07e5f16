package paymentsim

import (
	"errors"
	"slices"
	"time"
)

// chargeLog is the provider's record of successful charges per reference, oldest first: what
// GET /v1/charges answers from, and what duplicate charges are counted from. It is kept apart from the idempotency keys on purpose. A
// provider forgets keys (Stripe after 24 h, this simulator beyond LedgerCap) but not charges,
// and the lookup is how a caller whose key may be forgotten learns whether an order was
// charged; a lookup that forgot with the keys would say "not charged" exactly when it matters.
//
// Memory is bounded all the same, by a count of charges rather than of references, so a
// client charging one reference under ever new keys cannot grow it without limit: beyond cap
// charges the oldest one is forgotten. Every charge needs a key of its own, so with cap at
// least the key cache's capacity a charge is never forgotten before its key; see
// Config.ChargeCap for the default margin. It is not safe for concurrent use; the ledger's
// lock guards it.
type chargeLog struct {
	cap   int
	byRef map[string][]charge
	all   []charge       // every charge kept, in the order it was recorded: the charge list
	seq   map[string]int // a kept charge's position in the list since the log began
	first int            // the position of all[0]
}

func newChargeLog(capacity int) *chargeLog {
	return &chargeLog{cap: capacity, byRef: make(map[string][]charge), seq: make(map[string]int)}
}

// add records a successful charge and returns how many charges its reference now has.
func (c *chargeLog) add(ch charge) int {
	c.byRef[ch.Reference] = append(c.byRef[ch.Reference], ch)
	c.seq[ch.ID] = c.first + len(c.all)
	c.all = append(c.all, ch)
	for len(c.all) > c.cap {
		c.evictOldest()
	}
	return len(c.byRef[ch.Reference])
}

// evictOldest forgets the oldest charge. Charges are added in order, so the oldest charge
// overall is the oldest of its reference.
func (c *chargeLog) evictOldest() {
	oldest := c.all[0]
	c.all = c.all[1:] // append reallocates the backing array as it grows
	c.first++
	delete(c.seq, oldest.ID)
	if rest := c.byRef[oldest.Reference][1:]; len(rest) > 0 {
		c.byRef[oldest.Reference] = rest
	} else {
		delete(c.byRef, oldest.Reference)
	}
}

// errNoSuchCharge: a list's cursor names a charge the log does not hold.
var errNoSuchCharge = errors.New("no such charge")

// list returns up to limit charges in the order they were recorded, created at or after
// createdGTE and, unless it is zero, at or before createdLTE, and, with a cursor, after the
// charge startingAfter; and whether more follow.
// Paging by position rather than by time is what lets a walk resumed from its last charge
// see every charge once, also those recorded while it walks.
func (c *chargeLog) list(createdGTE, createdLTE time.Time, limit int, startingAfter string) ([]charge, bool, error) {
	start := 0
	if startingAfter != "" {
		pos, ok := c.seq[startingAfter]
		if !ok {
			return nil, false, errNoSuchCharge
		}
		start = pos - c.first + 1
	}
	page := []charge{}
	for i := start; i < len(c.all); i++ {
		if c.all[i].Created.Before(createdGTE) || !createdLTE.IsZero() && c.all[i].Created.After(createdLTE) {
			continue
		}
		if len(page) == limit {
			return page, true, nil
		}
		page = append(page, c.all[i])
	}
	return page, false, nil
}

// find returns a copy of ref's charges, oldest first; nil when there are none.
func (c *chargeLog) find(ref string) []charge {
	return slices.Clone(c.byRef[ref])
}

// countByReference returns how many charges are kept for each reference.
func (c *chargeLog) countByReference() map[string]int {
	counts := make(map[string]int, len(c.byRef))
	for ref, charges := range c.byRef {
		counts[ref] = len(charges)
	}
	return counts
}
