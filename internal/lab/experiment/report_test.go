package experiment

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// sampleReport is a protected-mode run in miniature: the provider slow from 0.5 s to 3.5 s,
// checkout deferring orders while it is, /health fast throughout.
func sampleReport(t *testing.T) Report {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Label = "protected"
	d := func(ms int) Millis { return Millis(time.Duration(ms) * time.Millisecond) }
	samples := []Sample{
		{Probe: ProbeCheckout, At: d(0), Latency: d(210), Outcome: "201", OrderID: "o1"},
		{Probe: ProbeCheckout, At: d(600), Latency: d(550), Outcome: "202", OrderID: "o2"},
		{Probe: ProbeCheckout, At: d(1500), Latency: d(3), Outcome: "202", OrderID: "o3"},
		{Probe: ProbeCheckout, At: d(2000), Latency: d(3000), Outcome: OutcomeTimeout},
		{Probe: ProbeCheckout, At: d(4000), Latency: d(205), Outcome: "201", OrderID: "o4"},
		{Probe: ProbeHealth, At: d(0), Latency: d(1), Outcome: "200"},
		{Probe: ProbeHealth, At: d(1000), Latency: d(2), Outcome: "200"},
		{Probe: ProbeHealth, At: d(2000), Latency: d(2000), Outcome: OutcomeTimeout},
	}
	breaker := Breaker{Observed: true, Initial: "closed", Transitions: []Transition{
		{At: d(1150), From: "closed", To: "open"},
		{At: d(2260), From: "open", To: "half-open"},
		{At: d(4050), From: "half-open", To: "closed"},
	}}
	// The limit grows to 6 while healthy, halves twice as the provider hangs, recovers.
	limit := Limit{Observed: true, Points: []LimitPoint{
		{At: d(-50), Limit: 4}, {At: d(0), Limit: 4, InFlight: 1}, {At: d(400), Limit: 6, InFlight: 5},
		{At: d(900), Limit: 3, InFlight: 6}, {At: d(1000), Limit: 1, InFlight: 6}, {At: d(4200), Limit: 5, InFlight: 4},
	}}
	audit := Audit{Acknowledged: 4, Accepted: 4, Stored: 5, Paid: 5, ProviderMaxInFlight: 6, ProviderMaxInFlightOutage: 4, Drained: true, Lost: []string{}}
	return newReport(cfg, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), samples, 3*time.Millisecond, breaker, limit, Cache{}, audit)
}

