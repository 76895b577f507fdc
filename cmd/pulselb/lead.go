package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// How the controller replicas share the work (docs/architecture.md, "Leader
// election"): one holds the Lease and reconciles; every replica judges the
// probers' reports. A standby whose verdicts say the leader's node failed
// (its beacon Down by quorum, the verdict that fails any node over) takes
// the Lease at once instead of waiting for it to lapse, so the dead node's
// address leaves the status within the same bound whichever node died. A
// leader that was cut off but lives on is fenced: it writes nothing from
// the moment it sees another holder, nor while it has not renewed the
// Lease for fenceWindow, and its writes carry resourceVersions, so one it
// made from an older view conflicts instead of undoing the new leader's.

// leaderRole is what the standby needs of the controller: the verdicts on
// nodes, and where the holder of the Lease runs.
type leaderRole interface {
	NodeDown(node string) bool
	PodNode(name string) (string, bool)
}

// leaderState is what this replica knows of the Lease, from every read and
// write its elector makes through watchedLock, and whether it leads.
type leaderState struct {
	identity string
	window   time.Duration
	now      func() time.Time

	mu sync.Mutex
	// holder is the Lease's holder as last read or written.
	holder string
	// renewed is when this replica last wrote the Lease as its holder.
	renewed time.Time
	// leading is set while the controller runs as leader.
	leading bool
}

// observe records a read (wrote false) or a successful write of the Lease
// naming holder.
func (s *leaderState) observe(holder string, wrote bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holder = holder
	if holder == s.identity && wrote {
		s.renewed = s.now()
	}
}

func (s *leaderState) setLeading(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = on
}

// currentHolder returns the holder last seen, and whether this replica
// leads.
func (s *leaderState) currentHolder() (holder string, leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder, s.leading
}

// mayWrite reports whether this replica may write to the API server now:
// it leads, the Lease last read or written names it, and it renewed the
// Lease within the window. A leader that lost the Lease cannot renew it
// again; one whose Lease was only released (cleared by a leader that came
// back) writes again once it has renewed.
func (s *leaderState) mayWrite() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading && s.holder == s.identity && s.now().Sub(s.renewed) < s.window
}

// fenceWindow is how long after its last renewal a leader still writes:
// the renew deadline, after which client-go gives the lead up anyway. A
// shorter window fenced a healthy leader whose renewals were slow on a
// loaded API server (its readiness gates and status writes refused); a
// leader that is replaced is fenced as soon as it reads the Lease.
func fenceWindow(e electionConfig) time.Duration {
	return e.renewDeadline
}

// watchedLock is the elector's lock, telling state what each read and
// write of the Lease shows, and calling read, when set, after each read.
type watchedLock struct {
	resourcelock.Interface
	state *leaderState
	read  func()
}

func (l watchedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.state.observe(r.HolderIdentity, false)
		if l.read != nil {
			l.read()
		}
	}
	return r, raw, err
}

func (l watchedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	if err == nil {
		l.state.observe(r.HolderIdentity, true)
	}
	return err
}

func (l watchedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	if err == nil {
		l.state.observe(r.HolderIdentity, true)
	}
	return err
}

// errFenced is the error of a write refused by the fence.
var errFenced = errors.New("not written: this controller replica does not hold the leader Lease, or has not renewed it lately")

// fence refuses the requests that change something while open is false;
// reads and watches always pass. fenced counts the refusals.
type fence struct {
	next   http.RoundTripper
	open   func() bool
	fenced func()
}

func (f fence) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if !f.open() {
			if f.fenced != nil {
				f.fenced()
			}
			return nil, errFenced
		}
	}
	return f.next.RoundTrip(req)
}

// leaderIdentity is this replica's name in the Lease: its pod's name (the
// host name when not given), so that a standby can find the leader's node,
// and a random suffix, so that a restarted replica is a new holder.
func leaderIdentity(podName string) string {
	if podName == "" {
		podName, _ = os.Hostname()
	}
	return podName + "_" + rand.String(8)
}

// identityPod returns the pod named in a leaderIdentity.
func identityPod(identity string) string {
	if i := strings.LastIndexByte(identity, '_'); i > 0 {
		return identity[:i]
	}
	return identity
}

// election is one replica's part in the leader election.
type election struct {
	cfg    electionConfig
	client kubernetes.Interface
	state  *leaderState
	// pod is this replica's pod as given (--pod-name), "" when the host
	// name stands in for it: only a pod's name is known to be this
	// process' alone.
	pod string
	// judged is poked after each round of verdicts.
	judged chan struct{}
	// tookOver counts the Leases taken from a leader whose node failed.
	tookOver func()
}

func newElection(cfg electionConfig, client kubernetes.Interface, podName string) *election {
	return &election{
		cfg:    cfg,
		client: client,
		state:  &leaderState{identity: leaderIdentity(podName), window: fenceWindow(cfg), now: time.Now},
		pod:    podName,
		judged: make(chan struct{}, 1),
	}
}

// poke says a round of verdicts is done; it never blocks.
func (e *election) poke() {
	select {
	case e.judged <- struct{}{}:
	default:
	}
}

// mayWrite is the controller's fence: always open without leader election.
func (e *election) mayWrite() bool { return !e.cfg.enabled || e.state.mayWrite() }

func (e *election) lock(recorder resourcelock.EventRecorder) (resourcelock.Interface, error) {
	return resourcelock.New(resourcelock.LeasesResourceLock, e.cfg.namespace, e.cfg.lease,
		e.client.CoreV1(), e.client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: e.state.identity, EventRecorder: recorder})
}

