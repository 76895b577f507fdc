package planned

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

// drainOptions are the drains' bounds: kubectl drain's mechanism, a
// shorter retry after a 429 so that scenarios stay quick.
var drainOptions = cluster.DrainOptions{Timeout: 3 * time.Minute, RetryDelay: 2 * time.Second}

// Leader waits until one controller leads and returns it.
func (e *Env) Leader(ctx context.Context) (*Controller, error) {
	var leader *Controller
	err := e.waitFor(ctx, 30*time.Second, "a leading controller", func() (bool, error) {
		for _, c := range e.Controllers {
			if c.Leading() {
				leader = c
				return true, nil
			}
		}
		return false, nil
	})
	return leader, err
}

// other returns the controller that is not ctl.
func (e *Env) other(ctl *Controller) *Controller {
	return e.Controllers[1-ctl.index]
}

// restart stops ctl with SIGTERM, starts it with image, and waits until
// its DNS server answers for every Service again.
func (e *Env) restart(ctx context.Context, ctl *Controller, image string) error {
	if err := ctl.Stop(); err != nil {
		return err
	}
	if err := ctl.start(ctx, image); err != nil {
		return err
	}
	return e.waitFor(ctx, 60*time.Second, fmt.Sprintf("controller %d serving DNS", ctl.index), func() (bool, error) {
		if !ctl.Running() {
			return false, fmt.Errorf("controller %d exited; log %s", ctl.index, ctl.logPath)
		}
		for _, s := range e.Config.Services {
			if len(lookup(ctl.DNS, Name(s.Name))) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// RollProxies upgrades pulselb to proxy image image the way a rolling
// update of the controller's Deployment does, standby first, then the
// leader, and waits until every proxy pod runs image. The new leader
// rolls the proxies.
func (e *Env) RollProxies(ctx context.Context, image string) error {
	leader, err := e.Leader(ctx)
	if err != nil {
		return err
	}
	if err := e.restart(ctx, e.other(leader), image); err != nil {
		return err
	}
	if err := e.restart(ctx, leader, image); err != nil {
		return err
	}
	e.image = image
	return e.waitFor(ctx, 5*time.Minute, "every proxy pod running "+image, func() (bool, error) {
		for _, s := range e.Config.Services {
			pods := scenario.ListPods(ctx, e.Client, SystemNamespace, proxySelector(s.Name))
			if len(pods) == 0 {
				return false, nil
			}
			for _, p := range pods {
				if i := slices.IndexFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == proxyContainer }); i < 0 || p.Spec.Containers[i].Image != image {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// LabelNode sets a node label, or removes it when value is nil.
func (e *Env) LabelNode(ctx context.Context, node, label string, value *string) error {
	patch := map[string]any{"metadata": map[string]any{"labels": map[string]any{label: value}}}
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := e.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling node %s %s: %w", node, label, err)
	}
	return nil
}

// Maintain labels node pulselb.io/maintenance and waits until pulselb
// says it is safe to drain (node condition pulselb.io/ProxiesDrained
// True) and no Service publishes its IP.
func (e *Env) Maintain(ctx context.Context, node string) error {
	if err := e.LabelNode(ctx, node, contract.LabelMaintenance, ptr.To("true")); err != nil {
		return err
	}
	ip := e.nodeIP[node]
	return e.waitFor(ctx, 2*time.Minute, node+" in maintenance: "+conditionProxiesDrained+"=True and its IP in no status", func() (bool, error) {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == conditionProxiesDrained && c.Status == corev1.ConditionTrue
		}) {
			return false, nil
		}
		for _, s := range e.Config.Services {
			in, err := e.Ingress(ctx, s.Name)
			if err != nil || slices.Contains(in, ip) {
				return false, nil
			}
		}
		return true, nil
	})
}

// EndMaintenance removes the maintenance label and uncordons the node.
func (e *Env) EndMaintenance(ctx context.Context, node string) error {
	if err := e.LabelNode(ctx, node, contract.LabelMaintenance, nil); err != nil {
		return err
	}
	return e.C.Cordon(ctx, node, false)
}

// MaintainAndDrain is `kubectl label node X pulselb.io/maintenance=true`
// and, once pulselb moved the proxies, `kubectl drain X`; then the node
// comes back.
func (e *Env) MaintainAndDrain(ctx context.Context, node string) error {
	if err := e.Maintain(ctx, node); err != nil {
		return err
	}
	if _, err := e.C.Drain(ctx, node, drainOptions); err != nil {
		return err
	}
	return e.EndMaintenance(ctx, node)
}

// DrainNodes drains nodes at the same time, as kubectl drain in several
// shells would, then uncordons them. It returns each drain's result.
func (e *Env) DrainNodes(ctx context.Context, nodes ...string) ([]cluster.DrainResult, error) {
	res := make([]cluster.DrainResult, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { res[i], errs[i] = e.C.Drain(ctx, n, drainOptions) })
	}
	wg.Wait()
	for _, n := range nodes {
		errs = append(errs, e.C.Cordon(ctx, n, false))
	}
	return res, errors.Join(errs...)
}

// SetReplicas sets a Service's pulselb.io/replicas annotation.
func (e *Env) SetReplicas(ctx context.Context, svc string, n int) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationReplicas: fmt.Sprint(n)}}})
	if err != nil {
		return err
	}
	if _, err := e.Client.CoreV1().Services(AppNamespace).Patch(ctx, svc, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting %s of %s to %d: %w", contract.AnnotationReplicas, svc, n, err)
	}
	return nil
}

