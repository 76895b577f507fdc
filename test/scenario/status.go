package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
)

// StatusWrite is one version of a Service's status a StatusRecorder saw.
type StatusWrite struct {
	At time.Time
	// IPs are the ingress addresses, sorted.
	IPs []string
	// Conds are the conditions, one "Type=Status/Reason \"message\"" each
	// (the pulselb.io/ prefix left off).
	Conds []string
	// Deleted marks the Service's deletion; IPs and Conds are empty.
	Deleted bool
}

// StatusRecorder watches one Service and keeps every version of its
// status it sees (a write that changes only conditions counts too), from
// a watch that starts again after an error or an expired resource
// version, until the context given to RecordStatus ends.
type StatusRecorder struct {
	mu     sync.Mutex
	writes []StatusWrite
	last   string
}

// RecordStatus starts recording the status of Service ns/name.
func RecordStatus(ctx context.Context, cs kubernetes.Interface, ns, name string) *StatusRecorder {
	r := &StatusRecorder{}
	go func() {
		rv := ""
		for ctx.Err() == nil {
			w, err := cs.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
			if err != nil {
				if apierrors.IsGone(err) {
					rv = ""
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for e := range w.ResultChan() {
				svc, ok := e.Object.(*corev1.Service)
				if !ok || e.Type == watch.Error {
					rv = ""
					break
				}
				rv = svc.ResourceVersion
				if e.Type == watch.Deleted {
					r.observeDeleted()
					continue
				}
				r.observe(svc)
			}
			w.Stop()
		}
	}()
	return r
}

// observe records svc when its status differs from the last one seen.
func (r *StatusRecorder) observe(svc *corev1.Service) {
	st, _ := json.Marshal(svc.Status)
	r.mu.Lock()
	defer r.mu.Unlock()
	if string(st) == r.last {
		return
	}
	r.last = string(st)
	var conds []string
	for _, c := range svc.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s %q", strings.TrimPrefix(c.Type, contract.Prefix), c.Status, c.Reason, c.Message))
	}
	r.writes = append(r.writes, StatusWrite{At: time.Now(), IPs: IngressOf(svc), Conds: conds})
}

func (r *StatusRecorder) observeDeleted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = ""
	r.writes = append(r.writes, StatusWrite{At: time.Now(), Deleted: true})
}

// Count returns the number of writes seen.
func (r *StatusRecorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

// Last returns the addresses of the last write seen; nil before the first.
func (r *StatusRecorder) Last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.writes) == 0 {
		return nil
	}
	return r.writes[len(r.writes)-1].IPs
}

// Nth returns the addresses of the i-th write seen, counting from 1 (the
// status before the writes Since(i)); nil when i is 0.
func (r *StatusRecorder) Nth(i int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i <= 0 || i > len(r.writes) {
		return nil
	}
	return r.writes[i-1].IPs
}

// Since returns the writes after the first i.
func (r *StatusRecorder) Since(i int) []StatusWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes[min(i, len(r.writes)):])
}

// FirstWithout returns when the status was first seen without ip after
// start; zero if never.
func (r *StatusRecorder) FirstWithout(ip string, start time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.writes {
		if w.At.After(start) && !slices.Contains(w.IPs, ip) {
			return w.At
		}
	}
	return time.Time{}
}

// IngressOf returns svc's ingress IPs, sorted.
func IngressOf(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	slices.Sort(out)
	return out
}
