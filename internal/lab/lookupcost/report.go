package lookupcost

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/resilientcheckout/checkout/internal/lab/experiment"
)

// Phase is one design in one scenario.
type Phase struct {
	Scenario, Design string
	Orders           int
	// Paid, NotCharged and Unknown are the outcomes the load left, before any settling.
	Paid, NotCharged, Unknown int
	// Charges, Creates and Lookups count the provider requests written during the load
	// (kind): money-moving, unconfirmed creates, reads.
	Charges, Creates, Lookups int
	// Throttled counts the 429s answered during the load.
	Throttled int
	// Elapsed runs from the first order's arrival to the last order's end.
	Elapsed time.Duration
	// P50 and P99 are the paid orders' latency, from arrival to the answer that paid them:
	// every request and wait of the charge path, the two-step's database write included.
	P50, P99 time.Duration
	// MaxLag is how late the open loop started an order; large, it would have measured the
	// load generator.
	MaxLag time.Duration
	// IntoHang counts the requests written while the provider hung (the seed outage).
	IntoHang struct{ Charges, Creates, Lookups int }
	// Settle is what settling the unknown outcomes cost (the seed outage).
	Settle struct {
		Requests     int // lookup requests: pages of the list, retrieves
		Failed       int // lookups that got no answer and were asked again
		FoundCharged int
		Took         time.Duration
	}
	Audit Audit
}

func newPhase(t *tally, orders []*trackedOrder, hang *window) Phase {
	p := Phase{Orders: len(orders), Throttled: t.throttled}
	var latencies []time.Duration
	last := orders[0].due
	for _, o := range orders {
		switch o.outcome {
		case paid:
			p.Paid++
			latencies = append(latencies, o.done.Sub(o.due))
		case notCharged:
			p.NotCharged++
		default:
			p.Unknown++
		}
		if o.done.After(last) {
			last = o.done
		}
	}
	p.Elapsed = last.Sub(orders[0].due)
	p.P50, p.P99 = experiment.Percentile(latencies, 50), experiment.Percentile(latencies, 99)
	p.Charges, p.Creates, p.Lookups = t.count(kindCharge, window{}), t.count(kindCreate, window{}), t.count(kindLookup, window{})
	if hang != nil {
		p.IntoHang.Charges, p.IntoHang.Creates, p.IntoHang.Lookups = t.count(kindCharge, *hang), t.count(kindCreate, *hang), t.count(kindLookup, *hang)
	}
	return p
}

// Report is a whole run.
type Report struct {
	Config Config
	Phases []Phase
	Took   time.Duration
}

func (r *Report) phase(scenario, design string) Phase {
	for _, p := range r.Phases {
		if p.Scenario == scenario && p.Design == design {
			return p
		}
	}
	return Phase{}
}

// WriteMarkdown writes the table docs/measurements.md shows: a row per figure, a column per
// design.
func (r *Report) WriteMarkdown(w io.Writer) error {
	c := r.Config
	designs := []string{"one-step", "two-step"}
	var b strings.Builder
	fmt.Fprintf(&b, "| %d orders/s, open loop; each provider request timed out at %s | one-step: create and confirm; lookup: the list by window | two-step: create, store the id, confirm; lookup: retrieve by id |\n|---|---|---|\n",
		c.Rate, c.Timeout)
	row := func(label string, cell func(Phase) string, scenario string) {
		fmt.Fprintf(&b, "| %s |", label)
		for _, d := range designs {
			fmt.Fprintf(&b, " %s |", cell(r.phase(scenario, d)))
		}
		b.WriteString("\n")
	}
	section := func(title string) { fmt.Fprintf(&b, "| **%s** | | |\n", title) }
	perSecond := func(n int, d time.Duration) string { return fmt.Sprintf("%.1f", float64(n)/d.Seconds()) }
	requests := func(p Phase) int { return p.Charges + p.Creates + p.Lookups }

	section(fmt.Sprintf("healthy: paymentsim at its defaults, %s of load", c.Duration))
	row("orders paid", func(p Phase) string { return fmt.Sprintf("%d of %d", p.Paid, p.Orders) }, "healthy")
	row("provider requests per order", func(p Phase) string { return fmt.Sprintf("%.2f", float64(requests(p))/float64(p.Orders)) }, "healthy")
	row("provider requests/s", func(p Phase) string { return perSecond(requests(p), p.Elapsed) }, "healthy")
	row("charge latency p50 / p99", func(p Phase) string { return ms(p.P50) + " / " + ms(p.P99) }, "healthy")

	section(fmt.Sprintf("rate limit %d requests/s (429 + Retry-After, waited out), %s of load", c.RateLimit, c.Duration))
	row("orders paid", func(p Phase) string { return fmt.Sprintf("%d of %d", p.Paid, p.Orders) }, "rate limited")
	row("orders/s completed (paid ÷ first arrival to last payment)", func(p Phase) string { return perSecond(p.Paid, p.Elapsed) }, "rate limited")
	row("429 answers", func(p Phase) string { return fmt.Sprint(p.Throttled) }, "rate limited")
	row("charge latency p50 / p99", func(p Phase) string { return ms(p.P50) + " / " + ms(p.P99) }, "rate limited")

	section(fmt.Sprintf("seed outage: every call hung for %s from %s into %s of load", c.HangFor, c.HangAt, c.OutageLoad))
	row("charges (money-moving requests) sent into the hang", func(p Phase) string { return fmt.Sprint(p.IntoHang.Charges) }, "seed outage")
	row("unconfirmed creates sent into the hang", func(p Phase) string { return fmt.Sprint(p.IntoHang.Creates) }, "seed outage")
	row("orders certainly not charged (the create failed)", func(p Phase) string { return fmt.Sprint(p.NotCharged) }, "seed outage")
	row("orders left with an unknown outcome", func(p Phase) string { return fmt.Sprintf("%d of %d", p.Unknown, p.Orders) }, "seed outage")
	row("lookup requests to settle them", func(p Phase) string {
		what := map[string]string{"one-step": "list pages", "two-step": "retrieves"}[p.Design]
		return fmt.Sprintf("%d %s (%.1f an order)", p.Settle.Requests, what, float64(p.Settle.Requests)/float64(max(p.Unknown, 1)))
	}, "seed outage")
	row(fmt.Sprintf("settling took (%d lookups at once)", c.Settlers), func(p Phase) string { return p.Settle.Took.Round(10 * time.Millisecond).String() }, "seed outage")
	row("of them found charged", func(p Phase) string { return fmt.Sprint(p.Settle.FoundCharged) }, "seed outage")
	row("audit of the provider's list: charged once / not charged / lost / doubled", func(p Phase) string {
		a := p.Audit
		return fmt.Sprintf("%d / %d / %d / %d", a.ChargedOnce, a.NotCharged, a.Lost+a.Missing, a.Doubled)
	}, "seed outage")

	lag := time.Duration(0)
	for _, p := range r.Phases {
		lag = max(lag, p.MaxLag)
	}
	fmt.Fprintf(&b, "\nThe open loop started orders at most %s late. The run took %s.\n", ms(lag), r.Took)
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}
