package experiment

import (
	_ "embed"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/template"
	"time"
)

//go:embed timeline.svg.tmpl
var timelineSource string

// The template writes plain SVG; every piece of text in it goes through the html function, whose
// escapes are valid XML too.
var timelineTemplate = template.Must(template.New("timeline").Funcs(template.FuncMap{
	"f": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
}).Parse(timelineSource))

// WriteSVG draws the run as a timeline: each request's latency (log scale) at the time it was
// due, coloured by outcome, ringed when checkout marked its prices stale; /health probes as
// squares; the fault window shaded; the faulted dependency's breaker state as a band above the
// plot; and its concurrency limit, with the calls holding its slots, as lines against a linear
// axis on the right.
func WriteSVG(w io.Writer, r Report) error {
	return timelineTemplate.Execute(w, newTimeline(r))
}

// Geometry of the figure, in SVG user units.
const (
	svgWidth, svgHeight       = 960.0, 440.0
	plotLeft, plotRight       = 70.0, 790.0
	plotTop, plotBottom       = 64.0, 396.0
	bandY, bandHeight         = 34.0, 16.0
	legendX                   = 810.0
	legendTop, legendLineStep = 64.0, 18.0
	latencyFloor              = 100 * time.Microsecond // below this a dot sits on the axis
)

// Colours by outcome: green paid, blue deferred, the rest warmer the worse it is for a client.
var outcomeColors = map[string]string{
	"200": "#ffffff", "201": "#2e7d32", "202": "#1e88e5", "402": "#8e24aa",
	"502": "#6d4c41", "503": "#fb8c00", "504": "#e53935",
	OutcomeTimeout: "#212121", OutcomeError: "#9e9e9e",
}

var breakerColors = map[string]string{"closed": "#a5d6a7", "half-open": "#fff176", "open": "#ef9a9a"}

// Colours of the concurrency limit's lines.
const limitColor, inFlightColor = "#4a148c", "#00838f"

// staleColor rings an answer checked against stale catalog prices.
const staleColor = "#d81b60"

type timeline struct {
	Width, Height, Left, Right, Top, Bottom, PlotHeight, TickEnd float64
	Title                                                        string
	Outages                                                      []span // a window each, the first labelled
	OutageLabelY                                                 float64
	Band                                                         []span
	BandY, BandHeight, BandLabelX, BandTextY                     float64
	BandNote                                                     string
	StaleColor                                                   string
	XTicks, YTicks                                               []tick
	Timeout                                                      tick
	XLabelX, XLabelY, YLabelY                                    float64
	Checkout, Health                                             []point
	LegendX                                                      float64
	Legend                                                       []legendEntry

	// The concurrency limit: polylines ("x,y x,y …") against the right axis, empty when
	// checkout exported no limit.
	LimitLine, InFlightLine     string
	LimitColor, InFlightColor   string
	LimitTicks                  []tick
	LimitTickX, LimitTickLabelX float64
}

type span struct {
	X, W         float64
	Color, Label string
}

type tick struct {
	Pos   float64
	Label string
}

type point struct {
	X, Y         float64
	Color, Label string
	Stale        bool
}

type legendEntry struct {
	Y            float64
	Color, Label string
	Outline      string // the square's stroke colour; empty for none
}

func newTimeline(r Report) timeline {
	sc := r.Scenario
	end := time.Duration(sc.Duration)
	top := time.Duration(max(sc.RequestTimeout, sc.HealthTimeout, sc.OutageLatency))
	x := func(t time.Duration) float64 {
		return plotLeft + (plotRight-plotLeft)*min(max(float64(t)/float64(end), 0), 1)
	}
	lo, hi := math.Log10(float64(latencyFloor)), math.Ceil(math.Log10(float64(top)))
	y := func(d time.Duration) float64 {
		v := math.Log10(float64(max(d, latencyFloor)))
		return plotBottom - (plotBottom-plotTop)*min((v-lo)/(hi-lo), 1)
	}

	tl := timeline{
		Width: svgWidth, Height: svgHeight, Left: plotLeft, Right: plotRight, Top: plotTop, Bottom: plotBottom,
		PlotHeight: plotBottom - plotTop, TickEnd: plotBottom + 5,
		Title: fmt.Sprintf("%s — %s %s", r.Name(), sc.dependency(), faultSpan(sc)),
		BandY: bandY, BandHeight: bandHeight, BandLabelX: plotLeft - 6, BandTextY: bandY + 12,
		StaleColor:   staleColor,
		OutageLabelY: plotTop + 14,
		Timeout:      tick{Pos: y(time.Duration(sc.RequestTimeout)), Label: fmt.Sprintf("checkout client gives up (%v)", time.Duration(sc.RequestTimeout))},
		XLabelX:      (plotLeft + plotRight) / 2, XLabelY: svgHeight - 8, YLabelY: (plotTop + plotBottom) / 2,
		LegendX: legendX,
	}
	if sc.Fault != FaultNone {
		active := sc.active()
		for k := range active.windows() {
			from, to := active.window(k)
			o := span{X: x(from), W: x(min(to, end)) - x(from)}
			if k == 0 {
				o.Label = sc.dependency() + " " + fault(sc)
			}
			tl.Outages = append(tl.Outages, o)
		}
	}
	tl.Band, tl.BandNote = band(r.Breaker, sc.target(), end, x)

	for t := time.Duration(0); t <= end; t += tickStep(end) {
		tl.XTicks = append(tl.XTicks, tick{Pos: x(t), Label: strconv.FormatFloat(t.Seconds(), 'f', -1, 64)})
	}
	for e := lo; e <= hi; e++ {
		d := time.Duration(math.Pow(10, e))
		tl.YTicks = append(tl.YTicks, tick{Pos: y(d), Label: d.String()})
	}

	counts := make(map[string]int)
	stale := 0
	for _, s := range r.Samples {
		label := fmt.Sprintf("%s due %s: %s in %s", s.Probe, seconds(s.At), s.Outcome, ms(s.Latency))
		if s.Stale {
			label += ", prices stale"
			stale++
		}
		if s.RetryAfter != "" {
			label += ", Retry-After " + s.RetryAfter
		}
		p := point{X: x(time.Duration(s.At)), Y: y(time.Duration(s.Latency)), Color: outcomeColor(s.Outcome), Label: label, Stale: s.Stale}
		if s.Probe == ProbeHealth {
			if s.Outcome != "200" {
				p.Color = "#e53935"
			}
			tl.Health = append(tl.Health, p)
			continue
		}
		counts[s.Outcome]++
		tl.Checkout = append(tl.Checkout, p)
	}
	tl.Legend = legend(counts, stale, r.Health.All)
	if r.Limit.Observed {
		tl.limitLines(r.Limit, end, x)
		add := func(color, label string) {
			tl.Legend = append(tl.Legend, legendEntry{Y: legendTop + legendLineStep*float64(len(tl.Legend)), Color: color, Label: label})
		}
		lo, hi := r.Limit.Range()
		add(limitColor, fmt.Sprintf("%s limit (%d–%d)", sc.target(), lo, hi))
		add(inFlightColor, string(sc.target())+" calls in flight")
	}
	return tl
}

