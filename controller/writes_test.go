package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// optimisticServices makes the fake clientset behave like the API server
// for Service updates: an update must carry the stored resourceVersion or
// it fails with a conflict, and a successful one increments it.
func optimisticServices(t *testing.T, f *fixture) *int {
	t.Helper()
	conflicts := 0
	f.client.PrependReactor("update", "services", func(a core.Action) (bool, runtime.Object, error) {
		u := a.(core.UpdateAction)
		in := u.GetObject().(*corev1.Service).DeepCopy()
		obj, err := f.client.Tracker().Get(a.GetResource(), in.Namespace, in.Name)
		if err != nil {
			return true, nil, err
		}
		stored := obj.(*corev1.Service)
		if in.ResourceVersion != stored.ResourceVersion {
			conflicts++
			return true, nil, apierrors.NewConflict(corev1.Resource("services"), in.Name, nil)
		}
		rv, _ := strconv.Atoi(stored.ResourceVersion)
		out := stored.DeepCopy()
		if u.GetSubresource() == "status" {
			out.Status = in.Status
		} else {
			in.Status = stored.Status
			out = in
		}
		out.ResourceVersion = strconv.Itoa(rv + 1)
		if err := f.client.Tracker().Update(a.GetResource(), out, out.Namespace); err != nil {
			return true, nil, err
		}
		return true, out.DeepCopy(), nil
	})
	return &conflicts
}

func notReadyPod(svc *corev1.Service, node string) *corev1.Pod {
	p := readyPod(svc, node)
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	return p
}

// TestSyncReadsItsOwnWrites: the informer has not seen the controller's
// writes yet when the Service is synced again; the sync starts from what
// was written, so it neither repeats the writes nor runs into conflicts.
func TestSyncReadsItsOwnWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	c := f.controller(ctx)
	conflicts := optimisticServices(t, f)
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatal(err)
	}
	if got := f.service(ctx, "shop", "web"); got.ResourceVersion != "3" || len(got.Status.LoadBalancer.Ingress) != 2 {
		t.Fatalf("after the first sync: resourceVersion %s, ingress %v; want 3 (finalizer with annotations, status) and 2 addresses",
			got.ResourceVersion, got.Status.LoadBalancer.Ingress)
	}
	// The Deployment's informer caught up (its event is what usually
	// triggers the next sync); the Service's did not.
	deps, err := f.client.AppsV1().Deployments(systemNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("deployments %v, %v", deps, err)
	}
	if err := f.system.Apps().V1().Deployments().Informer().GetIndexer().Add(&deps.Items[0]); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatalf("second sync with the cache still at resourceVersion 1: %v", err)
	}
	// The one write is the Deployment's budget, which waits for the
	// Deployment to exist so that it can be owned by it.
	if w := f.writes(); !slices.Equal(w, []string{"create poddisruptionbudgets " + placement.Name("shop", "web")}) || *conflicts != 0 {
		t.Errorf("second sync: writes %q, %d conflicts; want the budget's creation only", w, *conflicts)
	}
}

// serviceWrites syncs svc and returns the Service writes it made, as
// "update services" and "update services/status".
func serviceWrites(t *testing.T, ctx context.Context, f *fixture, c *Controller, svc *corev1.Service, step string) []string {
	t.Helper()
	f.client.ClearActions()
	if err := c.sync(ctx, key(svc)); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	var out []string
	for _, w := range f.writes() {
		if strings.HasPrefix(w, "update services") {
			out = append(out, strings.TrimSuffix(w, " "+svc.Name))
		}
	}
	return out
}

