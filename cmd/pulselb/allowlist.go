package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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
func watchAllowList(ctx context.Context, client kubernetes.Interface, namespace string, ref workloadRef, p *proxy.Proxy) {
	logger := klog.FromContext(ctx).WithValues("workload", ref.String(), "namespace", namespace)
	ctx = klog.NewContext(ctx, logger)
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
		}
	}
	<-ctx.Done()
}
