package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
)

// fakeRole judges the nodes in down failed; pods maps pod names to nodes.
type fakeRole struct {
	pods map[string]string
	down map[string]bool
}

func (r fakeRole) NodeDown(node string) bool { return r.down[node] }
func (r fakeRole) PodNode(name string) (string, bool) {
	n, ok := r.pods[name]
	return n, ok
}

func leaderLease(holder string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: "pulselb-controller"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](3)},
	}
}

func testElection(t *testing.T, objs ...runtime.Object) (*election, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	cfg := electionConfig{enabled: true, namespace: "pulselb-system", lease: "pulselb-controller",
		duration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	return newElection(cfg, client, "pulselb-controller-b"), client
}

// runWatch runs watchLeader after one round of verdicts and returns what it
// returned, or false when it is still waiting after a short while.
func runWatch(t *testing.T, e *election, role leaderRole) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	e.poke()
	return e.watchLeader(ctx, role, record.NewFakeRecorder(10))
}

func TestStandbyTakesLeaseFromFailedNode(t *testing.T) {
	const holder = "pulselb-controller-a_x7k2m9pq"
	role := fakeRole{pods: map[string]string{"pulselb-controller-a": "node-1"}, down: map[string]bool{"node-1": true}}

	t.Run("LeaderNodeDown", func(t *testing.T) {
		e, client := testElection(t, leaderLease(holder))
		var took int
		e.tookOver = func() { took++ }
		e.state.observe(holder, false) // as the elector's last read
		if !runWatch(t, e, role) {
			t.Fatal("the standby did not take the Lease from a leader on a failed node")
		}
		l, err := client.CoordinationV1().Leases("pulselb-system").Get(t.Context(), "pulselb-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *l.Spec.HolderIdentity; got != e.state.identity {
			t.Errorf("holder %q, want %q", got, e.state.identity)
		}
		if got := *l.Spec.LeaseTransitions; got != 4 {
			t.Errorf("leaseTransitions %d, want 4", got)
		}
		if took != 1 {
			t.Errorf("counted %d takeovers, want 1", took)
		}
	})
	t.Run("LeaderNodeUp", func(t *testing.T) {
		e, client := testElection(t, leaderLease(holder))
		e.state.observe(holder, false)
		if runWatch(t, e, fakeRole{pods: role.pods}) {
			t.Fatal("took the Lease from a leader whose node is up")
		}
		for _, a := range client.Actions() {
			if a.GetVerb() == "update" {
				t.Errorf("wrote the Lease: %v", a)
			}
		}
	})
	t.Run("LeaderPodUnknown", func(t *testing.T) {
		// A leader outside the cluster, or of a version that named no pod.
		e, _ := testElection(t, leaderLease("laptop_abc"))
		e.state.observe("laptop_abc", false)
		if runWatch(t, e, role) {
			t.Fatal("took the Lease from a leader whose node is not known")
		}
	})
	t.Run("LeaseChangedMeanwhile", func(t *testing.T) {
		// Another replica took it first: the write carries the version
		// read and fails; nothing is taken.
		e, client := testElection(t, leaderLease(holder))
		e.state.observe(holder, false)
		client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "pulselb-controller", errors.New("changed"))
		})
		if runWatch(t, e, role) {
			t.Fatal("took a Lease whose write conflicted")
		}
	})
	t.Run("HolderMovedOn", func(t *testing.T) {
		// The Lease now names a leader elsewhere than the one judged.
		e, _ := testElection(t, leaderLease("pulselb-controller-c_abc"))
		e.state.observe(holder, false)
		if runWatch(t, e, role) {
			t.Fatal("took a Lease that a leader on a healthy node holds")
		}
	})
	t.Run("Leading", func(t *testing.T) {
		e, _ := testElection(t, leaderLease(holder))
		e.state.observe(holder, false)
		e.state.setLeading(true)
		if runWatch(t, e, role) {
			t.Fatal("a leader took the Lease")
		}
	})
}

