package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Options configure a Dashboard. Zero fields take the documented defaults.
type Options struct {
	// Title heads the page; empty means "pulselb".
	Title string
	// KeepAlive is how often an idle event stream gets a comment, so that
	// proxies and browsers keep it open (default 15s).
	KeepAlive time.Duration
	// MaxClients bounds the event streams open at once (default 100).
	// When they are all taken, a new client takes the place of the stream
	// open longest if that has been open EvictAfter; otherwise it is
	// refused with 503.
	MaxClients int
	// EvictAfter is how long a stream keeps its place against new clients
	// when MaxClients are taken (default 10s). A browser whose stream is
	// ended reconnects after its retry delay; a client that never reads
	// does not come back.
	EvictAfter time.Duration
	// WriteTimeout bounds each write to an event stream; a client whose
	// connection takes nothing for this long, its socket buffers full, is
	// dropped (default 10s).
	WriteTimeout time.Duration
	// Now is the clock relative times are rendered against and event
	// streams' ages are measured by (default time.Now).
	Now func() time.Time
	// Metrics receives the dashboard's metrics; nil means unregistered
	// ones of its own.
	Metrics *Metrics
	// History bounds the history kept of the States given to Update.
	History HistoryOptions
	// MaxPageRows bounds the rows of each table of the page (services,
	// targets and the vantage matrix, certificates, targets no longer
	// probed), so that its size and the time to render it stay bounded
	// however many targets there are; /api/v1/state has them all. Of the
	// services and targets, those not Up get rows first (default 500).
	MaxPageRows int
	// PageMaxAge is how long a rendered page, or its live fragment, is
	// served again to every request while the version it shows is
	// current: the page is rendered at most once per version and per
	// PageMaxAge, however many clients ask, one render at a time. Its
	// relative times ("3m ago", the timelines' right edge) are at most
	// this old (default 5s).
	PageMaxAge time.Duration
	// ResponsesPerSecond bounds the large responses (the page, its
	// fragment, /api/v1/state and /api/v1/history) sent a second over all
	// clients, with bursts of twice as many; a request beyond it waits
	// its turn, or gets 503 when its turn is more than MaxWait away. So
	// clients fetching in a loop are slowed to this rate instead of
	// taking the CPU from the DNS server and the probes (default 20).
	ResponsesPerSecond float64
	// MaxWait is the longest a request waits for its turn (default 5s).
	MaxWait time.Duration
}

// Defaults of Options.
const (
	DefaultKeepAlive    = 15 * time.Second
	DefaultMaxClients   = 100
	DefaultEvictAfter   = 10 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultMaxPageRows  = 200
	DefaultPageMaxAge   = 5 * time.Second
	// DefaultResponsesPerSecond is a browser's page and a few updates a
	// second for each of several viewers: at 4,200 targets, a page of
	// about 440 KB, 20 a second are about 9 MB/s.
	DefaultResponsesPerSecond = 20
	DefaultMaxWait            = 5 * time.Second
)

// MaxClientsFor returns the event streams a Dashboard may hold on a server
// that holds maxConns connections: half of them, so that pages, scrapes
// and peer polls keep the other half, and at most DefaultMaxClients.
func MaxClientsFor(maxConns int) int {
	return max(1, min(DefaultMaxClients, maxConns/2))
}

// Paths the Dashboard serves, relative to where it is mounted.
const (
	PathPage     = "/"
	PathFragment = "/fragment"
	PathState    = "/api/v1/state"
	PathEvents   = "/api/v1/events"
	PathHistory  = "/api/v1/history"
	pathCSS      = "/static/dashboard.css"
	pathJS       = "/static/dashboard.js"
	pathIcon     = "/static/favicon.svg"
)

// VersionHeader carries the version of the State a response shows; it
// increases whenever the State shown changes.
const VersionHeader = "X-Pulselb-Version"

// contentSecurityPolicy allows only the dashboard's own files: no inline
// script or style, no frames, no forms.
const contentSecurityPolicy = "default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

//go:embed assets/dashboard.css assets/dashboard.js assets/favicon.svg
var assets embed.FS

