package chaos

import (
	"strings"
	"testing"
	"time"
)

// evidence is a small soak that went right: a paid order (answered 201,
// replayed byte for byte), a declined one (402), a deferred one (202, paid
// later by the worker), a key reused with another body (422), and a request
// answered 503 whose client retried: once answered 202 (the resumed order),
// once 409.
func evidence() Evidence {
	paid := `{"id":"o1","status":"paid","charge_id":"ch_1"}`
	return Evidence{
		Exchanges: []Exchange{
			{Seq: 0, Kind: RequestNew, Key: "k0", Status: 201, Answer: []byte(paid), Location: "/orders/o1", OrderID: "o1"},
			{Seq: 1, Kind: RequestDecline, Key: "k1", Status: 402, Answer: []byte(`{"status":402,"order_id":"o2"}`), OrderID: "o2"},
			{Seq: 2, Kind: RequestNew, Key: "k2", Status: 202, Answer: []byte(`{"id":"o3","status":"pending_payment"}`), Location: "/orders/o3", OrderID: "o3"},
			{Seq: 3, Kind: RequestReplay, Of: 0, Key: "k0", Status: 201, Answer: []byte(paid), Location: "/orders/o1", OrderID: "o1", Replayed: true},
			{Seq: 4, Kind: RequestMismatch, Of: 0, Key: "k0", Status: 422},
			{Seq: 5, Kind: RequestNew, Key: "k5", Status: 503}, // nothing promised
			{Seq: 6, Kind: RequestRetry, Of: 5, Key: "k5", Status: 202, Answer: []byte(`{"id":"o4","status":"pending_payment"}`), Location: "/orders/o4", OrderID: "o4"},
			{Seq: 7, Kind: RequestRetry, Of: 5, Key: "k5", Status: 409},
		},
		Orders: map[string]Order{
			"o1": {ID: "o1", Status: "paid", PaymentMethod: "pm_card_visa", Total: 100, Currency: "USD", ChargeID: "ch_1"},
			"o2": {ID: "o2", Status: "payment_failed", PaymentMethod: "pm_card_chargeDeclined", Total: 200, Currency: "USD", FailureReason: "card_declined"},
			"o3": {ID: "o3", Status: "paid", PaymentMethod: "pm_card_visa", Total: 300, Currency: "EUR", ChargeID: "ch_3"},
			"o4": {ID: "o4", Status: "paid", PaymentMethod: "pm_card_visa", Total: 400, Currency: "GBP", ChargeID: "ch_4"},
		},
		Keys:  map[string]string{"k0": "o1", "k1": "o2", "k2": "o3", "k5": "o4"},
		Stats: Stats{TotalCharges: 3, ChargesByReference: map[string]int{"o1": 1, "o3": 1, "o4": 1}},
		Charges: map[string][]Charge{
			"o1": {{ID: "ch_1", Amount: 100, Currency: "USD", Reference: "o1"}},
			"o3": {{ID: "ch_3", Amount: 300, Currency: "EUR", Reference: "o3"}},
			"o4": {{ID: "ch_4", Amount: 400, Currency: "GBP", Reference: "o4"}},
		},
	}
}

func TestAuditPassesACleanSoak(t *testing.T) {
	t.Parallel()
	r := Audit(evidence())
	if !r.OK() {
		t.Fatalf("violations in a clean soak: %v", r.Violations)
	}
	if r.Acknowledged != 4 || r.ReplaysConsistent != 1 || r.Mismatches422 != 1 || r.RetriesAnswered != 1 || r.RetriesUnanswered != 1 {
		t.Errorf("acknowledged %d, consistent replays %d, 422s %d, retries answered %d and not %d; want 4, 1, 1, 1, 1",
			r.Acknowledged, r.ReplaysConsistent, r.Mismatches422, r.RetriesAnswered, r.RetriesUnanswered)
	}
	// A retry may get the answer a request that outlived its client stored.
	ev := evidence()
	ev.Exchanges[6].Replayed = true
	if r := Audit(ev); !r.OK() {
		t.Errorf("a retry answered as a replay: violations %q, want none", r.Violations)
	}
}

