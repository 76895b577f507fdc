package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// unreachableKubeconfig writes a kubeconfig whose API server is a loopback
// port that refuses connections.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "kubeconfig")
	const text = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestControllerUnreachableAPIServer: with --api-server-wait, a controller
// whose API server refuses connections exits within about that time with
// an error naming the server, and does not blame --probe-reports.
func TestControllerUnreachableAPIServer(t *testing.T) {
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run([]string{"controller", "--kubeconfig", unreachableKubeconfig(t), "--proxy-image", "pulselb:test",
		"--metrics-address", "", "--api-server-wait", "2s"}, &out, &errOut)
	took := time.Since(start)
	const want = "pulselb controller: cannot reach the API server at https://127.0.0.1:1"
	if code != 1 || !strings.Contains(errOut.String(), want) || strings.Contains(errOut.String(), "probe-reports") {
		t.Errorf("exit %d, stderr %q; want 1 and %q, not blaming --probe-reports", code, errOut.String(), want)
	}
	if took > 10*time.Second {
		t.Errorf("gave up after %s with --api-server-wait=2s", took)
	}
}

// TestControllerWaitsForAPIServer: by default the controller keeps trying
// an API server that refuses connections, says so at once naming the
// address, retries with a growing delay, and stops cleanly on SIGTERM.
func TestControllerWaitsForAPIServer(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	klog.SetLogger(logger)
	defer klog.ClearLogger()
	logs := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }

	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"controller", "--kubeconfig", unreachableKubeconfig(t), "--proxy-image", "pulselb:test",
			"--metrics-address", ""}, &out, &errOut)
	}()
	waitLogged := func(what string, within time.Duration, cond func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !cond(logs()) {
			select {
			case code := <-done:
				t.Fatalf("controller exited (%d) while waiting for %s; stderr %q, logs:\n%s", code, what, errOut.String(), logs())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s logged within %s:\n%s", what, within, logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	start := time.Now()
	waitLogged("message that the API server cannot be reached", 3*time.Second, func(s string) bool {
		return strings.Contains(s, "Cannot reach the API server") && strings.Contains(s, `address="https://127.0.0.1:1"`)
	})
	t.Logf("first message after %s", time.Since(start).Round(time.Millisecond))
	waitLogged("second attempt, a second later", 5*time.Second, func(s string) bool {
		return strings.Contains(s, "attempt=2") && strings.Contains(s, `retryIn="2s"`)
	})
	if s := logs(); strings.Contains(s, "probe-reports") {
		t.Errorf("the logs blame --probe-reports:\n%s", s)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0; stderr %q", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("controller still waiting 5s after SIGTERM")
	}
}

// TestWaitForAPIServer: any HTTP answer, a refusal of the credentials
// included, shows that the API server is reachable; the wait then ends at
// once without logging a retry.
func TestWaitForAPIServer(t *testing.T) {
	for _, code := range []int{http.StatusOK, http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/version" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				fmt.Fprint(w, `{"major":"1","minor":"37"}`)
			}))
			defer srv.Close()
			client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(t.Context(), logger)
			if err := waitForAPIServer(ctx, client.Discovery().RESTClient(), srv.URL, time.Second); err != nil {
				t.Fatalf("waitForAPIServer = %v", err)
			}
			if logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); strings.Contains(logs, "Cannot reach") {
				t.Errorf("logged a retry although the server answered:\n%s", logs)
			}
		})
	}
}
