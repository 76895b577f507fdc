package dashboard

import (
	"encoding/json"
	"net/http"
	"sync"
)

// Options configure a Dashboard.
type Options struct {
	// Title heads the page; empty means "pulselb".
	Title string
}

// Dashboard is an http.Handler serving the latest State given to Update.
type Dashboard struct {
	opts Options

	mu    sync.Mutex
	state State
}

// New returns a Dashboard showing an empty State until the first Update.
func New(opts Options) *Dashboard {
	if opts.Title == "" {
		opts.Title = "pulselb"
	}
	return &Dashboard{opts: opts}
}

// Update replaces the State shown. The caller must not change s afterwards.
func (d *Dashboard) Update(s State) {
	d.mu.Lock()
	d.state = s
	d.mu.Unlock()
}

// ServeHTTP serves /api/v1/state.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/state" {
		http.NotFound(w, r)
		return
	}
	d.mu.Lock()
	s := d.state
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}
