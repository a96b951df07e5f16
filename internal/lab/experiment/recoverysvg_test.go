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
	for _, want := range []string{"capacity 16", "backlog 600", "5.80 s", "ideal 4.60 s"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if err := WriteRecoverySVG(io.Discard, Report{}); err == nil {
		t.Error("a report without recovery figures was drawn")
	}
}

func TestRunNotesGiveTheRecoveryFigures(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, recoveryReport()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"9 of 10 orders sent from 5.00 s after it answered 201 (90 %)", "Backlog: 600 orders, paid 5.80 s after it (ideal 4.60 s",
		"10 of 200 charges (5.0 %) began above the provider's capacity of 16"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("notes lack %q:\n%s", want, buf.String())
		}
	}
}

// workersReport is recoveryReport with the workers sampled: limit 1 while the fault lasts,
// then 4 and 12, and one second whose readings all failed.
func workersReport() Report {
	r := recoveryReport()
	rec := *r.Recovery
	rec.WorkerObserved = true
	rec.Seconds = []Second{
		{At: Millis(19 * time.Second), Backlog: 600, WorkerLimit: 1, WorkerInFlight: 1},
		{At: Millis(20 * time.Second), Started: 80, InFlight: 14, Backlog: 500, WorkerLimit: 4, WorkerInFlight: 4},
		{At: Millis(21 * time.Second), Started: 150, InFlight: 16, Backlog: 200},
		{At: Millis(22 * time.Second), Started: 160, InFlight: 16, Backlog: 0, WorkerLimit: 12, WorkerInFlight: 9},
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
	if n := strings.Count(svg.String(), "<polyline"); n != 5 {
		t.Errorf("%d polylines, want 5 (backlog, charges begun, in flight, the workers' in flight and limit)", n)
	}
	for _, want := range []string{"workers&#39; charges in flight", "workers&#39; limit"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}

	var notes bytes.Buffer
	if err := WriteMarkdown(&notes, workersReport()); err != nil {
		t.Fatal(err)
	}
	// The second of the fault (limit 1) and the unsampled second are left out.
	want := "The workers' payment limit after the fault, the highest each second: 4–12; at most 9 of their charges in flight."
	if !strings.Contains(notes.String(), want) {
		t.Errorf("notes lack %q:\n%s", want, notes.String())
	}
	notes.Reset()
	if err := WriteMarkdown(&notes, recoveryReport()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(notes.String(), "workers' payment limit") {
		t.Errorf("notes give the workers' limit of a run that did not sample it:\n%s", notes.String())
	}
}