// TestAuditTakesA504AsNoAnswer: a 504 outcome-unknown (the database failed
// before saying whether an order is stored) promises nothing, as a 503 or
// no answer: not for a new key, a replay, a retry or a key reused with
// another body.
func TestAuditTakesA504AsNoAnswer(t *testing.T) {
	t.Parallel()
	for _, seq := range []int{3, 4, 5, 6} {
		ev := evidence()
		ev.Exchanges[seq].Status, ev.Exchanges[seq].Answer = 504, []byte(`{"type":"urn:problem-type:checkout:outcome-unknown","status":504}`)
		if r := Audit(ev); !r.OK() {
			t.Errorf("exchange %d answered 504: violations %q, want none", seq, r.Violations)
		}
	}
}

// TestAuditFindsEachViolation breaks one fact of the clean soak at a time;
// the audit must name it.
func TestAuditFindsEachViolation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		break_ func(*Evidence)
		want   string
	}{
		{"acknowledged order lost", func(ev *Evidence) { delete(ev.Orders, "o3") }, "o3 acknowledged 202 (exchange 2) is not in Postgres"},
		{"order left unsettled", func(ev *Evidence) {
			setOrder(ev, "o3", func(o *Order) { o.Status, o.ChargeID = "pending_payment", "" })
		}, "o3 is still pending_payment"},
		{"paid without a charge", func(ev *Evidence) {
			delete(ev.Charges, "o3")
			delete(ev.Stats.ChargesByReference, "o3")
			ev.Stats.TotalCharges = 2
		}, "o3 is paid; the provider holds 0 charges"},
		{"charged twice", func(ev *Evidence) {
			ev.Charges["o3"] = append(ev.Charges["o3"], Charge{ID: "ch_3b", Amount: 300, Currency: "EUR"})
			ev.Stats.ChargesByReference["o3"], ev.Stats.DuplicateReferences, ev.Stats.TotalCharges = 2, 1, 4
		}, "o3 is paid; the provider holds 2 charges"},
		{"duplicate count", func(ev *Evidence) { ev.Stats.DuplicateReferences = 1 }, "1 references charged more than once"},
		{"paid by another charge", func(ev *Evidence) { setOrder(ev, "o3", func(o *Order) { o.ChargeID = "ch_other" }) }, "o3 is paid by ch_other"},
		{"charge for another amount", func(ev *Evidence) { ev.Charges["o3"][0].Amount = 301 }, "the provider's charge is ch_3 for 301 EUR"},
		{"failed while charged", func(ev *Evidence) {
			setOrder(ev, "o3", func(o *Order) { o.Status, o.ChargeID, o.FailureReason = "payment_failed", "", "provider_unavailable" })
		}, "o3 is payment_failed (provider_unavailable) while the provider holds 1 charges"},
		{"declined card paid", func(ev *Evidence) {
			setOrder(ev, "o2", func(o *Order) { o.Status, o.ChargeID, o.FailureReason = "paid", "ch_2", "" })
			ev.Charges["o2"] = []Charge{{ID: "ch_2", Amount: 200, Currency: "USD"}}
			ev.Stats.ChargesByReference["o2"], ev.Stats.TotalCharges = 1, 4
		}, "o2 is paid with a card that always declines"},
		{"key naming no order", func(ev *Evidence) { ev.Keys["k9"] = "o9" }, "key k9 names order \"o9\", which is not in Postgres"},
		{"charge without an order", func(ev *Evidence) { ev.Stats.ChargesByReference["ghost"] = 1; ev.Stats.TotalCharges = 4 }, "reference ghost, which is no order"},
		{"ledger counts more charges than paid orders", func(ev *Evidence) { ev.Stats.TotalCharges = 4 }, "4 charges for 3 paid orders"},
		{"201 answer not what is stored", func(ev *Evidence) {
			ev.Exchanges[0].Answer = []byte(`{"id":"o1","status":"paid","charge_id":"ch_x"}`)
			ev.Exchanges[3].Answer = ev.Exchanges[0].Answer
		}, "answered 201 paid with charge \"ch_x\""},
		{"402 for a card that pays", func(ev *Evidence) { ev.Exchanges[1].Kind = RequestNew }, "o2 (new): answered 402"},
		{"first answer marked replayed", func(ev *Evidence) { ev.Exchanges[2].Replayed = true }, "the first request for key k2 was answered as a replay"},
		{"unexpected status", func(ev *Evidence) { ev.Exchanges[5].Status = 500 }, "unexpected status 500"},
		{"replay with other bytes", func(ev *Evidence) { ev.Exchanges[3].Answer = []byte(`{"id":"o1","status":"paid","charge_id":"ch_1" }`) }, "replay 3 of exchange 0"},
		{"replay with another status", func(ev *Evidence) { ev.Exchanges[3].Status = 202 }, "replay 3 of exchange 0 (key k0): got 202"},
		{"replay not marked", func(ev *Evidence) { ev.Exchanges[3].Replayed = false }, "replay 3 of exchange 0 (key k0): got 201 replayed=false"},
		{"replay still in progress", func(ev *Evidence) { ev.Exchanges[3].Status = 409 }, "got 409"},
		{"recomputed replay without a crash", func(ev *Evidence) { ev.Exchanges[3].Answer = []byte(`{"id":"o1"}`) }, "replay 3 of exchange 0"},
		{"recomputed replay across a crash naming another order", func(ev *Evidence) {
			ev.Exchanges[3].Crashes, ev.Exchanges[3].Answer, ev.Exchanges[3].OrderID = 1, []byte(`{"id":"o9"}`), "o9"
		}, "replay 3 of exchange 0"},
		{"key reused with another body accepted", func(ev *Evidence) { ev.Exchanges[4].Status = 201 }, "reused with another body answered 201, want 422"},
		{"one key, two orders", func(ev *Evidence) { ev.Keys["k2"] = "o1" }, "key k2: idempotency_keys names order \"o1\""},
		{"retry answered 402 for a card that pays", func(ev *Evidence) { ev.Exchanges[6].Status = 402 }, "o4 (retry): answered 402"},
		{"retry answered 201 for another order", func(ev *Evidence) {
			ev.Exchanges[6].Status, ev.Exchanges[6].OrderID = 201, "o3"
			ev.Exchanges[6].Answer = []byte(`{"id":"o3","status":"paid","charge_id":"ch_3"}`)
		}, "key k5: idempotency_keys names order \"o4\", its answer o3"},
		{"retry answered 500", func(ev *Evidence) { ev.Exchanges[7].Status = 500 }, "exchange 7 (retry, key k5): unexpected status 500"},
		{"order without its key", func(ev *Evidence) { delete(ev.Keys, "k2") }, "order o3 is named by 0 Idempotency-Keys"},
		{"replay names another order", func(ev *Evidence) {
			ev.Exchanges[3].Crashes, ev.Exchanges[3].OrderID = 1, "o3"
			ev.Exchanges[3].Answer = []byte(`{"id":"o3","status":"paid","charge_id":"ch_3"}`)
		}, "key k0: answers name orders o1 and o3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := evidence()
			tt.break_(&ev)
			r := Audit(ev)
			for _, v := range r.Violations {
				if strings.Contains(v, tt.want) {
					return
				}
			}
			t.Errorf("violations %q, want one containing %q", r.Violations, tt.want)
		})
	}
}