func TestNewReportPhases(t *testing.T) {
	t.Parallel()
	r := sampleReport(t)
	tests := []struct {
		name      string
		got       Summary
		wantCount int
		wantP50   time.Duration
	}{
		{"checkout, all", r.Checkout.All, 5, 210 * time.Millisecond},
		{"checkout, outage", r.Checkout.Outage, 3, 550 * time.Millisecond},
		{"checkout, healthy", r.Checkout.Healthy, 2, 205 * time.Millisecond},
		{"health, outage", r.Health.Outage, 2, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		if tt.got.Count != tt.wantCount || time.Duration(tt.got.P50) != tt.wantP50 {
			t.Errorf("%s: count %d, p50 %v; want %d, %v", tt.name, tt.got.Count, time.Duration(tt.got.P50), tt.wantCount, tt.wantP50)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	t.Parallel()
	r := sampleReport(t)
	undrained := r
	undrained.Label, undrained.Breaker, undrained.Limit = "none", Breaker{}, Limit{}
	ramp := r
	ramp.Scenario.Rate, ramp.Scenario.RateTo, ramp.Scenario.Fault = 10, 80, FaultNone
	undrained.Audit = Audit{Acknowledged: 3, Accepted: 3, Stored: 3, StillPending: 2, Lost: []string{"o9"}, DoubleCharged: 1, DrainWait: Millis(time.Minute)}

	var b strings.Builder
	if err := WriteMarkdown(&b, r, undrained, ramp); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	wantAll(t, "markdown", got,
		"| protected, 20 req/s | 1/2 (1×timeout) | 2.0 ms / 2000 ms | 2×202, 1×timeout | 550 ms / 3000 ms | 2×201 | 4 / 6 | opened at 1.15 s | 1–6 | 4 | 5 | 0 | 0 | 0 |\n",
		"| none, 20 req/s | 1/2 (1×timeout) | 2.0 ms / 2000 ms | 2×202, 1×timeout | 550 ms / 3000 ms | 2×201 | 0 / 0 | none | none | 3 | 0 | 2 | 1 | 1 |\n",
		"| protected, 10→80 req/s |",
		"- **protected, 10→80 req/s**: breaker closed→open at 1.15 s, open→half-open at 2.26 s, half-open→closed at 4.05 s. Provider healthy throughout; load went out at most 3.0 ms late.\n",
		"- **protected, 20 req/s**: breaker closed→open at 1.15 s, open→half-open at 2.26 s, half-open→closed at 4.05 s. Provider +10s latency from 500ms for 3s; load went out at most 3.0 ms late.\n",
		"**Not drained** after 60.00 s: 2 orders still pending",
	)
	if rows := strings.Count(got, "\n|"); rows != 4 {
		t.Errorf("table has %d rows after the header, want 4 (separator and three runs)", rows)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	t.Parallel()
	r := sampleReport(t)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	var want, got strings.Builder
	_ = WriteMarkdown(&want, r)
	_ = WriteMarkdown(&got, back)
	if got.String() != want.String() {
		t.Errorf("markdown after a JSON round trip:\n%s\nwant:\n%s", got.String(), want.String())
	}
}

func TestWriteSVG(t *testing.T) {
	t.Parallel()
	withBreaker := sampleReport(t)
	withoutBreaker := withBreaker
	withoutBreaker.Label, withoutBreaker.Breaker, withoutBreaker.Limit = `none <"&">`, Breaker{}, Limit{}
	ramp := withBreaker
	ramp.Scenario.Rate, ramp.Scenario.RateTo, ramp.Scenario.Fault = 10, 80, FaultNone
	flapping := withBreaker
	flapping.Scenario.Fault, flapping.Scenario.OutageFor = FaultHang, Millis(time.Second)
	flapping.Scenario.Repeat, flapping.Scenario.RepeatEvery = 3, Millis(2*time.Second)
	tests := []struct {
		name       string
		report     Report
		wantBand   int
		wantOutage int
		wantLimit  bool
		wantTitle  string
	}{
		{"protected", withBreaker, 4, 1, true, "protected, 20 req/s — provider +10s latency from 500ms for 3s"},
		{"label needing escapes, no breaker", withoutBreaker, 0, 1, false, `none <"&">, 20 req/s — provider +10s latency from 500ms for 3s`},
		{"ramp, no fault", ramp, 4, 0, true, "protected, 10→80 req/s — provider healthy throughout"},
		{"flapping, a band per window", flapping, 4, 3, true, "protected, 20 req/s — provider hang from 500ms for 1s, 3 times every 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := WriteSVG(&b, tt.report); err != nil {
				t.Fatal(err)
			}
			got := countElements(t, b.Bytes())
			if got.title != tt.wantTitle {
				t.Errorf("title = %q, want %q", got.title, tt.wantTitle)
			}
			if got.inGroup["checkout/circle"] != 5 {
				t.Errorf("%d checkout dots, want 5", got.inGroup["checkout/circle"])
			}
			if got.inGroup["health/rect"] != 3 {
				t.Errorf("%d health squares, want 3", got.inGroup["health/rect"])
			}
			if got.inGroup["breaker/rect"] != tt.wantBand {
				t.Errorf("%d breaker band segments, want %d", got.inGroup["breaker/rect"], tt.wantBand)
			}
			if got.inGroup["outage/rect"] != tt.wantOutage {
				t.Errorf("%d outage windows, want %d", got.inGroup["outage/rect"], tt.wantOutage)
			}
			if lines := got.inGroup["limit/polyline"]; tt.wantLimit != (lines == 2) || !tt.wantLimit && lines != 0 {
				t.Errorf("%d limit lines, want them drawn: %v", lines, tt.wantLimit)
			}
			if tt.wantLimit && !bytes.Contains(b.Bytes(), []byte("payment limit (1–6)")) {
				t.Error("legend does not give the limit's range, 1–6")
			}
		})
	}
}

type svgCounts struct {
	title   string
	inGroup map[string]int // "group id/element name" → count
}

// countElements parses an SVG document strictly, failing the test if it is not well-formed
// XML, and counts the elements inside each top-level group.
func countElements(t *testing.T, doc []byte) svgCounts {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	c := svgCounts{inGroup: make(map[string]int)}
	var group string
	var path []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			path = append(path, tok.Name.Local)
			if tok.Name.Local == "g" {
				for _, a := range tok.Attr {
					if a.Name.Local == "id" {
						group = a.Value
					}
				}
			} else if len(path) == 3 && path[1] == "g" {
				c.inGroup[group+"/"+tok.Name.Local]++
			}
		case xml.EndElement:
			path = path[:len(path)-1]
		case xml.CharData:
			if len(path) == 2 && path[1] == "title" {
				c.title = string(tok)
			}
		}
	}
	if len(path) != 0 || c.title == "" {
		t.Fatalf("SVG ended inside %v or has no title", path)
	}
	return c
}