// TestNewServiceWrites: a Service taken on costs one update (finalizer and
// annotations) and one status write, both when its first proxy is ready,
// however many steps its proxies go through before; a problem is written
// at once; a Service that stays unpublished gets its conditions written
// after progressLag, to say why.
func TestNewServiceWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	both := []string{"update services", "update services/status"}
	t.Run("healthy start", func(t *testing.T) {
		svc := newService("web")
		f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"))
		c := f.controller(ctx)
		optimisticServices(t, f)
		now := testNow
		c.now = func() time.Time { return now }
		steps := []struct {
			name  string
			after time.Duration
			pod   *corev1.Pod
			want  []string
		}{
			{"no proxy scheduled yet", 0, nil, nil},
			{"one proxy scheduled", 3 * time.Second, notReadyPod(svc, "n1"), nil},
			{"both scheduled", 3 * time.Second, notReadyPod(svc, "n2"), nil},
			{"first proxy ready, the other starting", 3 * time.Second, readyPod(svc, "n1"), nil},
			{"second proxy ready", statusSettle / 2, readyPod(svc, "n2"), both},
		}
		for _, st := range steps {
			if st.pod != nil {
				if err := c.podIndex.Update(st.pod); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(st.after)
			if got := serviceWrites(t, ctx, f, c, svc, st.name); !slices.Equal(got, st.want) {
				t.Errorf("%s: writes %q, want %q", st.name, got, st.want)
			}
		}
		got := f.service(ctx, "shop", "web")
		if !hasFinalizer(got) || got.Annotations[contract.AnnotationNodes] != "n1,n2" || len(got.Status.LoadBalancer.Ingress) != 2 {
			t.Errorf("published Service: finalizers %v, annotations %v, ingress %v", got.Finalizers, got.Annotations, got.Status.LoadBalancer.Ingress)
		}
		if msg := conditionMessage(t, f, ctx); !strings.Contains(msg, "n1") || !strings.Contains(msg, "n2") {
			t.Errorf("ProxiesScheduled says %q; the conditions held back must come with the first address", msg)
		}
	})
	t.Run("first address waits at most statusSettle", func(t *testing.T) {
		svc := newService("web")
		f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), notReadyPod(svc, "n2"))
		c := f.controller(ctx)
		optimisticServices(t, f)
		now := testNow
		c.now = func() time.Time { return now }
		if got := serviceWrites(t, ctx, f, c, svc, "first address, the other proxy starting"); got != nil {
			t.Errorf("first address: writes %q, want none yet", got)
		}
		now = now.Add(statusSettle)
		if got := serviceWrites(t, ctx, f, c, svc, "statusSettle passed"); !slices.Equal(got, both) {
			t.Errorf("statusSettle passed: writes %q, want %q", got, both)
		}
		if got := f.service(ctx, "shop", "web"); len(got.Status.LoadBalancer.Ingress) != 1 {
			t.Errorf("ingress %v, want n1's address", got.Status.LoadBalancer.Ingress)
		}
	})
	t.Run("return from all down written at once", func(t *testing.T) {
		// publish-none, every proxy down: nothing published, Healthy
		// False (AllDown). A proxy coming back is written at once, not
		// held for the other one still starting.
		svc := newService("web", func(s *corev1.Service) {
			s.Finalizers = []string{Finalizer}
			s.Annotations = map[string]string{contract.AnnotationAllDown: contract.AllDownPublishNone}
			s.Status.Conditions = []metav1.Condition{{Type: status.ConditionHealthy, Status: metav1.ConditionFalse, Reason: status.ReasonAllDown}}
		})
		f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), notReadyPod(svc, "n2"))
		c := f.controller(ctx)
		optimisticServices(t, f)
		// The finalizer is there: the status first, then the
		// annotations that repeat it.
		statusFirst := []string{"update services/status", "update services"}
		if got := serviceWrites(t, ctx, f, c, svc, "a proxy back"); !slices.Equal(got, statusFirst) {
			t.Errorf("a proxy back: writes %q, want %q at once", got, statusFirst)
		}
	})
	t.Run("problem written at once", func(t *testing.T) {
		svc := newService("web", func(s *corev1.Service) { s.Annotations = map[string]string{contract.AnnotationReplicas: "many"} })
		f := newFixture(t, svc, newNode("n1", "10.0.0.1"))
		c := f.controller(ctx)
		optimisticServices(t, f)
		if got := serviceWrites(t, ctx, f, c, svc, "invalid annotation"); !slices.Equal(got, both) {
			t.Errorf("writes %q, want %q: finalizer, then ConfigValid=False", got, both)
		}
		if got := f.service(ctx, "shop", "web"); !hasFinalizer(got) {
			t.Errorf("status written without the finalizer: %v", got.Finalizers)
		}
	})
	t.Run("unpublished after progressLag", func(t *testing.T) {
		svc := newService("web")
		f := newFixture(t, svc, newNode("n1", "10.0.0.1"), notReadyPod(svc, "n1"))
		c := f.controller(ctx)
		optimisticServices(t, f)
		now := testNow
		c.now = func() time.Time { return now }
		if got := serviceWrites(t, ctx, f, c, svc, "first sync"); got != nil {
			t.Errorf("first sync: writes %q, want none", got)
		}
		now = now.Add(progressLag - time.Second)
		if got := serviceWrites(t, ctx, f, c, svc, "within progressLag"); got != nil {
			t.Errorf("within progressLag: writes %q, want none", got)
		}
		now = now.Add(time.Second)
		if got := serviceWrites(t, ctx, f, c, svc, "progressLag passed"); !slices.Equal(got, both) {
			t.Errorf("progressLag passed: writes %q, want %q", got, both)
		}
		if msg := conditionMessage(t, f, ctx); !strings.Contains(msg, "n1") {
			t.Errorf("ProxiesScheduled says %q, want it to name n1", msg)
		}
	})
}

