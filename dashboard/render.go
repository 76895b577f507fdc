package dashboard

import (
	"embed"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CertWarnDays is how many days before expiry a certificate is shown as a
// warning.
const CertWarnDays = 14

//go:embed assets/page.html
var pageFS embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"stateClass":   stateClass,
	"ms":           millis,
	"ts":           timestamp,
	"rfc3339":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"join":         strings.Join,
	"durationText": durationText,
}).ParseFS(pageFS, "assets/page.html"))

// view is what the templates render: the State plus what is derived from
// it for display.
type view struct {
	Title   string
	Version uint64
	Now     time.Time
	State
	Services []serviceView
	Targets  []targetView
	// Columns are the vantages of the matrix: State.Vantages plus any a
	// target names that the producer left out, then the external
	// vantages likewise.
	Columns []column
	Certs   []certView
	// Window names the history's window, such as "1h"; Axis says what the
	// timelines span: "the last 1h", or since when for a younger history.
	Window    string
	Axis      string
	Failovers []failoverView
	Published []publishedView
	Former    []formerView
	// MaxRows bounds the rows of the services, targets (and matrix),
	// certificates and former-targets tables; the Hidden counts say how
	// many of each the page leaves out, and HiddenUp how many of the
	// targets left out are Up.
	MaxRows                                             int
	HiddenServices, HiddenTargets, HiddenUp             int
	HiddenCerts, HiddenFormer, TotalTargets, TotalCerts int
}

type serviceView struct {
	Service
	Up, Down, Unknown int
	Timeline          timelineView
}

type targetView struct {
	Service string
	Target
	// Cells line up with view.Columns.
	Cells    []cellView
	Timeline timelineView
	Spark    sparkView
}

// column is one vantage of the matrix.
type column struct {
	Name     string
	External bool
}

// String is the column's heading.
func (c column) String() string { return c.Name }

type cellView struct {
	Assigned bool
	VantageResult
}

type certView struct {
	Service  string
	Node     string
	Endpoint string
	NotAfter time.Time
	DaysLeft int
	// Class is "cert-expired", "cert-warn" (under CertWarnDays) or "cert-ok".
	Class string
}

