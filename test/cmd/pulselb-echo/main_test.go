package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