// Dashboard is an http.Handler serving the latest State given to Update:
// the page at "/", the page's live part at /fragment, the State as JSON
// at /api/v1/state and its changes as server-sent events at
// /api/v1/events. It answers only GET and HEAD.
type Dashboard struct {
	opts Options
	done chan struct{}

	mu        sync.Mutex
	state     State
	stateJSON []byte
	// shown is the JSON of state without GeneratedAt: a State that differs
	// from the last one only in when it was built changes nothing shown.
	shown   []byte
	version uint64
	clients map[*client]struct{}
	closed  bool
	// hist remembers the States given to Update; histJSON is its JSON,
	// built on demand and dropped by the next Update.
	hist     *history
	histJSON []byte
	// pages holds the latest rendering of the page and of its fragment,
	// by template name; render lets one request render at a time.
	pages  map[string]rendered
	render sync.Mutex
	pace   *pacer
}

// rendered is one rendering of a template: the version it shows, when it
// was rendered (Options.Now) and the HTML.
type rendered struct {
	version uint64
	at      time.Time
	body    []byte
}

// client is one event stream. notify holds at most one pending wake-up:
// a client that falls behind skips to the latest version instead of
// queueing, so a slow reader never blocks Update or costs memory.
// evicted is closed when a new client takes its place.
type client struct {
	notify  chan struct{}
	evicted chan struct{}
	opened  time.Time
}

// New returns a Dashboard showing an empty State until the first Update.
func New(opts Options) *Dashboard {
	if opts.Title == "" {
		opts.Title = "pulselb"
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxClients
	}
	if opts.EvictAfter <= 0 {
		opts.EvictAfter = DefaultEvictAfter
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.MaxPageRows <= 0 {
		opts.MaxPageRows = DefaultMaxPageRows
	}
	if opts.PageMaxAge <= 0 {
		opts.PageMaxAge = DefaultPageMaxAge
	}
	if opts.ResponsesPerSecond <= 0 {
		opts.ResponsesPerSecond = DefaultResponsesPerSecond
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	return &Dashboard{opts: opts, done: make(chan struct{}), clients: map[*client]struct{}{}, hist: newHistory(opts.History),
		pages: map[string]rendered{}, pace: newPacer(opts.ResponsesPerSecond, int(2*opts.ResponsesPerSecond), opts.MaxWait)}
}

// Update replaces the State shown. The caller must not change s afterwards.
// It never blocks on clients: each event stream is told that a new version
// exists and fetches it when it is ready.
func (d *Dashboard) Update(s State) {
	body, err := json.Marshal(s)
	if err != nil {
		// Only a non-finite latency can fail to encode; show it as 0
		// rather than keep showing an outdated State.
		s = finite(s)
		if body, err = json.Marshal(s); err != nil {
			return
		}
	}
	cmp := s
	cmp.GeneratedAt = time.Time{}
	shown, _ := json.Marshal(cmp)

	d.mu.Lock()
	defer d.mu.Unlock()
	d.state, d.stateJSON = s, body
	d.hist.observe(s, d.opts.Now())
	d.histJSON = nil
	if d.version > 0 && bytes.Equal(shown, d.shown) {
		return
	}
	d.shown = shown
	d.version++
	d.opts.Metrics.updates.Inc()
	for c := range d.clients {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// finite returns s with every non-finite latency replaced by 0, copying
// what it changes.
func finite(s State) State {
	s.Services = append([]Service(nil), s.Services...)
	for i := range s.Services {
		svc := &s.Services[i]
		svc.Targets = append([]Target(nil), svc.Targets...)
		for j := range svc.Targets {
			t := &svc.Targets[j]
			t.Vantages = append([]VantageResult(nil), t.Vantages...)
			for k := range t.Vantages {
				if l := t.Vantages[k].LatencySeconds; math.IsNaN(l) || math.IsInf(l, 0) {
					t.Vantages[k].LatencySeconds = 0
				}
			}
		}
	}
	return s
}

// Version returns the version of the State shown: 0 before the first
// Update, then increasing by one whenever what is shown changes.
func (d *Dashboard) Version() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.version
}

// Close ends every open event stream and refuses new ones, so that an
// http.Server's Shutdown does not wait for them. The other paths keep
// working.
func (d *Dashboard) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
}

func (d *Dashboard) snapshot() (State, []byte, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state, d.stateJSON, d.version
}

// History returns a copy of what the Dashboard remembers, as served at
// /api/v1/history.
func (d *Dashboard) History() History {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hist.snapshot(d.opts.Now())
}

// historyJSON returns the history's JSON and the version shown with it.
// It encodes from the history itself, under the lock, rather than from a
// copy: the history is the largest thing the Dashboard holds.
func (d *Dashboard) historyJSON() ([]byte, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.histJSON == nil {
		body, err := json.Marshal(d.hist.alias(d.opts.Now()))
		if err != nil {
			return nil, 0, err
		}
		d.histJSON = body
	}
	return d.histJSON, d.version, nil
}

// ServeHTTP serves the dashboard's paths with security headers; any method
// but GET and HEAD is refused, as the dashboard changes nothing.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case PathPage, PathFragment, PathState, PathHistory:
		if waited, ok := d.pace.wait(r.Context()); !ok {
			d.opts.Metrics.paced.WithLabelValues("refused").Inc()
			h.Set("Retry-After", strconv.Itoa(int(d.opts.MaxWait/time.Second)+1))
			http.Error(w, "the dashboard is busy: too many requests a second; retry later", http.StatusServiceUnavailable)
			return
		} else if waited > 0 {
			d.opts.Metrics.paced.WithLabelValues("waited").Inc()
		}
	}
	switch r.URL.Path {
	case PathPage:
		d.serveHTML(w, "page")
	case PathFragment:
		d.serveHTML(w, "state")
	case PathState:
		d.serveState(w)
	case PathEvents:
		d.serveEvents(w, r)
	case PathHistory:
		d.serveHistory(w)
	case pathCSS:
		serveAsset(w, "assets/dashboard.css", "text/css; charset=utf-8")
	case pathJS:
		serveAsset(w, "assets/dashboard.js", "text/javascript; charset=utf-8")
	case pathIcon:
		serveAsset(w, "assets/favicon.svg", "image/svg+xml")
	default:
		http.NotFound(w, r)
	}
}

