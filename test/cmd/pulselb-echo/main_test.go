package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHealthToggle(t *testing.T) {
	s := &server{name: "ns/pod"}
	steps := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/health", http.StatusOK, "ok"},
		{"/anything", http.StatusOK, "name=ns/pod"},
		{"/health/fail", http.StatusOK, "unhealthy=true"},
		{"/health", http.StatusServiceUnavailable, "unhealthy"},
		{"/other", http.StatusOK, "name=ns/pod"}, // only /health fails
		{"/health/pass", http.StatusOK, "unhealthy=false"},
		{"/health", http.StatusOK, "ok"},
	}
	for _, st := range steps {
		w := httptest.NewRecorder()
		s.answer(w, httptest.NewRequest(http.MethodGet, st.path, nil))
		if w.Code != st.wantCode || !strings.Contains(w.Body.String(), st.wantBody) {
			t.Errorf("GET %s: %d %q, want %d containing %q", st.path, w.Code, w.Body.String(), st.wantCode, st.wantBody)
		}
	}
}

// TestProxyHeader checks that a request after a PROXY protocol header is
// answered with the header's client, and one after a health check's header
// or none with the connection's own address.
func TestProxyHeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &server{name: "ns/pod"}
	go func() { _ = s.serveTCP(ln) }()
	for _, tt := range []struct {
		name, header, want string
	}{
		{"v1", "PROXY TCP4 198.18.3.1 198.18.0.5 40000 80\r\n", "client=198.18.3.1:40000"},
		{"v1 IPv6", "PROXY TCP6 fd00:198:18::3:1 fd00:198:18::5 40000 80\r\n", "client=[fd00:198:18::3:1]:40000"},
		{"v2", "\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\xc6\x12\x03\x01\xc6\x12\x00\x05\x9c\x40\x00\x50", "client=198.18.3.1:40000"},
		{"v2 LOCAL", "\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00", "client=127.0.0.1:"},
		{"v1 UNKNOWN", "PROXY UNKNOWN\r\n", "client=127.0.0.1:"},
		{"none", "", "client=127.0.0.1:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, tt.header+"GET / HTTP/1.0\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(c)
			if !strings.Contains(string(b), tt.want) {
				t.Errorf("answer %q does not contain %q", b, tt.want)
			}
		})
	}
}