// TestAuditAllowsARecomputedReplayAcrossACrash: docs/design.md, "After a crash" lets a replay
// after a Postgres crash be recomputed, with the same status and order.
func TestAuditAllowsARecomputedReplayAcrossACrash(t *testing.T) {
	t.Parallel()
	ev := evidence()
	ev.Exchanges[3].Crashes = 1
	ev.Exchanges[3].Answer = []byte(`{"id":"o1","status":"paid","charge_id":"ch_1","updated_at":"later"}`)
	ev.Exchanges[3].Replayed = false // a resumed request's fresh answer
	r := Audit(ev)
	if !r.OK() || r.ReplaysRecomputed != 1 {
		t.Errorf("violations %q, recomputed %d; want none and 1", r.Violations, r.ReplaysRecomputed)
	}
}

func TestAuditCountsByteIdenticalReplaysAcrossACrash(t *testing.T) {
	t.Parallel()
	ev := evidence()
	ev.Exchanges[3].Crashes = 1
	if r := Audit(ev); !r.OK() || r.ReplaysConsistent != 1 || r.ReplaysSpanCrash != 1 || r.ReplaysRecomputed != 0 {
		t.Errorf("violations %q, consistent %d, across a crash %d, recomputed %d; want none, 1, 1, 0",
			r.Violations, r.ReplaysConsistent, r.ReplaysSpanCrash, r.ReplaysRecomputed)
	}
}

func setOrder(ev *Evidence, id string, change func(*Order)) {
	o := ev.Orders[id]
	change(&o)
	ev.Orders[id] = o
}

