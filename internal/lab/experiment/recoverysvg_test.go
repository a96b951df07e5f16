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
