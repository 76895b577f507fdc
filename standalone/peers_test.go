package standalone

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPeerRedirectNotFollowed: a peer that answers with a redirect gets
// an error naming it, and the redirect's target never sees a request,
// let alone the token, whatever the status and even on the same host.
func TestPeerRedirectNotFollowed(t *testing.T) {
	var mu sync.Mutex
	var seen []string // what reached the target: Authorization and Referer
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, "Authorization="+r.Header.Get("Authorization")+" Referer="+r.Header.Get("Referer"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"metadata":{"name":"b"}}`))
	}))
	defer target.Close()
	// The peer redirects with the status its URL's first path segment
	// names, to the same path on the target: another port of 127.0.0.1.
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.Split(r.URL.Path, "/")[1])
		http.Redirect(w, r, target.URL+r.URL.Path, code)
	}))
	defer peer.Close()

	h := startHosts(t, "127.0.0.63")
	in := instance{name: "a", hosts: []string{"a=127.0.0.63"}, peers: []Peer{{Name: "b", URL: peer.URL + "/302"}}}
	r := start(t, in.load(t, t.TempDir(), h.port))
	polled := func() (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ps := r.peers["b"]; ps != nil {
			return true, ps.err
		}
		return false, nil
	}
	waitFor(t, 5*time.Second, "a poll of b", func() bool { done, _ := polled(); return done })
	if _, err := polled(); !errors.Is(err, ErrRedirected) || !strings.Contains(err.Error(), "polling peer b") {
		t.Errorf("polling a peer that redirects: %v, want ErrRedirected naming peer b", err)
	}

	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		p := Peer{Name: "b", URL: peer.URL + "/" + strconv.Itoa(code)}
		_, err := fetchReport(t.Context(), r.client, p, testToken, time.Second, time.Now)
		if !errors.Is(err, ErrRedirected) || !strings.Contains(err.Error(), strconv.Itoa(code)) {
			t.Errorf("HTTP %d: error %v, want ErrRedirected naming the status", code, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Errorf("the redirect's target got %d requests, the first with %s", len(seen), seen[0])
	}
}