// TestAuditReportsAFailover: the 503s and unanswered requests sent from the
// kill until the first acknowledged answer to a request sent after the
// promotion are counted; a failover after which nothing is acknowledged is
// a violation.
func TestAuditReportsAFailover(t *testing.T) {
	t.Parallel()
	ev := evidence()
	s := time.Second
	// k0 at 0 s, killed at 1 s; 503 (k5) and no answer sent in between,
	// promoted at 2 s; the 202 (k2) sent at 2.5 s, answered at 3 s.
	for i, x := range []struct{ sent, answered time.Duration }{{0, s / 10}, {4 * s, 4 * s}, {2*s + s/2, 3 * s}, {5 * s, 5 * s}, {5 * s, 5 * s}, {s + s/2, 2 * s}, {6 * s, 6 * s}, {6 * s, 6 * s}} {
		ev.Exchanges[i].Sent, ev.Exchanges[i].Answered = x.sent, x.answered
	}
	ev.Exchanges = append(ev.Exchanges, Exchange{Seq: 8, Kind: RequestNew, Key: "k8", Sent: 1200 * time.Millisecond, Answered: 8 * s})
	ev.Failovers = []FailoverTimes{{Killed: s, Promoted: 2 * s}}
	r := Audit(ev)
	if !r.OK() {
		t.Fatalf("violations: %v", r.Violations)
	}
	want := FailoverReport{FailoverTimes: ev.Failovers[0], Recovered: 3 * s, Unavailable: 1, Unanswered: 1}
	if len(r.Failovers) != 1 || r.Failovers[0] != want {
		t.Errorf("failovers %+v, want %+v", r.Failovers, want)
	}
	var out strings.Builder
	r.Write(&out)
	if !strings.Contains(out.String(), "failover: primary killed at +1.0s, standby promoted 1.0s later; first order acknowledged 2.0s after the kill; 1 requests answered 503 and 1 not at all in between") {
		t.Errorf("report lacks the failover:\n%s", out.String())
	}

	ev.Failovers = []FailoverTimes{{Killed: 7 * s, Promoted: 8 * s}}
	if r := Audit(ev); r.OK() || !strings.Contains(r.Violations[0], "did not follow the promotion") {
		t.Errorf("nothing acknowledged after a failover: violations %q, want one", r.Violations)
	}
}

// TestAuditAcceptsAnUnrecordedAnswer: a 202 with the order still pending is
// the answer given when the database failed after the order was stored; it
// is not recorded, so its replay gets the order as it then stands.
func TestAuditAcceptsAnUnrecordedAnswer(t *testing.T) {
	t.Parallel()
	ev := evidence()
	ev.Exchanges[2].Answer = []byte(`{"id":"o3","status":"pending"}`)
	ev.Exchanges = append(ev.Exchanges,
		Exchange{Seq: 8, Kind: RequestReplay, Of: 2, Key: "k2", Status: 201, Answer: []byte(`{"id":"o3","status":"paid","charge_id":"ch_3"}`), OrderID: "o3"},
		Exchange{Seq: 9, Kind: RequestReplay, Of: 2, Key: "k2", Status: 202, Answer: []byte(`{"id":"o3","status":"pending_payment"}`), OrderID: "o3", Replayed: true},
		Exchange{Seq: 10, Kind: RequestReplay, Of: 2, Key: "k2", Status: 409})
	r := Audit(ev)
	if !r.OK() {
		t.Fatalf("violations: %v", r.Violations)
	}
	if r.Unrecorded != 1 || r.ReplaysOfUnrecorded != 2 || r.ReplaysUnavailable != 1 {
		t.Errorf("unrecorded %d, replays of it %d, unavailable %d; want 1, 2, 1", r.Unrecorded, r.ReplaysOfUnrecorded, r.ReplaysUnavailable)
	}
	ev.Exchanges = append(ev.Exchanges, Exchange{Seq: 11, Kind: RequestReplay, Of: 2, Key: "k2", Status: 201, Answer: []byte(`{"id":"o1","status":"paid"}`), OrderID: "o1"})
	if r := Audit(ev); r.OK() {
		t.Error("a replay of an unrecorded answer naming another order passed")
	}
	ev = evidence()
	ev.Exchanges[2].Answer = []byte(`{"id":"o3","status":"paid"}`)
	if r := Audit(ev); r.OK() {
		t.Error("a 202 naming a paid order passed")
	}
}
