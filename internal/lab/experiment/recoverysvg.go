package experiment

import (
	"errors"
	"fmt"
	"html"
	"io"
	"strings"
)

// WriteRecoverySVG draws a run's Recovery second by second, drain included, in three panels
// over one time axis: the run's unsettled orders (the backlog curve), the charges the
// provider began each second, and the most it had in flight against its capacity — with,
// where the workers were sampled, the slots of their limit taken (calls in flight, and slots
// kept for calls given up on) and the limit beside it: the backlog's share of the provider and
// what the workers allowed themselves; a second without a worker reading is a gap. The fault
// window is shaded in each.
func WriteRecoverySVG(w io.Writer, r Report) error {
	rec := r.Recovery
	if rec == nil || len(rec.Seconds) == 0 {
		return errors.New("the report has no recovery figures")
	}
	const (
		width, left, right = 960.0, 70.0, 900.0
		panelH, gap, top   = 110.0, 40.0, 50.0
	)
	end := float64(len(rec.Seconds))
	x := func(sec float64) float64 { return left + (right-left)*sec/end }
	var b strings.Builder
	height := top + 3*(panelH+gap) + 10
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	title := fmt.Sprintf("%s — recovery: backlog %d, paid %s after the fault (ideal %s)",
		r.Name(), rec.Backlog, paidCell(rec.BacklogPaid), seconds(rec.IdealDrain))
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))

	active := r.Scenario.active()
	type series struct {
		label, color, dash string
		value              func(Second) int
	}
	workerRead := func(s Second) bool { return s.WorkerReadings > 0 }
	panels := []struct {
		label string
		color string
		value func(Second) int
		ref   int      // a dashed reference line (the capacity), 0 for none
		more  []series // further lines on the panel's scale, with a legend
	}{
		{"unsettled orders", "#1e88e5", func(s Second) int { return s.Backlog }, 0, nil},
		{"charges begun per second", "#2e7d32", func(s Second) int { return s.Started }, 0, nil},
		{"provider in flight (most per second)", "#00838f", func(s Second) int { return s.InFlight }, rec.Capacity, nil},
	}
	if rec.workersSampled() {
		panels[2].more = []series{
			{"workers' slots taken", "#ef6c00", "", func(s Second) int { return s.WorkerSlots }},
			{"workers' limit", "#6a1b9a", "3 3", func(s Second) int { return s.WorkerLimit }},
		}
	}
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+gap)
		peak := max(p.ref, 1)
		for _, s := range rec.Seconds {
			peak = max(peak, p.value(s))
			for _, m := range p.more {
				if workerRead(s) {
					peak = max(peak, m.value(s))
				}
			}
		}
		y := func(v int) float64 { return y0 + panelH - panelH*float64(v)/float64(peak) }
		for k := range active.windows() {
			from, to := active.window(k)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fdecea"/>`+"\n",
				x(from.Seconds()), y0, x(min(to.Seconds(), end))-x(from.Seconds()), panelH)
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#000"/>`+"\n", left, y0+panelH, right, y0+panelH)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#000"/>`+"\n", left, y0, left, y0+panelH)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f">%s</text>`+"\n", left+6, y0+12, html.EscapeString(p.label))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%d</text>`+"\n", left-6, y0+10, peak)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">0</text>`+"\n", left-6, y0+panelH)
		if p.ref > 0 {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e53935" stroke-dasharray="6 4"/>`+"\n", left, y(p.ref), right, y(p.ref))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="#e53935">capacity %d</text>`+"\n", right-90, y(p.ref)-4, p.ref)
		}
		// steps draws value as steps, one polyline per run of seconds that have one.
		steps := func(color, dash string, value func(Second) int, has func(Second) bool) {
			var pts strings.Builder
			flush := func() {
				if pts.Len() > 0 {
					dashed := ""
					if dash != "" {
						dashed = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
					}
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n",
						color, dashed, strings.TrimSpace(pts.String()))
					pts.Reset()
				}
			}
			for j, s := range rec.Seconds {
				if !has(s) {
					flush()
					continue
				}
				fmt.Fprintf(&pts, "%.1f,%.1f %.1f,%.1f ", x(float64(j)), y(value(s)), x(float64(j+1)), y(value(s)))
			}
			flush()
		}
		steps(p.color, "", p.value, func(Second) bool { return true })
		for k, m := range p.more {
			steps(m.color, m.dash, m.value, workerRead)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="%s">%s</text>`+"\n", left+300+190*float64(k), y0+12, m.color, html.EscapeString(m.label))
		}
	}
	axisY := top + 3*(panelH+gap) - gap + 16
	step := 5
	if end > 120 {
		step = 20
	}
	for sec := 0; float64(sec) <= end; sec += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d s</text>`+"\n", x(float64(sec)), axisY, sec)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
