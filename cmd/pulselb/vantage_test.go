package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
)

func tokenSecret(account string, typ corev1.SecretType, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: account + "-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: account}},
		Type: typ,
		Data: map[string][]byte{corev1.ServiceAccountTokenKey: []byte(token), corev1.ServiceAccountRootCAKey: []byte("CA PEM")},
	}
}

func TestVantageKubeconfig(t *testing.T) {
	tests := []struct {
		name    string
		objs    []runtime.Object
		wantErr string
	}{
		{"token", []runtime.Object{tokenSecret("pulselb-vantage-vps", corev1.SecretTypeServiceAccountToken, "tok3n")}, ""},
		{"no Secret", nil, "reading the token Secret pulselb-system/pulselb-vantage-vps-token"},
		{"not a token", []runtime.Object{tokenSecret("pulselb-vantage-vps", corev1.SecretTypeOpaque, "tok3n")}, "is not a token of the ServiceAccount pulselb-vantage-vps"},
		{"not filled in", []runtime.Object{tokenSecret("pulselb-vantage-vps", corev1.SecretTypeServiceAccountToken, "")}, "has no token yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			data, err := vantageKubeconfig(ctx, fake.NewClientset(tt.objs...), "pulselb-system", "vps", "https://203.0.113.10:6443")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "tok3n") {
					t.Errorf("error %q holds the token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(data)
			if err != nil {
				t.Fatalf("output is no kubeconfig: %v", err)
			}
			rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
			if err != nil {
				t.Fatal(err)
			}
			if rc.Host != "https://203.0.113.10:6443" || rc.BearerToken != "tok3n" || string(rc.CAData) != "CA PEM" {
				t.Errorf("client config host %q token %q CA %q", rc.Host, rc.BearerToken, rc.CAData)
			}
			if ns, _, _ := clientcmd.NewDefaultClientConfig(*cfg, nil).Namespace(); ns != "pulselb-system" {
				t.Errorf("namespace %q", ns)
			}
		})
	}
}

func TestVantageKubeconfigFlagErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "kc")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--server", "https://203.0.113.10:6443", "--output", out}, "--vantage-name: vantage name \"\""},
		{[]string{"--vantage-name", "vps", "--server", "203.0.113.10:6443", "--output", out}, "--server=\"203.0.113.10:6443\": want the API server's https URL"},
		{[]string{"--vantage-name", "vps", "--server", "https://203.0.113.10:6443"}, "--output is required"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"vantage-kubeconfig"}, tt.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a kubeconfig was written despite bad flags")
	}
}
