package experiment

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MatrixLine is one run of the scenario matrix (docs/design.md, "Experiment"): one provider
// behaviour (the row) under one resilience mode, condensed to the matrix's columns. It is
// what the matrix's JSON file holds, a line per run.
type MatrixLine struct {
	Row  string `json:"row"`
	Mode string `json:"mode"`
	Run  string `json:"run"` // Report.Name: the mode and the rate
	Note string `json:"note,omitempty"`

	// Requests counts the checkout requests sent; Charged of them were answered 201,
	// Deferred 202, and Other is every other outcome by name (402, 503, timeout…).
	Requests int            `json:"requests"`
	Charged  int            `json:"charged"`
	Deferred int            `json:"deferred"`
	Other    map[string]int `json:"other"`
	P50      Millis         `json:"p50_ms"`
	P99      Millis         `json:"p99_ms"`

	// Faulted is false for a row whose provider was healthy throughout: the columns about
	// the fault do not apply to it.
	Faulted bool `json:"faulted"`
	// ChargesIntoFault and LookupsIntoFault are the charges and lookups the provider received
	// while a fault was active (Recovery).
	ChargesIntoFault int `json:"charges_into_fault"`
	LookupsIntoFault int `json:"lookups_into_fault"`
	// MaxInFlight is the most charges the provider held at once over the run and its drain,
	// MaxInFlightFault while a fault was active.
	MaxInFlight      int `json:"provider_max_in_flight"`
	MaxInFlightFault int `json:"provider_max_in_flight_fault"`
	// RateLimited counts the 429s the provider answered (Audit.ProviderRateLimited).
	RateLimited int `json:"rate_limited"`
	// AllPaid is when the run's last acknowledged order was paid, from the end of the
	// (last) fault: 0 when before it, NeverPaid when one never was (Recovery.LastPaid).
	AllPaid Millis `json:"all_paid_ms"`

	Drained       bool `json:"drained"`
	StillPending  int  `json:"still_pending"`
	Lost          int  `json:"lost"`
	DoubleCharged int  `json:"double_charged"`
}

// NewMatrix condenses reports into the matrix's lines, grouped by row in the order the rows
// first appear, each row's modes in the order they came.
func NewMatrix(reports []Report) []MatrixLine {
	lines := make([]MatrixLine, len(reports))
	for i, r := range reports {
		all := r.Checkout.All
		other := maps.Clone(all.Outcomes)
		delete(other, "201")
		delete(other, "202")
		l := MatrixLine{
			Row: r.Row, Mode: r.Label, Run: r.Name(), Note: r.Note,
			Requests: all.Count, Charged: all.Outcomes["201"], Deferred: all.Outcomes["202"], Other: other,
			P50: all.P50, P99: all.P99,
			MaxInFlight: r.Audit.ProviderMaxInFlight, MaxInFlightFault: r.Audit.ProviderMaxInFlightOutage,
			RateLimited: r.Audit.ProviderRateLimited,
			Drained:     r.Audit.Drained, StillPending: r.Audit.StillPending,
			Lost: len(r.Audit.Lost), DoubleCharged: r.Audit.DoubleCharged,
		}
		if rec := r.Recovery; rec != nil {
			l.Faulted = true
			l.ChargesIntoFault, l.LookupsIntoFault, l.AllPaid = rec.ChargesDuringFault, rec.LookupsDuringFault, rec.LastPaid
		}
		lines[i] = l
	}
	first := make(map[string]int)
	for i, l := range lines {
		if _, seen := first[l.Row]; !seen {
			first[l.Row] = i
		}
	}
	slices.SortStableFunc(lines, func(a, b MatrixLine) int { return first[a.Row] - first[b.Row] })
	return lines
}

// Broken reports whether the run broke an invariant: an acknowledged order lost, or an order
// charged twice.
func (l MatrixLine) Broken() bool { return l.Lost > 0 || l.DoubleCharged > 0 }