func (d *Dashboard) serveHTML(w http.ResponseWriter, name string) {
	page, err := d.page(name)
	if err != nil {
		http.Error(w, fmt.Sprintf("rendering the dashboard: %v", err), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set(VersionHeader, strconv.FormatUint(page.version, 10))
	_, _ = w.Write(page.body)
}

// page returns the rendering of template name for the current version:
// the one kept when it shows that version and is younger than
// PageMaxAge, else a new one. Requests that find none wait for the one
// render in progress rather than each render their own, so a crowd of
// clients costs one rendering, and rendering takes at most one core from
// the process (the DNS server in standalone mode).
func (d *Dashboard) page(name string) (rendered, error) {
	fresh := func() (rendered, bool) {
		p, ok := d.pages[name]
		return p, ok && p.version == d.version && d.opts.Now().Sub(p.at) < d.opts.PageMaxAge
	}
	d.mu.Lock()
	p, ok := fresh()
	d.mu.Unlock()
	if ok {
		return p, nil
	}
	d.render.Lock()
	defer d.render.Unlock()
	// The view is derived under the lock, straight from the history: it
	// keeps only what it derived, so the template runs without the lock.
	d.mu.Lock()
	if p, ok := fresh(); ok {
		d.mu.Unlock()
		return p, nil
	}
	version, now := d.version, d.opts.Now()
	v := newView(d.opts.Title, d.state, d.hist.alias(now), version, now, d.opts.MaxPageRows)
	d.mu.Unlock()
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, v); err != nil {
		return rendered{}, err
	}
	d.opts.Metrics.renders.Inc()
	p = rendered{version: version, at: now, body: buf.Bytes()}
	d.mu.Lock()
	d.pages[name] = p
	d.mu.Unlock()
	return p, nil
}

func (d *Dashboard) serveState(w http.ResponseWriter) {
	_, body, version := d.snapshot()
	if body == nil {
		// Before the first Update: an empty State, with empty lists
		// rather than nulls.
		body, _ = json.Marshal(State{Vantages: []string{}, Services: []Service{}, Transitions: []Transition{}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(VersionHeader, strconv.FormatUint(version, 10))
	// body is shared by every request: append to it would write into
	// its spare capacity from several requests at once.
	_, _ = w.Write(body)
	_, _ = w.Write(newline)
}

func (d *Dashboard) serveHistory(w http.ResponseWriter) {
	body, version, err := d.historyJSON()
	if err != nil {
		http.Error(w, fmt.Sprintf("encoding the history: %v", err), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(VersionHeader, strconv.FormatUint(version, 10))
	// body is shared by every request: append to it would write into
	// its spare capacity from several requests at once.
	_, _ = w.Write(body)
	_, _ = w.Write(newline)
}

var newline = []byte("\n")

func serveAsset(w http.ResponseWriter, name, contentType string) {
	b, err := assets.ReadFile(name)
	if err != nil {
		http.Error(w, fmt.Sprintf("reading %s: %v", name, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	// Revalidate so that a new binary's files are used at once.
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