// catalogReport is a catalog outage in miniature: the catalog down from 5 s to 15 s, checkout
// answering from fresh cache entries, then stale ones, then — past the staleness bound — 503s,
// one of them (a bug a run must show) without Retry-After.
func catalogReport(t *testing.T) Report {
	t.Helper()
	cfg := CatalogOutageConfig()
	cfg.Label = "TTL 2s"
	d := func(ms int) Millis { return Millis(time.Duration(ms) * time.Millisecond) }
	samples := []Sample{
		{Probe: ProbeCheckout, At: d(1000), Latency: d(210), Outcome: "201", OrderID: "o1"},
		{Probe: ProbeCheckout, At: d(5500), Latency: d(205), Outcome: "201", OrderID: "o2"},
		{Probe: ProbeCheckout, At: d(8000), Latency: d(206), Outcome: "201", OrderID: "o3", Stale: true},
		{Probe: ProbeCheckout, At: d(9000), Latency: d(204), Outcome: "202", OrderID: "o4", Stale: true},
		{Probe: ProbeCheckout, At: d(12000), Latency: d(3), Outcome: "503", RetryAfter: "1"},
		{Probe: ProbeCheckout, At: d(13000), Latency: d(2), Outcome: "503"},
		{Probe: ProbeCheckout, At: d(16000), Latency: d(3), Outcome: "503", RetryAfter: "3"},
		{Probe: ProbeCheckout, At: d(17000), Latency: d(207), Outcome: "201", OrderID: "o5", Stale: true},
		{Probe: ProbeHealth, At: d(0), Latency: d(1), Outcome: "200"},
		{Probe: ProbeHealth, At: d(10000), Latency: d(2), Outcome: "200"},
	}
	breaker := Breaker{Observed: true, Initial: "closed", Transitions: []Transition{
		{At: d(6450), From: "closed", To: "open"},
		{At: d(19550), From: "open", To: "closed"},
	}}
	limit := Limit{Observed: true, Points: []LimitPoint{{At: d(0), Limit: 4}, {At: d(6400), Limit: 1, InFlight: 1}}}
	audit := Audit{Acknowledged: 5, Accepted: 5, Stored: 5, Paid: 4, StillPending: 0, Drained: true, Lost: []string{}}
	cache := Cache{Observed: true, Lookups: map[string]int{"hit": 2, "miss": 1, "stale": 3, "unavailable": 3}}
	return newReport(cfg, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), samples, 2*time.Millisecond, breaker, limit, cache, audit)
}

