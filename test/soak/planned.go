package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// The planned changes' names and bounds.
const (
	labelMaintenance        = "pulselb.io/maintenance"
	conditionProxiesDrained = "pulselb.io/ProxiesDrained"
	controllerName          = "pulselb-controller"
	// upgradeImage is the other tag an Upgrade switches between.
	upgradeImage = Image + "-next"
	// drainedBound is how long pulselb may take to say a node in
	// maintenance is drained: its proxies' drain delay (TTL + 10 s) and
	// their replacements' start, with room for a loaded machine.
	drainedBound = 2 * time.Minute
	// rolloutBound is how long an Upgrade may take to replace every pod.
	rolloutBound = 4 * time.Minute
)

// drainOptions are kubectl drain's, with a shorter retry after a 429.
var drainOptions = cluster.DrainOptions{Timeout: 2 * time.Minute, RetryDelay: 2 * time.Second}

// maintain is a planned node change as operations.md describes it:
// label the node pulselb.io/maintenance, wait until pulselb says its
// proxies are gone (condition pulselb.io/ProxiesDrained True, its address
// in no status), drain it, and after the hold remove the label and
// uncordon it. The node then counts as healed: the daemonset Service must
// take it back within the heal bound.
func (s *state) maintain(ctx context.Context, f Fault) error {
	defer s.takeSlot(f)()
	node, ip := f.Node, s.e.nodeIP[f.Node]
	if err := s.labelMaintenance(ctx, node, true); err != nil {
		return err
	}
	s.mu.Lock()
	s.maintained[node] = true
	s.mu.Unlock()
	defer func() {
		// Undone even when the run is cut short.
		ctx := context.WithoutCancel(ctx)
		if err := s.labelMaintenance(ctx, node, false); err != nil {
			s.event("%v", err)
		}
		if err := s.e.c.Cordon(ctx, node, false); err != nil {
			s.event("%v", err)
		}
		s.mu.Lock()
		delete(s.maintained, node)
		s.healed[node] = time.Now()
		s.mu.Unlock()
		s.event("%s out of maintenance", node)
	}()
	start := time.Now()
	var why string
	err := scenario.Poll(ctx, drainedBound, node+" drained by pulselb", func() bool {
		why = s.drainedWhyNot(ctx, node, ip)
		return why == ""
	})
	if err != nil {
		s.fail(fmt.Sprintf("%s/%s/%d", InvPlannedCompletes, node, start.UnixNano()), InvPlannedCompletes,
			fmt.Sprintf("%s in maintenance since +%s is not drained after %s: %s", node, s.since(start), drainedBound, why))
		return nil
	}
	s.event("%s drained by pulselb in %s; kubectl drain", node, time.Since(start).Round(time.Millisecond))
	res, err := s.e.c.Drain(ctx, node, drainOptions)
	if err != nil {
		s.fail(fmt.Sprintf("%s/%s/%d", InvPlannedCompletes, node, start.UnixNano()), InvPlannedCompletes,
			fmt.Sprintf("draining %s after pulselb moved its proxies: %v", node, err))
		return nil
	}
	s.event("%s drained (evicted %v, %d refusals)", node, res.Evicted, res.Refused)
	hold(ctx, f.Hold)
	return nil
}

// drainedWhyNot says why node is not drained yet: its ProxiesDrained
// condition not True, or its address ip still in a status. "" when it is.
func (s *state) drainedWhyNot(ctx context.Context, node, ip string) string {
	n, err := s.e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == conditionProxiesDrained })
	if i < 0 {
		return "no " + conditionProxiesDrained + " condition"
	}
	if c := n.Status.Conditions[i]; c.Status != corev1.ConditionTrue {
		return fmt.Sprintf("%s %s: %s", conditionProxiesDrained, c.Status, c.Message)
	}
	for _, svc := range services {
		if slices.Contains(s.e.ingress(ctx, svc.Name), ip) {
			return fmt.Sprintf("%s/%s still publishes %s", Namespace, svc.Name, ip)
		}
	}
	return ""
}

// labelMaintenance sets or removes node's maintenance label.
func (s *state) labelMaintenance(ctx context.Context, node string, on bool) error {
	var v any
	if on {
		v = "true"
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{labelMaintenance: v}}})
	if err != nil {
		return err
	}
	// Retried while the API server restarts or etcd is paused.
	var perr error
	if err := scenario.Poll(ctx, time.Minute, "labelling "+node, func() bool {
		_, perr = s.e.c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
		return perr == nil
	}); err != nil {
		return fmt.Errorf("setting %s=%v on %s: %w (%w)", labelMaintenance, v, node, err, perr)
	}
	return nil
}

