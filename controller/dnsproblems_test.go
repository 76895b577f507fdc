package controller

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/dnsexport"
)

func TestDNSProblemReporter(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	conflict := &dnsexport.ServiceError{Namespace: "shop", Name: "web",
		Err: fmt.Errorf("www.lb.example.com.: %w (default/other)", dnsexport.ErrHostnameConflict)}
	annotation := errors.New(`annotation pulselb.io/hostname="-bad": not a hostname`)
	wildcard := &dnsexport.ServiceError{Namespace: "shop", Name: "web",
		Err: &dnsexport.HostnameError{Hostname: "*.apps.lb.example.com", Err: errors.New("wildcard names are not served")}}
	capped := &dnsexport.ServiceError{Namespace: "shop", Name: "web",
		Err: fmt.Errorf("web.shop.lb.example.com.: 4200 A addresses: %w", dnsexport.ErrAddressesCapped)}
	tests := []struct {
		name     string
		leading  bool
		problems []error
		want     []string
	}{
		{"leader events a hostname conflict", true, []error{conflict},
			[]string{"Warning HostnameConflict " + conflict.Error()}},
		{"leader leaves annotation problems to the reconcile", true, []error{annotation, conflict},
			[]string{"Warning HostnameConflict " + conflict.Error()}},
		{"leader, annotation problems only", true, []error{annotation}, nil},
		{"leader events a wildcard that is not served", true, []error{wildcard, capped},
			[]string{"Warning HostnameNotServed " + wildcard.Error()}},
		{"follower events nothing", false, []error{annotation, conflict}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			report := DNSProblemReporter(ktesting.NewLogger(t, ktesting.NewConfig()), recorder, func() bool { return tt.leading })
			report(svc, tt.problems)
			close(recorder.Events)
			var got []string
			for e := range recorder.Events {
				got = append(got, e)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events %q, want %q", got, tt.want)
			}
		})
	}
}
