package dashboard

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Geometry of the inline SVG pictures, in viewBox units; the page's
// stylesheet sizes them.
const (
	timelineWidth  = 1000
	timelineHeight = 20
	sparkWidth     = 200
	sparkHeight    = 30
)

// timelineView is a band picture of states over the window, with a text
// summary so that colour is never the only signal.
type timelineView struct {
	Bands []bandView
	// Summary reads as "Down now for 42s · 1 outage in 1h, 42s in all".
	Summary string
}

// bandView is one band: X and W in viewBox units, Y and H by state, so
// that states differ in shape as well as colour.
type bandView struct {
	X, W, Y, H string
	State      string
	// Class is "band band-up" and so on; Hatch is true for bands drawn with
	// the hatch pattern (flapping).
	Class string
	Hatch bool
	// Title is the band's tooltip: state, times, duration, reason.
	Title string
}

// sparkView is a latency sparkline.
type sparkView struct {
	// Points are the polyline's "x,y" pairs in viewBox units.
	Points string
	// Dots are the samples drawn as marks when there are few.
	N       int
	Last    string
	Max     string
	Summary string
}

// MaxLogRows bounds the rows the page shows of the failover log and of
// the published-address log, newest first; /api/v1/history has them all.
const MaxLogRows = 50

// failoverView is one row of the failover log.
type failoverView struct {
	Service string
	Failover
	Duration string
}

// publishedView is one row of the published-address log.
type publishedView struct {
	Service string
	PublishedSet
	Until time.Time
}

// formerView is a target no longer in the State, with its past.
type formerView struct {
	TargetHistory
	Timeline timelineView
}

// bandShape gives each state its own height, so that bands differ in shape
// as well as colour.
func bandShape(state string) (y, h float64, class string) {
	switch state {
	case StateUp:
		return 8, 12, "band band-up"
	case StateDown:
		return 0, 20, "band band-down"
	case StateFlapping:
		return 0, 20, "band band-flapping"
	case StateDegraded:
		return 4, 16, "band band-degraded"
	}
	return 14, 6, "band band-unknown"
}

// newTimeline draws changes (oldest first; the first may be older than
// from) between from and end on an axis from from to now, and summarises
// them at now over the window. from is the start of the window, or later
// when the history is younger: the page's axis.
func newTimeline(changes []StateChange, from, end, now time.Time, window time.Duration) timelineView {
	var tv timelineView
	span := end.Sub(from)
	full := now.Sub(from)
	if full <= 0 || span <= 0 || len(changes) == 0 {
		tv.Summary = "no history yet"
		return tv
	}
	x := func(t time.Time) float64 {
		return math.Round(float64(t.Sub(from))/float64(full)*timelineWidth*10) / 10
	}
	var outages int
	var downFor time.Duration
	for i, c := range changes {
		start, stop := c.Time, end
		if i+1 < len(changes) {
			stop = changes[i+1].Time
		}
		if start.Before(from) {
			start = from
		}
		if stop.After(end) {
			stop = end
		}
		if !stop.After(start) {
			continue
		}
		bad := c.To == StateDown || c.To == StateFlapping
		if bad {
			downFor += stop.Sub(start)
			if i == 0 || changes[i-1].To != StateDown && changes[i-1].To != StateFlapping {
				outages++
			}
		}
		y, h, class := bandShape(c.To)
		x0, x1 := x(start), x(stop)
		if x1-x0 < 1 {
			// A short band is still visible.
			x1 = min(x0+1, timelineWidth)
			x0 = x1 - 1
		}
		title := c.To + " " + timestamp(start) + " – " + timestamp(stop) + " (" + age(stop.Sub(start)) + ")"
		if stop.Equal(end) && end.Equal(now) {
			title = c.To + " since " + timestamp(start) + " (" + age(stop.Sub(start)) + ", now)"
		}
		if c.Outcome != "" {
			title += " " + c.Outcome
		}
		if c.Reason != "" {
			title += ": " + c.Reason
		}
		tv.Bands = append(tv.Bands, bandView{X: num(x0), W: num(x1 - x0), Y: num(y), H: num(h), State: c.To,
			Class: class, Hatch: c.To == StateFlapping, Title: title})
	}
	last := changes[len(changes)-1]
	// Within the window when the history reaches back that far, else
	// since the first state seen.
	within := "in the last " + spanText(window)
	if changes[0].Time.After(now.Add(-window)) {
		within = "since " + timestamp(changes[0].Time)
	}
	var parts []string
	if end.Equal(now) {
		parts = append(parts, last.To+" now for "+age(now.Sub(last.Time)))
	} else {
		parts = append(parts, "gone "+age(now.Sub(end))+" ago, last "+last.To)
	}
	switch outages {
	case 0:
		parts = append(parts, "no outage "+within)
	case 1:
		parts = append(parts, "1 outage "+within+", "+age(downFor))
	default:
		parts = append(parts, strconv.Itoa(outages)+" outages "+within+", "+age(downFor)+" in all")
	}
	tv.Summary = strings.Join(parts, " · ")
	return tv
}