func TestWriteMarkdownCatalog(t *testing.T) {
	t.Parallel()
	cat := catalogReport(t)
	var b strings.Builder
	if err := WriteMarkdown(&b, sampleReport(t), cat); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	wantAll(t, "markdown", got,
		// The payment run keeps its own table.
		"| protected, 20 req/s | 1/2 (1×timeout) |",
		"| run | catalog | checkout outcomes (outage) | checkout outcomes (rest) | marked stale (outage / run) | 5xx (outage / run) | 503 with / without Retry-After (run) |",
		"| TTL 2s, 20 req/s | down from 5s for 10s | 2×201, 2×503, 1×202 | 2×201, 1×503 | 2 / 3 | 2 / 3 | 2 / 1 | 204 ms / 206 ms | 0/1 | 2.0 ms | opened at 6.45 s | 2 hit, 1 miss, 3 stale, 3 unavailable | 5 | 0 |\n",
		"- **TTL 2s, 20 req/s**: breaker closed→open at 6.45 s, open→closed at 19.55 s. Catalog down from 5s for 10s; load went out at most 2.0 ms late.\n",
	)
	if n := strings.Count(got, "| run |"); n != 2 {
		t.Errorf("%d tables, want 2: one for the payment run, one for the catalog run", n)
	}

	// A checkout without a catalog cache says so rather than counting nothing.
	cat.Cache = Cache{}
	b.Reset()
	_ = WriteMarkdown(&b, cat)
	if got := b.String(); !strings.Contains(got, "| opened at 6.45 s | none | 5 | 0 |") || strings.Contains(got, "| protected, 20 req/s |") {
		t.Errorf("catalog-only markdown without a cache:\n%s", got)
	}
}

func TestCatalogReportJSONRoundTrip(t *testing.T) {
	t.Parallel()
	r := catalogReport(t)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Scenario.FaultTarget != TargetCatalog || back.Checkout.All.Stale != 3 || back.Checkout.All.UnavailableBare != 1 || back.Cache.Lookups["stale"] != 3 {
		t.Errorf("after a JSON round trip: target %q, stale %d, bare 503s %d, cache %v",
			back.Scenario.FaultTarget, back.Checkout.All.Stale, back.Checkout.All.UnavailableBare, back.Cache.Lookups)
	}
	var want, got strings.Builder
	_ = WriteMarkdown(&want, r)
	_ = WriteMarkdown(&got, back)
	if got.String() != want.String() {
		t.Errorf("markdown after a JSON round trip:\n%s\nwant:\n%s", got.String(), want.String())
	}
	// A report written before the catalog existed has no fault_target: it is a payment run.
	var old Report
	if err := json.Unmarshal([]byte(`{"label":"protected","scenario":{"rate":20,"fault":"latency"}}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Scenario.target() != TargetPayment {
		t.Errorf("target of a report without fault_target = %q, want payment", old.Scenario.target())
	}
}

func TestWriteSVGCatalog(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteSVG(&b, catalogReport(t)); err != nil {
		t.Fatal(err)
	}
	got := countElements(t, b.Bytes())
	if want := "TTL 2s, 20 req/s — catalog down from 5s for 10s"; got.title != want {
		t.Errorf("title = %q, want %q", got.title, want)
	}
	if got.inGroup["checkout/circle"] != 8 {
		t.Errorf("%d checkout dots, want 8", got.inGroup["checkout/circle"])
	}
	doc := b.String()
	if n := strings.Count(doc, `stroke="`+staleColor+`" stroke-width`); n != 3 {
		t.Errorf("%d dots ringed as stale, want 3", n)
	}
	wantAll(t, "SVG", doc, ">prices stale (3)<", ">catalog down<", ">catalog limit (1–4)<", "Retry-After 3", "prices stale</title>")
	// A payment run has no stale answers, and no legend entry for them.
	var p bytes.Buffer
	if err := WriteSVG(&p, sampleReport(t)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.String(), "prices stale") || !strings.Contains(p.String(), ">provider +10s latency<") {
		t.Error("payment run's SVG: want no stale legend and a provider fault label")
	}
}

// wantAll reports each of wants that got, the text of what (markdown, an SVG…), lacks.
func wantAll(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	missing := false
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q", what, want)
			missing = true
		}
	}
	if missing {
		t.Logf("the %s:\n%s", what, got)
	}
}
