package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Order is an orders row as the audit reads it.
type Order struct {
	ID            string
	Status        string
	PaymentMethod string
	Total         int64
	Currency      string
	ChargeID      string
	FailureReason string
}

// Evidence is everything the audit judges: what the clients were told, what
// Postgres holds and what the provider holds.
type Evidence struct {
	Exchanges []Exchange
	Orders    map[string]Order  // by id: every row of the orders table
	Keys      map[string]string // Idempotency-Key → order id, from idempotency_keys
	Stats     Stats             // the provider's ledger
	// Charges are the charges in the provider's PaymentIntents list, by
	// order id.
	Charges map[string][]Charge
	// Failovers are the soak's failovers, in the load's time.
	Failovers []FailoverTimes
}

// FailoverTimes is when a failover killed the primary and promoted the standby.
type FailoverTimes struct {
	Killed, Promoted time.Duration // in the load's time, that of Exchange.Sent
}

// FailoverReport is what the clients saw of a failover.
type FailoverReport struct {
	FailoverTimes
	// Recovered is when the first request sent after the promotion was
	// acknowledged; zero if none was.
	Recovered time.Duration
	// Unavailable and Unanswered count the requests sent from the kill
	// until Recovered that got a 503 or no answer at all.
	Unavailable, Unanswered int
}

// Report is the audit's outcome.
type Report struct {
	Requests        map[string]int // sent, by kind
	Answers         map[int]int    // by status; 0 is no HTTP answer
	Acknowledged    int            // distinct orders answered 201, 202 or 402
	Orders          map[string]int // rows by status (payment_failed by reason)
	ProviderCharges int

	ReplaysConsistent  int // byte-identical to the first answer
	ReplaysSpanCrash   int // of those, sent after a Postgres crash or failover that began after the first request
	ReplaysRecomputed  int // across a Postgres crash or failover: same status and order, other bytes
	ReplaysUnavailable int // no answer or 503 (or 409 after a crash): nothing to judge
	// Unrecorded counts the 202s with the order still pending: the database
	// failed after the order was stored, and the answer was not recorded
	// (docs/design.md, "A database failure after the order is stored
	// answers 202"). ReplaysOfUnrecorded counts the replays of those, which
	// get the order as it then stands.
	Unrecorded, ReplaysOfUnrecorded int
	Mismatches422                   int
	RetriesAnswered                 int // retries of an unanswered key that got 201, 202 or 402
	RetriesUnanswered               int // 409 (still in progress), 503 or no answer again

	Failovers []FailoverReport

	Violations []string
}