// newSpark draws the latency samples between from and now, across the
// width from the first of them to now: a sparkline shows a trend, so it
// uses its width even while the history is younger than the window.
func newSpark(samples []LatencySample, from, now time.Time) sparkView {
	var sv sparkView
	var peak float64
	var pts []LatencySample
	for _, s := range samples {
		if !s.Time.Before(from) && !s.Time.After(now) {
			pts = append(pts, s)
			peak = max(peak, s.Seconds)
		}
	}
	if len(pts) > 0 {
		from = pts[0].Time
	}
	full := max(now.Sub(from), time.Second)
	sv.N = len(pts)
	if sv.N == 0 || peak <= 0 {
		sv.Summary = "no latency yet"
		return sv
	}
	var b strings.Builder
	for i, s := range pts {
		xv := float64(s.Time.Sub(from)) / float64(full) * sparkWidth
		yv := sparkHeight - 2 - s.Seconds/peak*(sparkHeight-4)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(xv) + "," + num(yv))
	}
	if sv.N == 1 {
		// A single sample is drawn as a short flat line.
		b.WriteString(" " + num(min(float64(pts[0].Time.Sub(from))/float64(full)*sparkWidth+3, sparkWidth)) + "," +
			num(sparkHeight-2-(sparkHeight-4)))
	}
	sv.Points = b.String()
	sv.Last, sv.Max = millis(pts[len(pts)-1].Seconds), millis(peak)
	sv.Summary = "last " + sv.Last + ", max " + sv.Max
	return sv
}

// num formats a coordinate with at most one decimal.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}

// spanText formats a window: "1h", "30m", "45s".
func spanText(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return age(d)
}

// durationText formats a failover's duration: "420ms", "4.2s", "1m12s".
func durationText(seconds float64) string {
	if seconds < 1 {
		return strconv.FormatFloat(math.Round(seconds*1000), 'f', 0, 64) + "ms"
	}
	if seconds < 60 {
		return strconv.FormatFloat(seconds, 'f', 1, 64) + "s"
	}
	return age(time.Duration(seconds * float64(time.Second)))
}

// historyViews derives the failover log, the published-address log and
// the former targets from h, newest first.
func historyViews(h History, from, now time.Time, window time.Duration, present map[targetID]bool, maxRows int) ([]failoverView, []publishedView, []formerView, int) {
	var fos []failoverView
	var pubs []publishedView
	for _, sh := range h.Services {
		for _, f := range sh.Failovers {
			fv := failoverView{Service: sh.Name, Failover: f, Duration: "unknown (no report said when probes began to fail)"}
			if !f.FirstFailure.IsZero() {
				fv.Duration = durationText(f.DurationSeconds)
			}
			fos = append(fos, fv)
		}
		for i, p := range sh.Published {
			pv := publishedView{Service: sh.Name, PublishedSet: p}
			if i+1 < len(sh.Published) {
				pv.Until = sh.Published[i+1].Time
			}
			pubs = append(pubs, pv)
		}
	}
	slices.SortStableFunc(fos, func(a, b failoverView) int { return b.Time.Compare(a.Time) })
	slices.SortStableFunc(pubs, func(a, b publishedView) int { return b.Time.Compare(a.Time) })
	fos, pubs = fos[:min(len(fos), MaxLogRows)], pubs[:min(len(pubs), MaxLogRows)]
	var gone []TargetHistory
	for _, th := range h.Targets {
		if !present[targetID{th.Service, th.Node, th.Port, th.Protocol}] {
			gone = append(gone, th)
		}
	}
	hidden := 0
	if len(gone) > maxRows {
		// The ones seen last most recently, newest first.
		slices.SortStableFunc(gone, func(a, b TargetHistory) int { return b.LastSeen.Compare(a.LastSeen) })
		hidden, gone = len(gone)-maxRows, gone[:maxRows]
	}
	var former []formerView
	for _, th := range gone {
		fv := formerView{TargetHistory: th, Timeline: newTimeline(th.Changes, from, th.LastSeen, now, window)}
		// The lists are the history's own: the view keeps only what it drew.
		fv.Changes, fv.Latency = nil, nil
		former = append(former, fv)
	}
	return fos, pubs, former, hidden
}

// axisStart is where the page's timelines start: the start of the window,
// or the oldest time the history knows of when that is later, so that a
// young history fills the width. Every timeline on the page shares it.
func axisStart(h History, from time.Time) time.Time {
	var oldest time.Time
	seen := func(t time.Time) {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	for _, th := range h.Targets {
		if len(th.Changes) > 0 {
			seen(th.Changes[0].Time)
		}
	}
	for _, sh := range h.Services {
		if len(sh.Changes) > 0 {
			seen(sh.Changes[0].Time)
		}
	}
	if oldest.After(from) {
		return oldest
	}
	return from
}