// newView derives what the page shows of s and hist. Each table holds at
// most maxRows rows: of the services and targets, those not Up are chosen
// first, then the others, each table keeping its order; the certificates
// expiring first; the targets no longer probed seen last most recently. So a page's size, and
// the time to render it, are bounded whatever the number of targets; the
// JSON has them all.
func newView(title string, s State, hist History, version uint64, now time.Time, maxRows int) view {
	v := view{Title: title, Version: version, Now: now, State: s, MaxRows: maxRows}
	window := time.Duration(hist.WindowSeconds * float64(time.Second))
	if window <= 0 {
		window = DefaultHistoryWindow
	}
	v.Window = spanText(window)
	windowFrom := now.Add(-window)
	from := axisStart(hist, windowFrom)
	v.Axis = "the last " + v.Window
	if from.After(windowFrom) {
		v.Axis = "the time since " + timestamp(from) + ", when this process began to record (at most " + v.Window + ")"
	}
	targetHist := map[targetID]TargetHistory{}
	for _, th := range hist.Targets {
		targetHist[targetID{th.Service, th.Node, th.Port, th.Protocol}] = th
	}
	serviceHist := map[string]ServiceHistory{}
	for _, sh := range hist.Services {
		serviceHist[sh.Name] = sh
	}
	present := map[targetID]bool{}
	for _, external := range []bool{false, true} {
		names := s.Vantages
		if external {
			names = s.ExternalVantages
		}
		cols := slices.Clone(names)
		for _, svc := range s.Services {
			for _, t := range svc.Targets {
				for _, vr := range t.Vantages {
					if vr.External == external && !slices.Contains(cols, vr.Vantage) {
						cols = append(cols, vr.Vantage)
					}
				}
			}
		}
		if len(cols) > len(names) {
			slices.Sort(cols)
		}
		for _, n := range cols {
			v.Columns = append(v.Columns, column{Name: n, External: external})
		}
	}
	// Which services and targets get a row: those not Up first, then
	// the others, in their order, up to maxRows of each. Timelines and
	// sparklines, the costly part, are drawn only for those.
	var services []*Service
	var targets []struct {
		svc string
		t   *Target
	}
	for pass := range 2 {
		for i := range s.Services {
			svc := &s.Services[i]
			if svcUp := svc.Healthy && !slices.ContainsFunc(svc.Targets, func(t Target) bool { return t.State != "Up" }); svcUp == (pass == 1) {
				services = append(services, svc)
			}
			for j := range svc.Targets {
				if (svc.Targets[j].State == "Up") == (pass == 1) {
					targets = append(targets, struct {
						svc string
						t   *Target
					}{svc.Name, &svc.Targets[j]})
				}
			}
		}
	}
	if len(services) > maxRows {
		v.HiddenServices, services = len(services)-maxRows, services[:maxRows]
	}
	v.TotalTargets = len(targets)
	if len(targets) > maxRows {
		for _, x := range targets[maxRows:] {
			if x.t.State == "Up" {
				v.HiddenUp++
			}
		}
		v.HiddenTargets, targets = len(targets)-maxRows, targets[:maxRows]
	}
	shownService := make(map[*Service]bool, len(services))
	for _, svc := range services {
		shownService[svc] = true
	}
	shownTarget := make(map[*Target]bool, len(targets))
	for _, x := range targets {
		shownTarget[x.t] = true
	}
	for i := range s.Services {
		svc := s.Services[i]
		sv := serviceView{Service: svc}
		for j, t := range svc.Targets {
			switch t.State {
			case "Up":
				sv.Up++
			case "Down":
				sv.Down++
			default:
				sv.Unknown++
			}
			id := targetID{svc.Name, t.Node, t.Port, t.Protocol}
			present[id] = true
			if shownTarget[&s.Services[i].Targets[j]] {
				th := targetHist[id]
				tv := targetView{Service: svc.Name, Target: t, Cells: make([]cellView, len(v.Columns)),
					Timeline: newTimeline(th.Changes, from, now, now, window), Spark: newSpark(th.Latency, windowFrom, now)}
				for _, vr := range t.Vantages {
					i := slices.IndexFunc(v.Columns, func(c column) bool { return c.Name == vr.Vantage && c.External == vr.External })
					tv.Cells[i] = cellView{Assigned: true, VantageResult: vr}
				}
				v.Targets = append(v.Targets, tv)
			}
			if !t.CertNotAfter.IsZero() {
				left := t.CertNotAfter.Sub(now)
				c := certView{Service: svc.Name, Node: t.Node, Endpoint: endpoint(t), NotAfter: t.CertNotAfter,
					DaysLeft: int(math.Floor(left.Hours() / 24)), Class: "cert-ok"}
				switch {
				case left <= 0:
					c.Class = "cert-expired"
				case left < CertWarnDays*24*time.Hour:
					c.Class = "cert-warn"
				}
				v.Certs = append(v.Certs, c)
			}
		}
		if shownService[&s.Services[i]] {
			sv.Timeline = newTimeline(serviceHist[svc.Name].Changes, from, now, now, window)
			v.Services = append(v.Services, sv)
		}
	}
	slices.SortStableFunc(v.Certs, func(a, b certView) int { return a.NotAfter.Compare(b.NotAfter) })
	v.TotalCerts = len(v.Certs)
	if len(v.Certs) > maxRows {
		v.HiddenCerts, v.Certs = len(v.Certs)-maxRows, v.Certs[:maxRows]
	}
	v.Failovers, v.Published, v.Former, v.HiddenFormer = historyViews(hist, from, now, window, present, maxRows)
	return v
}

// MaxLogRows is the package's MaxLogRows, for the templates.
func (v view) MaxLogRows() int { return MaxLogRows }

// Ago is how long before the page was rendered t was, such as "3m12s";
// empty for the zero time.
func (v view) Ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return age(v.Now.Sub(t))
}

// age formats a duration with its two largest units: "42s", "3m12s",
// "2h5m", "4d3h". A negative duration (clock skew) reads as "0s".
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

func endpoint(t Target) string {
	if t.Address == "" {
		return strconv.Itoa(t.Port) + "/" + t.Protocol
	}
	host := t.Address
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(t.Port) + "/" + t.Protocol
}

// stateClass maps a state to its colour class.
func stateClass(state string) string {
	switch state {
	case "Up":
		return "state-up"
	case "Down":
		return "state-down"
	}
	return "state-unknown"
}

// millis formats seconds as milliseconds with precision that suits the
// size: "0.42 ms", "12.3 ms", "1504 ms".
func millis(seconds float64) string {
	ms := seconds * 1000
	switch {
	case ms <= 0 || math.IsNaN(ms) || math.IsInf(ms, 0):
		return ""
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	case ms < 100:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