// lead calls run while this replica holds the leader Lease (at once
// without leader election) until ctx is done, and returns the exit code.
// A term as leader ends when the Lease is lost (run's context is done, and
// lead waits for run to return); the replica is then a standby again,
// with its caches and verdicts warm, rather than a process that exits and
// waits for the kubelet to start it again: the fault soak found a node
// cut off right after the other replica's own cut had cost it the lead,
// with no standby left to take over for 15 s. A replica that lost the
// Lease writes nothing (the fence), and run's writes carry
// resourceVersions. While it waits, it takes the Lease from a leader whose
// node role judges failed, as a standby does.
func (e *election) lead(ctx context.Context, stop func(), role leaderRole, recorder record.EventRecorder, run func(context.Context)) int {
	logger := klog.FromContext(ctx)
	if !e.cfg.enabled {
		run(ctx)
		stop()
		return 0
	}
	identity := e.state.identity
	lock, err := e.lock(recorder)
	if err != nil {
		logger.Error(err, "Creating leader lock failed")
		return 1
	}
	for ctx.Err() == nil {
		electCtx, cancel := context.WithCancel(ctx)
		var started atomic.Bool
		// ran is closed when run returns; started says it was called.
		ran := make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			// Each read wakes watchLeader too: a holder that is this
			// pod's previous process needs no verdict to be replaced,
			// so the elector's first read after a restart is enough.
			Lock:            watchedLock{Interface: lock, state: e.state, read: e.poke},
			LeaseDuration:   e.cfg.duration,
			RenewDeadline:   e.cfg.renewDeadline,
			RetryPeriod:     e.cfg.retryPeriod,
			ReleaseOnCancel: true,
			Name:            e.cfg.lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					defer close(ran)
					started.Store(true)
					e.state.setLeading(true)
					logger.Info("Started leading", "identity", identity)
					run(ctx)
				},
				OnStoppedLeading: func() {
					e.state.setLeading(false)
					if started.Load() && ctx.Err() == nil {
						logger.Info("Lost leader lease", "identity", identity)
					}
				},
				OnNewLeader: func(id string) {
					if id != identity {
						logger.Info("New leader", "identity", id)
					}
				},
			},
		})
		if err != nil {
			cancel()
			logger.Error(err, "Creating leader elector failed")
			return 1
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if e.watchLeader(electCtx, role, recorder) {
				// The Lease is ours: stop waiting for it to lapse; the
				// next elector finds it so and leads at once.
				cancel()
			}
		}()
		le.Run(electCtx)
		cancel()
		<-done
		if started.Load() {
			// The elector calls run in a goroutine of its own: the term
			// is over once run has returned.
			<-ran
			if ctx.Err() == nil {
				logger.Info("Standing by after the lead was lost", "identity", identity)
			}
		}
	}
	stop()
	logger.Info("Stopped")
	return 0
}

// watchLeader waits, after each round of verdicts and each read of the
// Lease by the elector, until the Lease's holder
// runs on a node judged failed, or is this pod's previous process, and then
// takes the Lease. It returns true once the Lease is this replica's, false
// when ctx is done.
//
// A holder named after this pod is a process of this pod that has exited:
// a leader that crashed, or gave the lead up when it could not renew the
// Lease (an API server away for longer than the renew deadline) and exited
// to start clean. A pod runs one controller process, and no other pod can
// have its name, so that holder cannot be alive; waiting for its Lease to
// lapse would leave the Services without a leader for the lease duration
// after the restart (or after the API server's return, since a standby
// counts the duration from when it saw the last renewal). A leader that
// crashes at every start takes the Lease again each time, but the
// kubelet's restart back-off soon outlasts the Lease, and a standby takes
// it then.
func (e *election) watchLeader(ctx context.Context, role leaderRole, recorder record.EventRecorder) bool {
	logger := klog.FromContext(ctx)
	// Its own lock: a LeaseLock keeps the object it read last, and the
	// elector's is not safe to share.
	lock, err := e.lock(recorder)
	if err != nil {
		logger.Error(err, "Creating leader lock failed")
		return false
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-e.judged:
		}
		holder, leading := e.state.currentHolder()
		if leading || holder == "" || holder == e.state.identity {
			continue
		}
		previous := e.pod != "" && identityPod(holder) == e.pod
		node, ok := role.PodNode(identityPod(holder))
		if !previous && (!ok || !role.NodeDown(node)) {
			continue
		}
		from := "a leader whose node failed"
		if previous {
			from = "this pod's previous process"
		}
		if err := takeLease(ctx, lock, holder, e.state.identity, e.cfg.duration); err != nil {
			logger.Error(err, "Taking the leader Lease from "+from, "holder", holder, "node", node)
			continue
		}
		// Until the next elector reads it: no second takeover.
		e.state.observe(e.state.identity, false)
		logger.Info("Took the leader Lease from "+from, "holder", holder, "node", node, "identity", e.state.identity)
		if e.tookOver != nil && !previous {
			e.tookOver()
		}
		return true
	}
}

// takeLease makes identity the holder of the Lease behind lock if holder
// still holds it. The write carries the resourceVersion read, so it fails
// when anyone else wrote the Lease since.
func takeLease(ctx context.Context, lock resourcelock.Interface, holder, identity string, duration time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	r, _, err := lock.Get(ctx)
	if err != nil {
		return fmt.Errorf("reading the Lease: %w", err)
	}
	if r.HolderIdentity != holder {
		return fmt.Errorf("the Lease is now held by %q", r.HolderIdentity)
	}
	now := metav1.NewTime(time.Now())
	return lock.Update(ctx, resourcelock.LeaderElectionRecord{
		HolderIdentity:       identity,
		LeaseDurationSeconds: int(duration / time.Second),
		AcquireTime:          now,
		RenewTime:            now,
		LeaderTransitions:    r.LeaderTransitions + 1,
	})
}
