package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
	"github.com/pulselb/pulselb/test/cluster"
)

// Forwarding by pod sysctls (the controller's --proxy-sysctls) on real
// kubelets: TestKubeletInstall's kubelets allow the forwarding sysctls on
// every node but sysctlRefusingNode.
const (
	forwardSysctl      = "net.ipv4.ip_forward"
	sysctlRefusingNode = "kubelet-3"
	// sysctlKubeletFlag is what the controller names for a kubelet that
	// refuses the sysctls.
	sysctlKubeletFlag = "--allowed-unsafe-sysctls=net.ipv4.ip_forward,net.ipv6.conf.all.forwarding"
)

// kubeletSysctlOptions are TestKubeletInstall's kubelet sysctl settings:
// the forwarding sysctls allowed on every kubelet node but
// sysctlRefusingNode. Without --proxy-sysctls nothing sets them.
func kubeletSysctlOptions(nodes int) map[string][]string {
	allowed := map[string][]string{}
	for i := 1; i <= nodes; i++ {
		if n := fmt.Sprintf("kubelet-%d", i); n != sysctlRefusingNode {
			allowed[n] = []string{forwardSysctl, "net.ipv6.conf.all.forwarding"}
		}
	}
	return allowed
}

// kubeletForwardingSysctls turns on --proxy-sysctls in the installed
// controller and serves the ns/web backends through Service "fwd" in
// daemonset mode, a proxy on every node: where the kubelet allows the
// sysctl, the proxy runs with no privileged container, in iptables mode
// (forwarding is on), and forwards; where it does not, the kubelet refuses
// the pod and the Service gets a SysctlForbidden Warning and a ConfigValid
// condition naming the kubelet flag, while the other proxies serve.
func kubeletForwardingSysctls(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	cs := c.Client
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep, err := cs.AppsV1().Deployments(systemNamespace).Get(ctx, "pulselb-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		args := dep.Spec.Template.Spec.Containers[0].Args
		i := slices.Index(args, "--proxy-sysctls=false")
		if i < 0 {
			return fmt.Errorf("the controller's args %q lack --proxy-sysctls=false", args)
		}
		args[i] = "--proxy-sysctls=true"
		_, err = cs.AppsV1().Deployments(systemNamespace).Update(ctx, dep, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("turning on --proxy-sysctls: %v", err)
	}
	// The Service comes once a controller with the flag leads: made by the
	// one before, its DaemonSet would start with proxy-init, and the
	// rollout to the new template, one node at a time, can stop for good
	// at the node whose kubelet refuses the sysctl.
	poll(ctx, t, 2*time.Minute, "the controllers rolled to --proxy-sysctls=true, one of them leading", func() bool {
		pods := listPods(ctx, t, cs, systemNamespace, "app.kubernetes.io/name=pulselb-controller")
		var names []string
		for _, p := range pods {
			if p.DeletionTimestamp != nil || !slices.Contains(p.Spec.Containers[0].Args, "--proxy-sysctls=true") || !contract.PodReady(&p) {
				return false
			}
			names = append(names, p.Name)
		}
		lease, err := cs.CoordinationV1().Leases(systemNamespace).Get(ctx, "pulselb-controller", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || len(names) == 0 {
			return false
		}
		holder := *lease.Spec.HolderIdentity
		return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(holder, n+"_") })
	})
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "fwd", Namespace: ns, Annotations: map[string]string{contract.AnnotationProxyMode: "daemonset"}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8081, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service fwd: %v", err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("pods in %s: %s", systemNamespace, describePods(ctx, cs, systemNamespace))
			t.Logf("controller logs:\n%s", controllerLogs(ctx, t, c))
		}
	}()
	const selector = proxyAppSelector + ",pulselb.io/service-namespace=shop,pulselb.io/service-name=fwd"

	t.Run("RefusedGivesEventAndCondition", func(t *testing.T) {
		var cond *metav1.Condition
		poll(ctx, t, 2*time.Minute, "fwd's ConfigValid False naming "+sysctlRefusingNode+" and the kubelet flag", func() bool {
			svc, err := cs.CoreV1().Services(ns).Get(ctx, "fwd", metav1.GetOptions{})
			if err != nil {
				return false
			}
			cond = meta.FindStatusCondition(svc.Status.Conditions, status.ConditionConfigValid)
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "InvalidConfig" &&
				strings.Contains(cond.Message, sysctlKubeletFlag) && strings.Contains(cond.Message, sysctlRefusingNode)
		})
		t.Logf("ConfigValid: %s", cond.Message)
		poll(ctx, t, 30*time.Second, "a SysctlForbidden Warning on fwd naming the kubelet flag", func() bool {
			l, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=fwd,reason=SysctlForbidden"})
			return err == nil && slices.ContainsFunc(l.Items, func(e corev1.Event) bool {
				return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, sysctlKubeletFlag)
			})
		})
	})

	t.Run("AllowedRunsUnprivilegedAndForwards", func(t *testing.T) {
		var ingress []string
		poll(ctx, t, 2*time.Minute, "fwd published on the 2 nodes whose kubelet allows the sysctl", func() bool {
			ingress = ingressIPs(ctx, cs, ns, "fwd")
			return len(ingress) == 2
		})
		// The status follows the probes, which find a node serving as soon
		// as its proxy forwards; the pod's Ready condition follows the
		// kubelet's readiness probe and the probed gate, up to a probe
		// period later.
		var pods []corev1.Pod
		poll(ctx, t, 30*time.Second, "2 fwd proxy pods ready", func() bool {
			pods = readyPods(ctx, t, cs, systemNamespace, selector)
			return len(pods) == 2
		})
		if len(pods) != 2 {
			t.Fatalf("%d fwd proxy pods ready, want 2", len(pods))
		}
		for _, p := range pods {
			if p.Spec.NodeName == sysctlRefusingNode {
				t.Errorf("proxy pod %s is ready on %s, whose kubelet refuses the sysctl", p.Name, p.Spec.NodeName)
			}
			if len(p.Spec.InitContainers) > 0 {
				t.Errorf("proxy pod %s has init containers %v, want none", p.Name, p.Spec.InitContainers)
			}
			for _, ctr := range p.Spec.Containers {
				if sc := ctr.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
					t.Errorf("proxy pod %s's container %s is privileged", p.Name, ctr.Name)
				}
			}
			if p.Spec.SecurityContext == nil || !slices.Contains(p.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: forwardSysctl, Value: "1"}) {
				t.Errorf("proxy pod %s sets no %s=1: %+v", p.Name, forwardSysctl, p.Spec.SecurityContext)
			}
			// Forwarding is on without proxy-init: the proxy chose
			// iptables mode, which it does only with forwarding on.
			proxyStartedInIptablesMode(t, c, p)
			out, err := c.PodExec(ctx, systemNamespace, p.Name, "cat", "/proc/sys/net/ipv4/ip_forward")
			if err != nil || strings.TrimSpace(string(out)) != "1" {
				t.Errorf("ip_forward in proxy pod %s: %q, %v; want 1", p.Name, out, err)
			}
		}
		clientReachesWebOn(ctx, t, c, ingress, 8081)
	})
}