// share is n as a whole percentage of the requests.
func (l MatrixLine) share(n int) string {
	if l.Requests == 0 {
		return "—"
	}
	return strconv.FormatFloat(100*float64(n)/float64(l.Requests), 'f', 0, 64)
}

// others counts the requests answered neither 201 nor 202.
func (l MatrixLine) others() int {
	n := 0
	for _, c := range l.Other {
		n += c
	}
	return n
}

// WriteMatrix writes the scenario matrix: a table line per run, a row's modes on adjacent
// lines, then each row's note and what went wrong. A run that lost an order or charged one
// twice is flagged in bold in its cell and above the table, where nobody can miss it.
func WriteMatrix(w io.Writer, lines []MatrixLine) error {
	var b strings.Builder
	var broken []string
	for _, l := range lines {
		if l.Broken() {
			broken = append(broken, fmt.Sprintf("%s (%s): %d lost, %d charged twice", l.Row, l.Run, l.Lost, l.DoubleCharged))
		}
	}
	if len(broken) > 0 {
		b.WriteString("**INVARIANT BROKEN** — every run must lose no order and charge none twice: " + strings.Join(broken, "; ") + ".\n\n")
	}
	b.WriteString("| row | run | 201 / 202 / other | checkout p50 / p99 | charges (lookups) into the fault | provider max in flight (fault / run) | 429s | all paid after the fault | lost | charged twice |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for i, l := range lines {
		row := l.Row
		if i > 0 && lines[i-1].Row == l.Row {
			row = "" // the same row, another mode: the lines read side by side
		}
		into, inFlight, paid := "—", strconv.Itoa(l.MaxInFlight), "—"
		if l.Faulted {
			into = fmt.Sprintf("%d (%d)", l.ChargesIntoFault, l.LookupsIntoFault)
			inFlight = fmt.Sprintf("%d / %d", l.MaxInFlightFault, l.MaxInFlight)
			paid = paidCell(l.AllPaid)
		}
		if !l.Drained {
			paid = "not drained"
		}
		fmt.Fprintf(&b, "| %s | %s | %s / %s / %s %% | %s / %s | %s | %s | %d | %s | %s | %s |\n",
			row, l.Run, l.share(l.Charged), l.share(l.Deferred), l.share(l.others()), ms(l.P50), ms(l.P99),
			into, inFlight, l.RateLimited, paid, invariantCell(l.Lost), invariantCell(l.DoubleCharged))
	}
	b.WriteString("\n201 / 202 / other: shares of the run's checkout requests charged at once, deferred to the worker, " +
		"and answered otherwise (listed below). p50 / p99: of every checkout answer, a timeout at the client's " +
		"timeout. Charges (lookups) into the fault: what the provider received while a fault was active. " +
		"429s: requests the provider refused above its rate limit. All paid after the fault: when the last " +
		"acknowledged order of the run was paid, from the end of the (last) fault (0 s: before it ended). Lost: acknowledged orders " +
		"missing from Postgres; charged twice: from the provider's ledger; both must be 0.\n\n")
	for i, l := range lines {
		if l.Note != "" && (i == 0 || lines[i-1].Row != l.Row) {
			fmt.Fprintf(&b, "- **%s**: %s\n", l.Row, l.Note)
		}
		var notes []string
		if n := l.others(); n > 0 {
			notes = append(notes, "other answers "+outcomes(Summary{Count: n, Outcomes: l.Other}))
		}
		if !l.Drained {
			notes = append(notes, fmt.Sprintf("**not drained**: %d orders still pending at the drain's end", l.StillPending))
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, "- %s, %s: %s.\n", cmp.Or(l.Row, "(no row)"), l.Run, strings.Join(notes, "; "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// BrokenRuns returns the lines of runs that broke an invariant.
func BrokenRuns(lines []MatrixLine) []MatrixLine {
	return slices.DeleteFunc(slices.Clone(lines), func(l MatrixLine) bool { return !l.Broken() })
}

// invariantCell is a count that must be 0, in bold when it is not.
func invariantCell(n int) string {
	if n == 0 {
		return "0"
	}
	return "**" + strconv.Itoa(n) + "**"
}