// limitLines draws the limit and the calls in flight as step lines over [0, end], against a
// linear axis from 0 at the bottom of the plot to a round number at its top.
func (tl *timeline) limitLines(l Limit, end time.Duration, x func(time.Duration) float64) {
	top := 1
	for _, p := range l.Points {
		top = max(top, p.Limit, p.InFlight)
	}
	step := 1
	for _, s := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		step = s
		if (top+s-1)/s <= 5 {
			break
		}
	}
	top = (top + step - 1) / step * step
	y := func(v int) float64 { return plotBottom - (plotBottom-plotTop)*float64(v)/float64(top) }
	for v := 0; v <= top; v += step {
		tl.LimitTicks = append(tl.LimitTicks, tick{Pos: y(v), Label: strconv.Itoa(v)})
	}
	tl.LimitTickX, tl.LimitTickLabelX = plotRight+4, plotRight+6
	tl.LimitColor, tl.InFlightColor = limitColor, inFlightColor

	var limit, inFlight []byte
	var prev *LimitPoint
	for i := range l.Points {
		p := &l.Points[i]
		at := time.Duration(p.At)
		if at < 0 || at > end {
			continue
		}
		// A step line: hold the previous reading until this one, then jump.
		if prev != nil {
			limit = appendPoint(limit, x(at), y(prev.Limit))
			inFlight = appendPoint(inFlight, x(at), y(prev.InFlight))
		}
		limit = appendPoint(limit, x(at), y(p.Limit))
		inFlight = appendPoint(inFlight, x(at), y(p.InFlight))
		prev = p
	}
	tl.LimitLine, tl.InFlightLine = string(limit), string(inFlight)
}

// appendPoint appends "x,y " to an SVG points list.
func appendPoint(b []byte, x, y float64) []byte {
	b = strconv.AppendFloat(b, x, 'f', 1, 64)
	b = append(b, ',')
	b = strconv.AppendFloat(b, y, 'f', 1, 64)
	return append(b, ' ')
}

// band turns the breaker's transitions into coloured spans over [0, end].
func band(b Breaker, policy Target, end time.Duration, x func(time.Duration) float64) ([]span, string) {
	if !b.Observed {
		return nil, "checkout exports no " + string(policy) + " breaker in this mode"
	}
	var spans []span
	state, from := b.Initial, time.Duration(0)
	add := func(to time.Duration) {
		if to > from {
			spans = append(spans, span{X: x(from), W: x(to) - x(from), Color: breakerColors[state],
				Label: fmt.Sprintf("%s from %s", state, seconds(Millis(from)))})
		}
	}
	for _, t := range b.Transitions {
		at := min(time.Duration(t.At), end)
		add(at)
		state, from = t.To, at
	}
	add(end)
	return spans, ""
}

// tickStep picks a round step giving at most about ten ticks.
func tickStep(end time.Duration) time.Duration {
	for _, step := range []time.Duration{time.Second / 2, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		if end/step <= 12 {
			return step
		}
	}
	return time.Minute
}

func outcomeColor(outcome string) string {
	if c, ok := outcomeColors[outcome]; ok {
		return c
	}
	return "#bdbdbd"
}

// legend lists the checkout outcomes, the answers marked stale (only when there are any: a
// payment run has none), the /health probes and the breaker states.
func legend(counts map[string]int, stale int, health Summary) []legendEntry {
	var entries []legendEntry
	add := func(color, label, outline string) {
		entries = append(entries, legendEntry{Y: legendTop + legendLineStep*float64(len(entries)), Color: color, Label: label, Outline: outline})
	}
	for _, o := range sortedOutcomes(counts) {
		add(outcomeColor(o), fmt.Sprintf("checkout %s (%d)", o, counts[o]), "")
	}
	if stale > 0 {
		add("#ffffff", fmt.Sprintf("prices stale (%d)", stale), staleColor)
	}
	failed := health.Count - health.Outcomes["200"]
	add("#ffffff", fmt.Sprintf("/health 200 (%d)", health.Outcomes["200"]), "#212121")
	add("#e53935", fmt.Sprintf("/health failed (%d)", failed), "#212121")
	for _, st := range breakerStates {
		add(breakerColors[st], "breaker "+st, "")
	}
	return entries
}