// KillLeader kills the leading controller, waits until the standby leads,
// and starts the killed one again, as its Deployment would.
func (e *Env) KillLeader(ctx context.Context) error {
	leader, err := e.Leader(ctx)
	if err != nil {
		return err
	}
	if err := leader.Kill(); err != nil {
		return err
	}
	standby := e.other(leader)
	if err := e.waitFor(ctx, 30*time.Second, fmt.Sprintf("controller %d taking over", standby.index), func() (bool, error) {
		return standby.Leading(), nil
	}); err != nil {
		return err
	}
	return leader.start(ctx, e.image)
}

// RollProbers changes the prober DaemonSet's pod template and waits until
// every prober pod was replaced and is available.
func (e *Env) RollProbers(ctx context.Context) error {
	dss := e.Client.AppsV1().DaemonSets(SystemNamespace)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"pulselb.io/test-rolled-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	ds, err := dss.Patch(ctx, deploy.ProberName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("rolling the prober DaemonSet: %w", err)
	}
	gen := ds.Generation
	return e.waitFor(ctx, 5*time.Minute, "the prober DaemonSet rolled out", func() (bool, error) {
		ds, err := dss.Get(ctx, deploy.ProberName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return daemonSetRolledOut(ds, gen) && len(scenario.ListPods(ctx, e.Client, SystemNamespace, "app.kubernetes.io/name="+deploy.ProberName)) == int(ds.Status.DesiredNumberScheduled), nil
	})
}

// daemonSetRolledOut is `kubectl rollout status`'s test for a DaemonSet.
func daemonSetRolledOut(ds *appsv1.DaemonSet, gen int64) bool {
	s := ds.Status
	return s.ObservedGeneration >= gen && s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
		s.NumberAvailable == s.DesiredNumberScheduled && s.NumberUnavailable == 0
}

// AddService creates a Service that is not in the Config (no client
// measures it) and waits until it is settled: published on its ready
// proxies' nodes, in status and DNS.
func (e *Env) AddService(ctx context.Context, s ServiceConfig) error {
	if err := e.createService(ctx, s); err != nil {
		return err
	}
	return e.waitFor(ctx, 3*time.Minute, "service "+s.Name+" settled", func() (bool, error) {
		n, err := e.replicas(ctx, s.Name)
		if err != nil {
			return false, nil
		}
		why, err := e.settled(ctx, s.Name, n)
		return why == "" && err == nil, nil
	})
}

// DeleteService deletes a Service made by AddService and waits until its
// proxies are gone.
func (e *Env) DeleteService(ctx context.Context, name string) error {
	if err := e.Client.CoreV1().Services(AppNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting service %s: %w", name, err)
	}
	return e.waitFor(ctx, 2*time.Minute, "service "+name+"'s proxies gone", func() (bool, error) {
		return len(scenario.ListPods(ctx, e.Client, SystemNamespace, proxySelector(name))) == 0, nil
	})
}

// ChangePort changes the port of a Service's only port, as `kubectl edit`
// would; its target stays.
func (e *Env) ChangePort(ctx context.Context, name string, port int32) error {
	svcs := e.Client.CoreV1().Services(AppNamespace)
	s, err := svcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting service %s: %w", name, err)
	}
	s.Spec.Ports[0].Port = port
	if _, err := svcs.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("changing the port of service %s to %d: %w", name, port, err)
	}
	return nil
}

// Answers sends one request to ip:port from the client namespace: an HTTP
// GET over TCP, or a datagram over UDP that the backend must echo.
func Answers(ip string, port int32, proto corev1.Protocol) error {
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	return InClientNamespace(func() error {
		if proto == corev1.ProtocolUDP {
			conn, err := net.DialTimeout("udp", addr, time.Second)
			if err != nil {
				return err
			}
			defer conn.Close()
			if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
				return err
			}
			const msg = "planned"
			if _, err := conn.Write([]byte(msg)); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, err := conn.Read(buf)
			if err != nil {
				return fmt.Errorf("udp %s: %w", addr, err)
			}
			if string(buf[:n]) != msg {
				return fmt.Errorf("udp %s echoed %q, want %q", addr, buf[:n], msg)
			}
			return nil
		}
		// Dialled on this thread, in the namespace: an http.Client would
		// dial from another goroutine, maybe outside it.
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
			return fmt.Errorf("http %s: %w", addr, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return fmt.Errorf("http %s: %w", addr, err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return fmt.Errorf("http %s: %w", addr, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("http %s: %s", addr, resp.Status)
		}
		return nil
	})
}

// WaitProxiesRolled waits until a Service's proxy Deployment has rolled out
// its latest template: every proxy pod is of it and ready, none
// terminating.
func (e *Env) WaitProxiesRolled(ctx context.Context, name string, timeout time.Duration) error {
	return e.waitFor(ctx, timeout, "the proxies of "+name+" rolled out", func() (bool, error) {
		deps, err := e.Client.AppsV1().Deployments(SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: proxySelector(name)})
		if err != nil || len(deps.Items) != 1 {
			return false, nil
		}
		d := &deps.Items[0]
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		st := d.Status
		rolled := st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want
		return rolled && len(scenario.ListPods(ctx, e.Client, SystemNamespace, proxySelector(name))) == int(want), nil
	})
}
