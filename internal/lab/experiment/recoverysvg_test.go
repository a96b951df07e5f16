package experiment

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func recoveryReport() Report {
	return Report{
		Label:    "protected",
		Scenario: Scenario{Rate: 30, Duration: Millis(60 * time.Second), OutageFor: Millis(20 * time.Second), Fault: FaultDown},
		Recovery: &Recovery{
			Backlog: 600, BacklogPaid: Millis(5800 * time.Millisecond), IdealDrain: Millis(4600 * time.Millisecond),
			Capacity: 16, ProviderLatency: Millis(100 * time.Millisecond), Live: 10, LiveCharged: 9,
			ChargesDuringFault: 5, LookupsDuringFault: 1,
			ChargesProcessed: 200, ChargesOverCapacity: 10, LiveAfter: Millis(5 * time.Second),
			Seconds: []Second{{At: 0, Backlog: 30}, {At: Millis(time.Second), Started: 150, InFlight: 17, Backlog: 0}},
		},
	}
}

func TestRecoverySVGIsWellFormedAndDrawsTheCapacity(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteRecoverySVG(&buf, recoveryReport()); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	polylines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 3 {
		t.Errorf("%d polylines, want 3 (backlog, charges begun, in flight)", polylines)
	}
	wantAll(t, "SVG", buf.String(), "capacity 16", "backlog 600", "5.80 s", "ideal 4.60 s")
	if err := WriteRecoverySVG(io.Discard, Report{}); err == nil {
		t.Error("a report without recovery figures was drawn")
	}
}

func TestRecoverySVGShadesEachFaultWindow(t *testing.T) {
	t.Parallel()
	r := recoveryReport()
	r.Scenario.OutageFor, r.Scenario.Repeat, r.Scenario.RepeatEvery = Millis(2*time.Second), 5, Millis(4*time.Second)
	var buf bytes.Buffer
	if err := WriteRecoverySVG(&buf, r); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(buf.String(), `fill="#fdecea"`); got != 15 {
		t.Errorf("%d shaded fault windows, want 15: five windows in each of three panels", got)
	}
}

func TestRunNotesGiveTheRecoveryFigures(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, recoveryReport()); err != nil {
		t.Fatal(err)
	}
	wantAll(t, "notes", buf.String(), "5 charges and 1 lookup sent into it",
		"9 of 10 orders sent from 5.00 s after it answered 201 (90 %)", "Backlog: 600 orders, paid 5.80 s after it (ideal 4.60 s",
		"10 of 200 charges (5.0 %) began above the provider's capacity of 16",
	)
}

// workersReport is recoveryReport with the workers sampled: limit 1 while the fault lasts,
// then 4 and 12, and one second whose readings all failed.
func workersReport() Report {
	r := recoveryReport()
	rec := *r.Recovery
	rec.WorkerPollErrors = 4
	rec.Seconds = []Second{
		{At: Millis(19 * time.Second), Backlog: 600, WorkerReadings: 4, WorkerLimit: 1, WorkerSlots: 1},
		{At: Millis(20 * time.Second), Started: 80, InFlight: 14, Backlog: 500, WorkerReadings: 4, WorkerLimit: 4, WorkerSlots: 4},
		{At: Millis(21 * time.Second), Started: 150, InFlight: 16, Backlog: 200},
		{At: Millis(22 * time.Second), Started: 160, InFlight: 16, Backlog: 0, WorkerReadings: 4, WorkerLimit: 12, WorkerSlots: 9},
	}
	r.Recovery = &rec
	return r
}

func TestTheWorkersAreDrawnAndReportedWhereSampled(t *testing.T) {
	t.Parallel()
	var svg bytes.Buffer
	if err := WriteRecoverySVG(&svg, workersReport()); err != nil {
		t.Fatal(err)
	}
	// The second without a reading breaks each of the workers' lines in two.
	if n := strings.Count(svg.String(), "<polyline"); n != 7 {
		t.Errorf("%d polylines, want 7 (backlog, charges begun, in flight, and the workers' slots and limit in two pieces each)", n)
	}
	wantAll(t, "SVG", svg.String(), "workers&#39; slots taken", "workers&#39; limit")
	svg.Reset()
	if err := WriteRecoverySVG(&svg, recoveryReport()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(svg.String(), "workers&#39;") {
		t.Error("the SVG of a run that did not sample the workers has their legend")
	}

	notes := func(r Report) string {
		t.Helper()
		var b bytes.Buffer
		if err := WriteMarkdown(&b, r); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	// The second of the fault (limit 1) and the unsampled second are left out.
	want := "The workers' payment limit after the fault, the highest each second: 4–12; at most 9 of its slots taken."
	if got := notes(workersReport()); !strings.Contains(got, want) {
		t.Errorf("notes lack %q:\n%s", want, got)
	}
	// A fault that ends within a second: that second is the fault's.
	r := workersReport()
	r.Scenario.OutageFor = Millis(20500 * time.Millisecond)
	if got := notes(r); !strings.Contains(got, "after the fault, the highest each second: 12–12;") {
		t.Errorf("a fault ending at 20.5 s: notes should count the seconds from 21 s on, that is only 22 s:\n%s", got)
	}
	if got := notes(recoveryReport()); strings.Contains(got, "workers'") {
		t.Errorf("notes give the workers' limit of a run that did not sample it:\n%s", got)
	}
	r = workersReport()
	for i := range r.Recovery.Seconds {
		r.Recovery.Seconds[i].WorkerReadings = 0
	}
	if got := notes(r); !strings.Contains(got, "The workers' limits could not be read after the fault (4 readings failed).") {
		t.Errorf("notes do not say the workers could not be read:\n%s", got)
	}
}