// upgrade applies deploy/base's controller Deployment and prober
// DaemonSet again with the other image, as a user upgrading pulselb does
// (the rest of the install is unchanged; pulselb-dns keeps the NodePort
// the soak gave it), and waits until every controller, prober and proxy
// pod runs it. The controllers' roll stalls the control plane: a status
// may not follow a cut node until they are rolled and a leader took over.
func (s *state) upgrade(ctx context.Context) error {
	s.mu.Lock()
	next := upgradeImage
	if s.image == upgradeImage {
		next = Image
	}
	s.mu.Unlock()
	dir, err := os.MkdirTemp(s.e.c.Dir, "soak-upgrade-")
	if err != nil {
		return err
	}
	objs, err := deploy.Overlay(s.cfg.Base, next, dir)
	if err != nil {
		return err
	}
	a, err := deploy.NewApplier(s.e.c.RESTConfig)
	if err != nil {
		return err
	}
	s.event("upgrade to %s", next)
	resume := s.stall()
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	start := time.Now()
	for _, o := range objs {
		if k := o.GetKind(); k != "Deployment" && k != "DaemonSet" {
			continue
		}
		var aerr error
		// Retried while the API server restarts or etcd is paused.
		if err := scenario.Poll(ctx, time.Minute, "applying "+o.GetName(), func() bool {
			_, aerr = a.Apply(ctx, o, false)
			return aerr == nil
		}); err != nil {
			return fmt.Errorf("%w: %w", err, aerr)
		}
	}
	var why string
	roll := func(what string, done func() string) bool {
		err := scenario.Poll(ctx, rolloutBound-time.Since(start), what, func() bool {
			why = done()
			return why == ""
		})
		if err != nil && ctx.Err() != nil {
			return false // the run was stopped, not the upgrade
		}
		if err != nil {
			s.fail(fmt.Sprintf("%s/upgrade/%d", InvPlannedCompletes, start.UnixNano()), InvPlannedCompletes,
				fmt.Sprintf("the upgrade to %s begun at +%s: %s not done within %s: %s", next, s.since(start), what, rolloutBound, why))
			return false
		}
		s.event("upgrade: %s after %s", what, time.Since(start).Round(time.Millisecond))
		return true
	}
	if !roll("controllers rolled", func() string { return s.controllersRolledWhyNot(ctx, next) }) {
		return nil
	}
	resume()
	resumed = true
	s.mu.Lock()
	// The new controllers took the Lease: the leader gap is over when the
	// leader bound after now is.
	s.leaderKilled = time.Now()
	s.mu.Unlock()
	if !roll("probers and proxies rolled", func() string { return s.podsRolledWhyNot(ctx, next) }) {
		return nil
	}
	s.mu.Lock()
	s.image = next
	s.mu.Unlock()
	return nil
}

// controllersRolledWhyNot says what is not yet rolled to image in the
// controller Deployment (kubectl rollout status's test). "" when all is.
func (s *state) controllersRolledWhyNot(ctx context.Context, image string) string {
	dep, err := s.e.c.Client.AppsV1().Deployments(scenario.SystemNamespace).Get(ctx, controllerName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if want := *dep.Spec.Replicas; dep.Status.ObservedGeneration < dep.Generation || dep.Status.UpdatedReplicas != want ||
		dep.Status.Replicas != want || dep.Status.AvailableReplicas != want {
		return fmt.Sprintf("controller Deployment: %d replicas, %d updated, %d available", dep.Status.Replicas, dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas)
	}
	return s.podsOnWhyNot(ctx, scenario.ControllerSelector, image)
}

// podsRolledWhyNot says what is not yet rolled to image: the prober
// DaemonSet, or a prober or proxy pod. "" when all is.
func (s *state) podsRolledWhyNot(ctx context.Context, image string) string {
	ds, err := s.e.c.Client.AppsV1().DaemonSets(scenario.SystemNamespace).Get(ctx, deploy.ProberName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !daemonSetRolledOut(ds) {
		return fmt.Sprintf("prober DaemonSet: %d desired, %d updated, %d available", ds.Status.DesiredNumberScheduled, ds.Status.UpdatedNumberScheduled, ds.Status.NumberAvailable)
	}
	if why := s.podsOnWhyNot(ctx, scenario.ProberSelector, image); why != "" {
		return why
	}
	return s.podsOnWhyNot(ctx, labelServiceNS+"="+Namespace, image)
}

// daemonSetRolledOut is kubectl rollout status's test for a DaemonSet.
func daemonSetRolledOut(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
		st.NumberAvailable == st.DesiredNumberScheduled && st.NumberUnavailable == 0
}

// podsOnWhyNot names a pod of selector in pulselb's namespace, old ones
// still terminating included, with a container not on image; "" when
// there is none and there are pods.
func (s *state) podsOnWhyNot(ctx context.Context, selector, image string) string {
	pods := scenario.ListPods(ctx, s.e.c.Client, scenario.SystemNamespace, selector)
	if len(pods) == 0 {
		return "no pods " + selector
	}
	for _, p := range pods {
		for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			if c.Image != image {
				return fmt.Sprintf("pod %s on %s runs %s", p.Name, p.Spec.NodeName, c.Image)
			}
		}
	}
	return ""
}
