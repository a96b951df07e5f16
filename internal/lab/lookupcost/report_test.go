package lookupcost

import (
	"strings"
	"testing"
	"time"
)

// TestWriteMarkdown checks the rows whose cells are worked out, not copied: the
// requests per order and per second, the lookups per unknown outcome, the audit's
// lost column, each in its design's column.
func TestWriteMarkdown(t *testing.T) {
	t.Parallel()
	r := Report{Config: DefaultConfig(), Phases: []Phase{
		{Scenario: "healthy", Design: "one-step", Orders: 10, Paid: 10, Charges: 10, Elapsed: 2 * time.Second},
		{Scenario: "healthy", Design: "two-step", Orders: 10, Paid: 10, Charges: 10, Creates: 10, Elapsed: 2500 * time.Millisecond},
		{Scenario: "seed outage", Design: "one-step", Orders: 20, Unknown: 4},
		{Scenario: "seed outage", Design: "two-step", Orders: 20, Unknown: 2},
	}}
	r.Phases[2].Settle.Requests, r.Phases[3].Settle.Requests = 30, 2
	r.Phases[2].Audit = Audit{ChargedOnce: 12, NotCharged: 6, Lost: 1, Missing: 1}
	r.Phases[3].Audit = Audit{ChargedOnce: 15, NotCharged: 4, Doubled: 1}

	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| provider requests per order | 1.00 | 2.00 |",
		"| provider requests/s | 5.0 | 8.0 |",
		"| lookup requests to settle them | 30 list pages (7.5 an order) | 2 retrieves (1.0 an order) |",
		"| audit of the provider's list: charged once / not charged / lost / doubled | 12 / 6 / 2 / 0 | 15 / 4 / 0 / 1 |",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("the table lacks\n%s\ngot\n%s", want, b.String())
		}
	}
}