// TestStatusSettle: on a published Service, a change of conditions alone
// is written at most once per statusSettle; a change of addresses is
// written at once.
func TestStatusSettle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), newNode("n3", "10.0.0.3"), readyPod(svc, "n1"))
	c := f.controller(ctx)
	optimisticServices(t, f)
	now := testNow
	c.now = func() time.Time { return now }
	statusWrites := func(step string) int {
		n := 0
		for _, w := range serviceWrites(t, ctx, f, c, svc, step) {
			if w == "update services/status" {
				n++
			}
		}
		return n
	}
	if got := statusWrites("published"); got != 1 {
		t.Fatalf("published: %d status writes, want 1", got)
	}
	if err := c.podIndex.Add(notReadyPod(svc, "n2")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(statusSettle / 2)
	if got := statusWrites("second proxy scheduled right after"); got != 0 {
		t.Errorf("second proxy scheduled right after: %d status writes, want 0", got)
	}
	if msg := conditionMessage(t, f, ctx); strings.Contains(msg, "n2") {
		t.Errorf("condition written while settling: %q", msg)
	}
	now = now.Add(statusSettle / 2)
	if got := statusWrites("settle time passed"); got != 1 {
		t.Errorf("settle time passed: %d status writes, want 1", got)
	}
	if msg := conditionMessage(t, f, ctx); !strings.Contains(msg, "n2") {
		t.Errorf("condition %q does not name n2", msg)
	}
	if err := c.podIndex.Update(readyPod(svc, "n2")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Millisecond)
	if got := statusWrites("a proxy became ready: new address"); got != 1 {
		t.Errorf("a proxy became ready: %d status writes, want 1 at once", got)
	}
	if got := f.service(ctx, "shop", "web"); len(got.Status.LoadBalancer.Ingress) != 2 {
		t.Errorf("ingress %v, want n1's and n2's addresses", got.Status.LoadBalancer.Ingress)
	}
}

func conditionMessage(t *testing.T, f *fixture, ctx context.Context) string {
	t.Helper()
	for _, c := range f.service(ctx, "shop", "web").Status.Conditions {
		if c.Type == "pulselb.io/ProxiesScheduled" {
			return c.Message
		}
	}
	return ""
}