// TestRestartedLeaderTakesItsPodsLease: a leader whose process exited (a
// crash, or the lead given up while the API server was away) is replaced
// by its pod's next process, which takes the Lease at once rather than
// leave the Services without a leader until it lapses; only a Lease held in
// this pod's name, and only when the pod's name was given.
func TestRestartedLeaderTakesItsPodsLease(t *testing.T) {
	const previous = "pulselb-controller-b_q8w1e2r3" // testElection's pod, an earlier process
	healthy := fakeRole{pods: map[string]string{"pulselb-controller-b": "node-2", "pulselb-controller-a": "node-1"}}

	t.Run("PreviousProcess", func(t *testing.T) {
		e, client := testElection(t, leaderLease(previous))
		var took int
		e.tookOver = func() { took++ }
		e.state.observe(previous, false)
		if !runWatch(t, e, healthy) {
			t.Fatal("the restarted replica did not take the Lease its pod's previous process held")
		}
		l, err := client.CoordinationV1().Leases("pulselb-system").Get(t.Context(), "pulselb-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *l.Spec.HolderIdentity; got != e.state.identity {
			t.Errorf("holder %q, want %q", got, e.state.identity)
		}
		if took != 0 {
			t.Errorf("counted %d takeovers from failed nodes, want 0", took)
		}
	})
	t.Run("OtherPod", func(t *testing.T) {
		e, client := testElection(t, leaderLease("pulselb-controller-a_x7k2m9pq"))
		e.state.observe("pulselb-controller-a_x7k2m9pq", false)
		if runWatch(t, e, healthy) {
			t.Fatal("took the Lease from another pod's leader on a healthy node")
		}
		for _, a := range client.Actions() {
			if a.GetVerb() == "update" {
				t.Errorf("wrote the Lease: %v", a)
			}
		}
	})
	t.Run("PodNamePrefix", func(t *testing.T) {
		// pulselb-controller-b2 is another pod, whose name starts with this one's.
		const other = "pulselb-controller-b2_x7k2m9pq"
		e, _ := testElection(t, leaderLease(other))
		e.state.observe(other, false)
		if runWatch(t, e, healthy) {
			t.Fatal("took the Lease from a pod whose name only starts with this pod's")
		}
	})
	t.Run("HostName", func(t *testing.T) {
		// Without --pod-name the host name stands in, which other
		// processes may share: no takeover.
		client := fake.NewClientset(leaderLease("laptop_abc"))
		cfg := electionConfig{enabled: true, namespace: "pulselb-system", lease: "pulselb-controller",
			duration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
		e := newElection(cfg, client, "")
		e.state.identity = "laptop_def"
		e.state.observe("laptop_abc", false)
		if runWatch(t, e, healthy) {
			t.Fatal("took the Lease from a process that only shares the host name")
		}
	})
}

func TestFence(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &leaderState{identity: "me_1", window: 4 * time.Second, now: func() time.Time { return now }}
	if s.mayWrite() {
		t.Fatal("a standby may write")
	}
	s.observe("me_1", true)
	s.setLeading(true)
	if !s.mayWrite() {
		t.Fatal("a leader that just renewed may not write")
	}
	now = now.Add(3 * time.Second)
	s.observe("me_1", false) // a read of its own Lease is no renewal
	if !s.mayWrite() {
		t.Fatal("a leader 3s after renewing may not write")
	}
	now = now.Add(2 * time.Second)
	if s.mayWrite() {
		t.Fatal("a leader that has not renewed for 5s (window 4s) may write")
	}
	s.observe("me_1", true)
	if !s.mayWrite() {
		t.Fatal("a leader that renewed again may not write")
	}
	s.observe("other_2", false)
	if s.mayWrite() {
		t.Fatal("a leader that saw another holder may write")
	}
	s.observe("", false) // released by a leader that came back
	if s.mayWrite() {
		t.Fatal("a leader whose Lease shows no holder may write")
	}
	s.observe("me_1", true)
	if !s.mayWrite() {
		t.Fatal("a leader that holds the Lease again, renewed, may not write")
	}

	var fenced int
	closed := fence{next: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK}, nil
	}), open: func() bool { return false }, fenced: func() { fenced++ }}
	for method, allowed := range map[string]bool{http.MethodGet: true, http.MethodPut: false, http.MethodPatch: false,
		http.MethodPost: false, http.MethodDelete: false} {
		req, _ := http.NewRequest(method, "https://198.18.0.1/api/v1/namespaces/shop/services/web/status", nil)
		_, err := closed.RoundTrip(req)
		if allowed != (err == nil) {
			t.Errorf("%s through a closed fence: error %v", method, err)
		}
	}
	if fenced != 4 {
		t.Errorf("counted %d fenced writes, want 4", fenced)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestIdentityPod(t *testing.T) {
	id := leaderIdentity("pulselb-controller-7d9f-abcde")
	if got := identityPod(id); got != "pulselb-controller-7d9f-abcde" {
		t.Errorf("identityPod(%q) = %q", id, got)
	}
	if got := identityPod("laptop"); got != "laptop" {
		t.Errorf("identityPod(laptop) = %q", got)
	}
}

// A standby that takes the Lease leads at once and may write for as long as
// it renews: the fence stays open past several lease durations.
func TestTakeoverLeadsAndStaysUnfenced(t *testing.T) {
	const holder = "pulselb-controller-a_x7k2m9pq"
	client := fake.NewClientset(leaderLease(holder))
	cfg := electionConfig{enabled: true, namespace: "pulselb-system", lease: "pulselb-controller",
		duration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 300 * time.Millisecond}
	e := newElection(cfg, client, "pulselb-controller-b")
	role := fakeRole{pods: map[string]string{"pulselb-controller-a": "node-1"}, down: map[string]bool{"node-1": true}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	led := make(chan struct{})
	var leading sync.Once
	done := make(chan int, 1)
	go func() {
		done <- e.lead(ctx, cancel, role, record.NewFakeRecorder(100), func(ctx context.Context) {
			// A term lost to a slow machine is followed by another.
			leading.Do(func() { close(led) })
			<-ctx.Done()
		})
	}()
	// Verdict rounds, as the controller's health loop makes them.
	go wait.UntilWithContext(ctx, func(context.Context) { e.poke() }, 100*time.Millisecond)
	select {
	case <-led:
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not lead after taking the Lease")
	}
	deadline := time.Now().Add(3 * cfg.duration)
	for time.Now().Before(deadline) {
		if !e.mayWrite() {
			t.Fatalf("the new leader is fenced %s after it started leading", time.Until(deadline))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
}

// syncRole is a leaderRole whose failed nodes change while it is read.
type syncRole struct {
	pods map[string]string
	mu   sync.Mutex
	down map[string]bool
}

func (r *syncRole) NodeDown(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[node]
}

func (r *syncRole) PodNode(name string) (string, bool) {
	n, ok := r.pods[name]
	return n, ok
}

func (r *syncRole) fail(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down[node] = true
}

// TestLeaderThatLostTheLeaseStandsBy: a leader whose Lease another replica
// took ends its term and stands by, rather than exit; once the new
// holder's node fails, it takes the Lease back and leads a second term.
// The fault soak found the exit's cost: the replica that had lost the lead
// during its node's cut was restarting when the new leader's node was cut.
func TestLeaderThatLostTheLeaseStandsBy(t *testing.T) {
	const other = "pulselb-controller-a_x7k2m9pq"
	client := fake.NewClientset()
	cfg := electionConfig{enabled: true, namespace: "pulselb-system", lease: "pulselb-controller",
		duration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 200 * time.Millisecond}
	e := newElection(cfg, client, "pulselb-controller-b")
	role := &syncRole{pods: map[string]string{"pulselb-controller-a": "node-1"}, down: map[string]bool{}}
	// While another replica holds the Lease, this one's writes of it are
	// refused, as the API server refuses a write from an older version
	// (the fake clientset checks none).
	var stolen atomic.Bool
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if stolen.Load() && ptr.Deref(l.Spec.HolderIdentity, "") == e.state.identity {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.Name, errors.New("changed"))
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	terms := make(chan context.Context, 4)
	done := make(chan int, 1)
	go func() {
		done <- e.lead(ctx, cancel, role, record.NewFakeRecorder(100), func(ctx context.Context) {
			terms <- ctx
			<-ctx.Done()
		})
	}()
	go wait.UntilWithContext(ctx, func(context.Context) { e.poke() }, 100*time.Millisecond)
	next := func(what string) context.Context {
		t.Helper()
		select {
		case term := <-terms:
			return term
		case code := <-done:
			t.Fatalf("lead returned %d, want it %s", code, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("no term %s", what)
		}
		return nil
	}
	first := next("to lead at first")

	// Another replica takes the Lease, and keeps it renewed.
	stolen.Store(true)
	leases := client.CoordinationV1().Leases("pulselb-system")
	for first.Err() == nil {
		l, err := leases.Get(ctx, "pulselb-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(other), &now
		l.Spec.LeaseDurationSeconds = ptr.To[int32](2)
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		select {
		case <-first.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case code := <-done:
		t.Fatalf("lead returned %d after the lead was lost, want it to stand by", code)
	case <-time.After(300 * time.Millisecond):
	}
	if e.mayWrite() {
		t.Error("the replica that lost the Lease may still write")
	}

	// The new holder's node fails: the standby takes the Lease back.
	stolen.Store(false)
	role.fail("node-1")
	second := next("to lead again once the holder's node failed")
	if second.Err() != nil {
		t.Fatal("the second term's context is done already")
	}
	l, err := leases.Get(ctx, "pulselb-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *l.Spec.HolderIdentity; got != e.state.identity {
		t.Errorf("holder %q, want %q", got, e.state.identity)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lead did not return after its context was done")
	}
}
