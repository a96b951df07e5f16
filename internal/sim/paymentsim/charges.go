package paymentsim

import "slices"

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
	order []string // the reference of every charge kept, oldest first
}

func newChargeLog(capacity int) *chargeLog {
	return &chargeLog{cap: capacity, byRef: make(map[string][]charge)}
}

// add records a successful charge and returns how many charges its reference now has.
func (c *chargeLog) add(ch charge) int {
	c.byRef[ch.Reference] = append(c.byRef[ch.Reference], ch)
	c.order = append(c.order, ch.Reference)
	for len(c.order) > c.cap {
		c.evictOldest()
	}
	return len(c.byRef[ch.Reference])
}

// evictOldest forgets the oldest charge. Charges are added in order, so the oldest charge
// overall is the oldest of its reference.
func (c *chargeLog) evictOldest() {
	ref := c.order[0]
	c.order = c.order[1:] // append reallocates the backing array as it grows
	if rest := c.byRef[ref][1:]; len(rest) > 0 {
		c.byRef[ref] = rest
	} else {
		delete(c.byRef, ref)
	}
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