// OK reports whether the audit found no violation.
func (r Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Audit checks the invariants (docs/design.md, "Invariants") on a soak's evidence, once every
// fault is healed and the orders had their time to settle:
//
//   - every order the API acknowledged (201/202/402) is in Postgres, in the
//     state its answer promised, and every order is terminal (1, 2);
//   - paid ⇒ exactly one successful charge for its reference, the one the
//     order names, for its amount; no charge without an order, none twice (3);
//   - one Idempotency-Key ⇒ one order (4);
//   - payment_failed ⇒ no charge at the provider (7);
//   - a replay repeats the first answer byte for byte with
//     Idempotent-Replayed: true — across a Postgres crash, docs/design.md, "After a crash" allows
//     a recomputed answer with the same status and order (see auditReplay);
//     a key reused with another body is a 422;
//   - after every failover an order is acknowledged again: the processes
//     found the new primary by themselves.
//
// A failover to a synchronous standby counts as a crash here: its
// acknowledged orders must all survive it (invariant 1 holds them as
// above), while a settle committed asynchronously may be lost to it.
func Audit(ev Evidence) Report {
	r := Report{Requests: map[string]int{}, Answers: map[int]int{}, Orders: map[string]int{}}
	bySeq := make(map[int]Exchange, len(ev.Exchanges))
	for _, x := range ev.Exchanges {
		bySeq[x.Seq] = x
	}
	acked := map[string]bool{}
	keyOrder := map[string]string{} // key → the order its answers named
	for _, x := range ev.Exchanges {
		r.Requests[x.Kind]++
		r.Answers[x.Status]++
		switch x.Kind {
		case RequestReplay:
			r.auditReplay(x, bySeq[x.Of])
		case RequestMismatch:
			switch {
			case x.Status == http.StatusUnprocessableEntity:
				r.Mismatches422++
			case unanswered(x):
				r.ReplaysUnavailable++
			default:
				r.violate("exchange %d: key %s reused with another body answered %d, want 422: %s", x.Seq, x.Key, x.Status, x.Answer)
			}
			continue
		case RequestRetry:
			r.auditRetry(x, bySeq[x.Of], ev.Orders)
		default:
			r.auditFirst(x, x.Kind == RequestDecline, ev.Orders)
		}
		if !x.Acknowledged() || x.OrderID == "" {
			continue
		}
		acked[x.OrderID] = true
		if prev, ok := keyOrder[x.Key]; ok && prev != x.OrderID {
			r.violate("key %s: answers name orders %s and %s (invariant 4)", x.Key, prev, x.OrderID)
		}
		keyOrder[x.Key] = x.OrderID
		if got := ev.Keys[x.Key]; got != x.OrderID {
			r.violate("key %s: idempotency_keys names order %q, its answer %s (invariant 4)", x.Key, got, x.OrderID)
		}
	}
	r.Acknowledged = len(acked)
	for _, f := range ev.Failovers {
		r.auditFailover(f, ev.Exchanges)
	}
	r.auditOrders(ev)
	r.auditLedger(ev)
	return r
}

// unanswered reports whether x promised nothing about its key: no answer,
// a 503 (the database was unavailable to this request) or a 504 (the
// database failed before saying whether an order is stored: the client
// learns it by retrying with the same key).
func unanswered(x Exchange) bool {
	switch x.Status {
	case 0, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// auditRetry checks a client's retry of a key whose first request got no
// answer or a 503: it may resume the order, replay the answer a request
// that outlived its client stored, still find the key in progress (409), or
// meet the outage again.
func (r *Report) auditRetry(x, first Exchange, orders map[string]Order) {
	if unanswered(x) || x.Status == http.StatusConflict {
		r.RetriesUnanswered++
		return
	}
	if x.Acknowledged() {
		r.RetriesAnswered++
	}
	r.answered(x, first.Kind == RequestDecline, orders)
}

// auditFirst checks the answer to a new key against the order it names.
func (r *Report) auditFirst(x Exchange, decline bool, orders map[string]Order) {
	if x.Replayed {
		r.violate("exchange %d: the first request for key %s was answered as a replay", x.Seq, x.Key)
	}
	if unanswered(x) {
		return // nothing promised: an order it may have left is audited with the rest
	}
	r.answered(x, decline, orders)
}

// answered checks an answer to a request for a key against the order it
// names; decline says whether the body's card always declines.
func (r *Report) answered(x Exchange, decline bool, orders map[string]Order) {
	switch x.Status {
	case http.StatusCreated, http.StatusAccepted, http.StatusPaymentRequired:
	default:
		r.violate("exchange %d (%s, key %s): unexpected status %d: %s", x.Seq, x.Kind, x.Key, x.Status, x.Answer)
		return
	}
	if x.OrderID == "" {
		r.violate("exchange %d: %d answer names no order: %s", x.Seq, x.Status, x.Answer)
		return
	}
	o, ok := orders[x.OrderID]
	if !ok {
		r.violate("order %s acknowledged %d (exchange %d) is not in Postgres (invariant 1)", x.OrderID, x.Status, x.Seq)
		return
	}
	var answered struct {
		Status   string `json:"status"`
		ChargeID string `json:"charge_id"`
	}
	_ = json.Unmarshal(x.Answer, &answered)
	switch x.Status {
	case http.StatusCreated:
		if decline {
			r.violate("order %s: a declining card was answered 201", o.ID)
		}
		if answered.Status != "paid" || o.Status != "paid" || answered.ChargeID != o.ChargeID {
			r.violate("order %s: answered 201 %s with charge %q, stored %s with charge %q", o.ID, answered.Status, answered.ChargeID, o.Status, o.ChargeID)
		}
	case http.StatusAccepted:
		switch answered.Status {
		case "pending_payment":
		case "pending":
			r.Unrecorded++
		default:
			r.violate("order %s: answered 202 with status %q, want pending_payment (or pending, unrecorded)", o.ID, answered.Status)
		}
	case http.StatusPaymentRequired:
		if !decline || o.Status != "payment_failed" || o.FailureReason != "card_declined" {
			r.violate("order %s (%s): answered 402, stored %s (%s)", o.ID, x.Kind, o.Status, o.FailureReason)
		}
	}
}

// auditReplay checks a replay against the first answer for its key.
//
// Across a Postgres crash the settle that stored the first answer may be
// lost (it commits asynchronously, SETTLE_ASYNC_COMMIT): the replay then
// resumes the order — a fresh answer, not marked replayed, with the same
// status and order — or finds the resumed request still running (409).
//
// The first answer may also be one that was never recorded: a 202 with the
// order still pending, given when the database failed after the order was
// stored. Its replay gets the order as it then stands (any acknowledged
// answer naming the same order, replayed or resumed), or a 409 while the
// key's lock holds.
func (r *Report) auditReplay(x, first Exchange) {
	crashed := x.Crashes > first.Crashes
	unrecorded := first.Status == http.StatusAccepted && answerStatus(first.Answer) == "pending"
	switch {
	case unanswered(x), (crashed || unrecorded) && x.Status == http.StatusConflict:
		r.ReplaysUnavailable++
		return
	case unrecorded:
		if x.Acknowledged() && x.OrderID == first.OrderID {
			r.ReplaysOfUnrecorded++
		} else {
			r.violate("replay %d of the unrecorded 202 of exchange %d (key %s): got %d %s, want the order %s as it stands",
				x.Seq, first.Seq, x.Key, x.Status, x.Answer, first.OrderID)
		}
		return
	}
	same := x.Status == first.Status && bytes.Equal(x.Answer, first.Answer) && x.Location == first.Location
	switch {
	case same && x.Replayed:
		r.ReplaysConsistent++
		if crashed {
			r.ReplaysSpanCrash++
		}
	case crashed && x.Status == first.Status && x.OrderID == first.OrderID:
		r.ReplaysRecomputed++
	default:
		r.violate("replay %d of exchange %d (key %s): got %d replayed=%v %s, first answer %d %s",
			x.Seq, first.Seq, x.Key, x.Status, x.Replayed, x.Answer, first.Status, first.Answer)
	}
}

// auditFailover reports what the clients saw of f, and finds a violation if
// no request sent after the promotion was acknowledged.
func (r *Report) auditFailover(f FailoverTimes, exchanges []Exchange) {
	fr := FailoverReport{FailoverTimes: f}
	for _, x := range exchanges {
		if x.Sent >= f.Promoted && x.Acknowledged() && (fr.Recovered == 0 || x.Answered < fr.Recovered) {
			fr.Recovered = x.Answered
		}
	}
	if fr.Recovered == 0 {
		r.violate("no request sent after the failover at +%.1fs was acknowledged: the processes did not follow the promotion", f.Killed.Seconds())
	}
	for _, x := range exchanges {
		if x.Sent < f.Killed || (fr.Recovered != 0 && x.Sent > fr.Recovered) {
			continue
		}
		switch x.Status {
		case http.StatusServiceUnavailable:
			fr.Unavailable++
		case 0:
			fr.Unanswered++
		}
	}
	r.Failovers = append(r.Failovers, fr)
}

// answerStatus is the order status an answer's body names.
func answerStatus(answer []byte) string {
	var a struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(answer, &a)
	return a.Status
}

// auditOrders checks every row against its key and the provider's list.
func (r *Report) auditOrders(ev Evidence) {
	keyed := make(map[string]int, len(ev.Keys))
	for _, key := range slices.Sorted(maps.Keys(ev.Keys)) {
		id := ev.Keys[key]
		keyed[id]++
		// No foreign key holds this (migration 00006): the one statement
		// that writes both rows does.
		if _, ok := ev.Orders[id]; !ok {
			r.violate("key %s names order %q, which is not in Postgres (invariant 4)", key, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ev.Orders)) {
		o := ev.Orders[id]
		if keyed[id] != 1 {
			r.violate("order %s is named by %d Idempotency-Keys, want 1 (invariant 4)", id, keyed[id])
		}
		label := o.Status
		if o.Status == "payment_failed" {
			label += "/" + o.FailureReason
		}
		r.Orders[label]++
		charges, counted := ev.Charges[id], ev.Stats.ChargesByReference[id]
		switch o.Status {
		case "paid":
			if o.PaymentMethod == "pm_card_chargeDeclined" {
				r.violate("order %s is paid with a card that always declines", id)
			}
			if len(charges) != 1 || counted != 1 {
				r.violate("order %s is paid; the provider holds %d charges for it (ledger count %d), want exactly 1 (invariant 3)", id, len(charges), counted)
				continue
			}
			if c := charges[0]; c.ID != o.ChargeID || c.Amount != o.Total || c.Currency != o.Currency {
				r.violate("order %s is paid by %s for %d %s; the provider's charge is %s for %d %s", id, o.ChargeID, o.Total, o.Currency, c.ID, c.Amount, c.Currency)
			}
		case "payment_failed":
			if len(charges) != 0 || counted != 0 {
				r.violate("order %s is payment_failed (%s) while the provider holds %d charges for it (invariant 7)", id, o.FailureReason, max(len(charges), counted))
			}
		default:
			r.violate("order %s is still %s after the drain (invariant 2)", id, o.Status)
		}
	}
}

// auditLedger checks the provider's side: no charge without an order, none
// twice.
func (r *Report) auditLedger(ev Evidence) {
	r.ProviderCharges = ev.Stats.TotalCharges
	for _, ref := range slices.Sorted(maps.Keys(ev.Stats.ChargesByReference)) {
		if _, ok := ev.Orders[ref]; !ok && ev.Stats.ChargesByReference[ref] > 0 {
			r.violate("the provider holds %d charges for reference %s, which is no order", ev.Stats.ChargesByReference[ref], ref)
		}
	}
	if ev.Stats.DuplicateReferences != 0 {
		r.violate("the provider counts %d references charged more than once (invariant 3)", ev.Stats.DuplicateReferences)
	}
	// With every order settled, the provider holds one charge per paid order
	// and no other; an unsettled order's charge is reported with the order.
	settled := r.Orders["paid"]
	for label, n := range r.Orders {
		if strings.HasPrefix(label, "payment_failed") {
			settled += n
		}
	}
	if paid := r.Orders["paid"]; settled == len(ev.Orders) && ev.Stats.TotalCharges != paid {
		r.violate("the provider made %d charges for %d paid orders", ev.Stats.TotalCharges, paid)
	}
}

// Write prints the report.
func (r Report) Write(w io.Writer) {
	fmt.Fprintf(w, "requests: %s\n", counts(r.Requests))
	answers := map[string]int{}
	for status, n := range r.Answers {
		answers[statusLabel(status)] = n
	}
	fmt.Fprintf(w, "answers:  %s\n", counts(answers))
	fmt.Fprintf(w, "orders:   %d acknowledged; stored %s\n", r.Acknowledged, counts(r.Orders))
	fmt.Fprintf(w, "provider: %d successful charges\n", r.ProviderCharges)
	fmt.Fprintf(w, "replays:  %d byte-identical (%d of them across a Postgres crash or failover), %d recomputed across one, %d unanswered (503 or no answer); %d reused keys refused 422\n",
		r.ReplaysConsistent, r.ReplaysSpanCrash, r.ReplaysRecomputed, r.ReplaysUnavailable, r.Mismatches422)
	fmt.Fprintf(w, "unrecorded: %d answers 202 with the order still pending (the database failed after storing it), %d replays of them got the order as it then stood\n",
		r.Unrecorded, r.ReplaysOfUnrecorded)
	fmt.Fprintf(w, "retries:  %d of a key left unanswered got their order's answer, %d found it in progress (409) or got none again\n",
		r.RetriesAnswered, r.RetriesUnanswered)
	for _, f := range r.Failovers {
		fmt.Fprintf(w, "failover: primary killed at +%.1fs, standby promoted %.1fs later; ", f.Killed.Seconds(), (f.Promoted - f.Killed).Seconds())
		if f.Recovered == 0 {
			fmt.Fprintf(w, "no order acknowledged after it; ")
		} else {
			fmt.Fprintf(w, "first order acknowledged %.1fs after the kill; ", (f.Recovered - f.Killed).Seconds())
		}
		fmt.Fprintf(w, "%d requests answered 503 and %d not at all in between\n", f.Unavailable, f.Unanswered)
	}
	if r.OK() {
		fmt.Fprintln(w, "audit:    no violation")
		return
	}
	fmt.Fprintf(w, "audit:    %d VIOLATIONS\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  - %s\n", v)
	}
}

func statusLabel(status int) string {
	if status == 0 {
		return "no-answer"
	}
	return fmt.Sprint(status)
}

func counts(m map[string]int) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
