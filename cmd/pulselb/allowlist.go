package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/proxy"
)

// workloadRef names the proxy workload a proxy reads its allow-list from:
// "deployment/NAME" or "daemonset/NAME" (the value of --allow-list-from).
type workloadRef struct {
	kind, name string
}

func parseWorkloadRef(s string) (workloadRef, error) {
	kind, name, ok := strings.Cut(s, "/")
	kind = strings.ToLower(kind)
	if !ok || name == "" || (kind != "deployment" && kind != "daemonset") {
		return workloadRef{}, fmt.Errorf("want deployment/NAME or daemonset/NAME")
	}
	return workloadRef{kind: kind, name: name}, nil
}

func (r workloadRef) String() string { return r.kind + "/" + r.name }

// allowListNotFoundAfter is how long a proxy waits for its workload to be
// listed before it says so; it stays closed either way.
const allowListNotFoundAfter = 10 * time.Second

// watchAllowList keeps p's allow-list equal to the annotations of its
// workload ref in namespace, until ctx is done. It watches that one object
// (a field selector on its name), so the API server sends it nothing else,
// and applies every change as it arrives. Until the workload has been seen
// the proxy stays closed; a workload whose annotations do not parse closes
// it. When the workload is deleted the proxy keeps its list: its pods are
// going too. An unreachable API server leaves the list in force as it is
// (client-go retries the watch); nothing newer can exist meanwhile without
// the API server.
func watchAllowList(ctx context.Context, client kubernetes.Interface, namespace string, ref workloadRef, pod string, p *proxy.Proxy) {
	logger := klog.FromContext(ctx).WithValues("workload", ref.String(), "namespace", namespace)
	ctx = klog.NewContext(ctx, logger)
	report := func() {}
	if pod != "" {
		r := newConditionReporter(client, namespace, pod)
		go r.run(ctx)
		report = func() { r.set(allowListCondition(p)) }
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.name).String()
		}))
	var informer cache.SharedIndexInformer
	switch ref.kind {
	case "deployment":
		informer = factory.Apps().V1().Deployments().Informer()
	default:
		informer = factory.Apps().V1().DaemonSets().Informer()
	}
	apply := func(obj any) {
		var annotations map[string]string
		switch w := obj.(type) {
		case *appsv1.Deployment:
			annotations = w.Annotations
		case *appsv1.DaemonSet:
			annotations = w.Annotations
		default:
			return
		}
		defer report()
		a, err := proxy.AllowListFrom(annotations)
		if err != nil {
			p.RejectAllowList(ctx, fmt.Errorf("reading the allow-list of %s: %w", ref, err))
			return
		}
		// The error is logged, counted and makes the proxy unhealthy.
		_ = p.SetAllowList(ctx, a)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
	}); err != nil {
		p.RejectAllowList(ctx, fmt.Errorf("watching %s: %w", ref, err))
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	if len(informer.GetStore().ListKeys()) == 0 {
		// Closed already; say why, once, after giving a new workload's
		// watch a moment.
		select {
		case <-ctx.Done():
			return
		case <-time.After(allowListNotFoundAfter):
		}
		if len(informer.GetStore().ListKeys()) == 0 {
			p.RejectAllowList(ctx, fmt.Errorf("workload %s not found in namespace %s", ref, namespace))
			report()
		}
	}
	<-ctx.Done()
}

// allowListCondition is the pod condition that says what p applies.
func allowListCondition(p *proxy.Proxy) corev1.PodCondition {
	c := corev1.PodCondition{Type: contract.PodConditionAllowList, Status: corev1.ConditionTrue,
		Reason: contract.ReasonAllowListApplied, Message: p.AllowListNow().Hash(), LastTransitionTime: metav1.Now()}
	if err := p.AllowListErr(); err != nil {
		msg := err.Error()
		if len(msg) > 512 {
			msg = msg[:512]
		}
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, contract.ReasonAllowListRejected, msg
	}
	return c
}

// conditionReporter writes the latest allow-list condition on the proxy's
// own pod (the only pod the admission policy lets it write), retrying with
// backoff until it succeeds or a newer condition replaces it.
type conditionReporter struct {
	client    kubernetes.Interface
	namespace string
	pod       string
	latest    chan corev1.PodCondition
}

func newConditionReporter(client kubernetes.Interface, namespace, pod string) *conditionReporter {
	return &conditionReporter{client: client, namespace: namespace, pod: pod, latest: make(chan corev1.PodCondition, 1)}
}

// set replaces the condition waiting to be written with c.
func (r *conditionReporter) set(c corev1.PodCondition) {
	select {
	case <-r.latest:
	default:
	}
	r.latest <- c
}

func (r *conditionReporter) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		var c corev1.PodCondition
		select {
		case <-ctx.Done():
			return
		case c = <-r.latest:
		}
		backoff := time.Second
		for {
			err := r.write(ctx, c)
			if err == nil || ctx.Err() != nil {
				break
			}
			logger.Error(err, "Reporting the allow-list on the proxy's pod failed; retrying", "pod", r.pod, "retryIn", backoff)
			select {
			case <-ctx.Done():
				return
			case c = <-r.latest: // a newer one replaces it
				continue
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

func (r *conditionReporter) write(ctx context.Context, c corev1.PodCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{c}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = r.client.CoreV1().Pods(r.namespace).Patch(ctx, r.pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