// TestOwnWritesDoNotRequeue: the events of the controller's own Service
// writes queue no sync (the sync that wrote carried on from what it wrote),
// while anyone else's update of the Service does.
func TestOwnWritesDoNotRequeue(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	c := f.controller(ctx)
	optimisticServices(t, f)
	// The fake clientset sends a watch event before its update returns;
	// the API server's come after its response, as they do here while
	// the sync holds delivering.
	var delivering sync.RWMutex
	f.client.PrependWatchReactor("services", func(a core.Action) (bool, watch.Interface, error) {
		w, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		out := make(chan watch.Event)
		go func() {
			defer close(out)
			for ev := range w.ResultChan() {
				delivering.RLock()
				select {
				case out <- ev:
				case <-ctx.Done():
				}
				delivering.RUnlock()
			}
		}()
		return true, watch.NewProxyWatcher(out), nil
	})
	// Only the Services' informer runs: the other caches stay as the
	// fixture filled them, so that no event but the Services' queues web
	// (the Deployment the sync creates would, rightly).
	services := f.cluster.Core().V1().Services().Informer()
	go services.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), services.HasSynced) {
		t.Fatal("services' informer did not sync")
	}
	// barrier creates a Service of its own and takes the queue's items
	// until it was queued, then says whether web was among them. Events
	// reach the handlers in the order the API server sent them, so every
	// event before the barrier's has been handled by then.
	barriers := 0
	barrier := func() (webQueued bool) {
		t.Helper()
		barriers++
		b := newService(fmt.Sprintf("barrier-%d", barriers))
		if _, err := f.client.CoreV1().Services(b.Namespace).Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for c.queue.Len() > 0 {
				k, _ := c.queue.Get()
				c.queue.Done(k)
				c.queue.Forget(k)
				webQueued = webQueued || k == key(svc)
				if k == key(b) {
					return webQueued
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s not queued within 10s", b.Name)
		return false
	}
	barrier() // the informer's initial events

	delivering.Lock()
	err := c.sync(ctx, key(svc))
	delivering.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	got := f.service(ctx, "shop", "web")
	if got.ResourceVersion != "3" {
		t.Fatalf("after the sync: resourceVersion %s, want 3 (two writes)", got.ResourceVersion)
	}
	if barrier() {
		t.Error("the controller's own two writes of web queued it again")
	}
	got = got.DeepCopy()
	got.Labels = map[string]string{"touched": "yes"}
	if _, err := f.client.CoreV1().Services(got.Namespace).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !barrier() {
		t.Error("another writer's update of web did not queue it")
	}
}

// TestFailoverWritesStatusFirst: a published Service that loses a node has
// its status written before the annotations that repeat it, so the
// failover reaches the status one round trip sooner; when the annotations'
// update then fails, the status stays written and the retry writes only
// the annotations.
func TestFailoverWritesStatusFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"), readyPod(svc, "n1"), readyPod(svc, "n2"))
	c := f.controller(ctx)
	optimisticServices(t, f)
	if got := serviceWrites(t, ctx, f, c, svc, "publish"); !slices.Equal(got, []string{"update services", "update services/status"}) {
		t.Fatalf("publish: writes %q, want the finalizer's update first", got)
	}
	f.events()

	failAnnotations := true
	f.client.PrependReactor("update", "services", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "" && failAnnotations {
			failAnnotations = false
			return true, nil, apierrors.NewServiceUnavailable("injected")
		}
		return false, nil, nil
	})
	if err := c.podIndex.Update(notReadyPod(svc, "n2")); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := c.sync(ctx, key(svc)); err == nil {
		t.Fatal("sync with the annotations' update failing returned no error")
	}
	got := f.service(ctx, "shop", "web")
	if len(got.Status.LoadBalancer.Ingress) != 1 || got.Status.LoadBalancer.Ingress[0].IP != "10.0.0.1" {
		t.Errorf("after the failed annotations' update the ingress is %v, want n1's address alone", got.Status.LoadBalancer.Ingress)
	}
	if got.Annotations[contract.AnnotationNodes] != "n1,n2" {
		t.Errorf("annotation %s = %q before the retry, want the old n1,n2", contract.AnnotationNodes, got.Annotations[contract.AnnotationNodes])
	}
	if got := serviceWrites(t, ctx, f, c, svc, "retry"); !slices.Equal(got, []string{"update services"}) {
		t.Errorf("retry: writes %q, want the annotations' update alone", got)
	}
	if got := f.service(ctx, "shop", "web"); got.Annotations[contract.AnnotationNodes] != "n1" {
		t.Errorf("after the retry annotation %s = %q, want n1", contract.AnnotationNodes, got.Annotations[contract.AnnotationNodes])
	}
}
