package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pulselb/pulselb/dashboard"
)

// printer writes the demo's output. On a terminal each verdict change
// redraws the target table in place; otherwise it prints one line per
// change, which reads well in a log.
type printer struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
	// drawn is how many lines the live table at the bottom has; 0 when
	// something was printed after it.
	drawn int
}

func newPrinter(w io.Writer) *printer {
	p := &printer{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
	p.drawn = 0
}

func (p *printer) block(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(p.w, "    %s\n", l)
	}
	p.drawn = 0
}

// change reports one verdict change.
func (p *printer) change(text string, state func() dashboard.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, text)
		return
	}
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\x1b[J", p.drawn)
	}
	lines := append([]string{text}, tableLines(state())...)
	for _, l := range lines {
		fmt.Fprintln(p.w, l)
	}
	p.drawn = len(lines)
}

// table prints the targets at a step of the demo. On a terminal the live
// table already shows them.
func (p *printer) table(s dashboard.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		return
	}
	for _, l := range tableLines(s) {
		fmt.Fprintln(p.w, l)
	}
	p.drawn = 0
}

// tableLines renders the targets of s: one row per host and port with the
// verdict, the outcome and latency of each vantage, and what DNS publishes.
func tableLines(s dashboard.State) []string {
	var out []string
	for _, svc := range s.Services {
		out = append(out, fmt.Sprintf("    %-6s %-22s %-8s %-8s %-8s %s", "HOST", "TARGET", "VERDICT", "OUTCOME", "LATENCY", "PROBE"))
		for _, t := range svc.Targets {
			outcome, latency := "-", "-"
			if len(t.Vantages) > 0 {
				v := t.Vantages[0]
				if v.Outcome != "" {
					outcome = v.Outcome
				}
				if v.LatencySeconds > 0 {
					latency = (time.Duration(v.LatencySeconds * float64(time.Second))).Round(10 * time.Microsecond).String()
				}
			}
			target := fmt.Sprintf("%s:%d/%s", t.Address, t.Port, t.Protocol)
			out = append(out, fmt.Sprintf("    %-6s %-22s %-8s %-8s %-8s %s", t.Node, target, t.State, outcome, latency, t.Probe))
		}
		out = append(out, fmt.Sprintf("    published %s.%s: %s", svc.Name, strings.TrimSuffix(zone, "."), strings.Join(svc.Published, " ")))
	}
	return out
}
