package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// retryMillis is how long a browser waits before it reconnects a dropped
// event stream.
const retryMillis = 2000

// Event is the data of each "state" event of the event stream: the
// version now shown. Clients fetch /api/v1/state (or /fragment) when it
// is newer than what they have; a client that falls behind receives only
// the latest version.
type Event struct {
	Version     uint64    `json:"version"`
	GeneratedAt time.Time `json:"generatedAt,omitzero"`
}

// serveEvents streams an event with the current version at once and
// another whenever the version changes, with keep-alive comments between.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	// Tell buffering reverse proxies (nginx) to pass events on at once.
	h.Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		return
	}
	c := &client{notify: make(chan struct{}, 1), evicted: make(chan struct{}), opened: d.opts.Now()}
	if !d.add(c) {
		d.opts.Metrics.sseRejected.Inc()
		http.Error(w, "too many event stream clients", http.StatusServiceUnavailable)
		return
	}
	defer d.remove(c)

	rc := http.NewResponseController(w)
	write := func(format string, args ...any) error {
		// A client whose connection takes nothing is dropped after
		// WriteTimeout, whatever the server's own write timeout; a
		// ResponseWriter without deadlines (tests) just writes.
		if err := rc.SetWriteDeadline(time.Now().Add(d.opts.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		return rc.Flush()
	}
	if write("retry: %d\n\n", retryMillis) != nil {
		return
	}
	keepAlive := time.NewTicker(d.opts.KeepAlive)
	defer keepAlive.Stop()
	var sent uint64
	first := true
	for {
		s, _, version := d.snapshot()
		if first || version != sent {
			data, _ := json.Marshal(Event{Version: version, GeneratedAt: s.GeneratedAt})
			if write("id: %d\nevent: state\ndata: %s\n\n", version, data) != nil {
				return
			}
			d.opts.Metrics.sseEvents.Inc()
			sent, first = version, false
			keepAlive.Reset(d.opts.KeepAlive)
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		case <-c.evicted:
			return
		case <-c.notify:
		case <-keepAlive.C:
			if write(": keep-alive\n\n") != nil {
				return
			}
		}
	}
}

// add registers c unless the Dashboard is closed or MaxClients streams are
// open, none of them for EvictAfter. A client that reads nothing looks
// like one that reads until its socket buffers fill, hundreds of
// kilobytes of events later: handing the longest-open stream's place on
// is what keeps such clients from holding every place.
func (d *Dashboard) add(c *client) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	if len(d.clients) >= d.opts.MaxClients {
		var oldest *client
		for o := range d.clients {
			if oldest == nil || o.opened.Before(oldest.opened) {
				oldest = o
			}
		}
		if oldest == nil || c.opened.Sub(oldest.opened) < d.opts.EvictAfter {
			return false
		}
		delete(d.clients, oldest)
		close(oldest.evicted)
		d.opts.Metrics.sseClients.Dec()
		d.opts.Metrics.sseEvicted.Inc()
	}
	d.clients[c] = struct{}{}
	d.opts.Metrics.sseClients.Inc()
	return true
}

func (d *Dashboard) remove(c *client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.clients[c]; ok {
		delete(d.clients, c)
		d.opts.Metrics.sseClients.Dec()
	}
}

// Clients returns how many event streams are open.
func (d *Dashboard) Clients() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.clients)
}
