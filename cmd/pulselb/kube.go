package main

import (
	"context"
	"flag"

	"github.com/pulselb/pulselb/api/trim"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

// kubeFlags are the API client flags of a role that talks to the API
// server.
type kubeFlags struct {
	kubeconfig string
	qps        float64
	burst      int
}

// addKubeFlags defines --kubeconfig, --kube-api-qps and --kube-api-burst
// on fs with the role's default rate limits.
func addKubeFlags(fs *flag.FlagSet, qps float64, burst int) *kubeFlags {
	f := &kubeFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster config")
	fs.Float64Var(&f.qps, "kube-api-qps", qps, "API requests per second")
	fs.IntVar(&f.burst, "kube-api-burst", burst, "API request burst")
	return f
}

// config returns the client configuration: from the kubeconfig file when
// one is named, else the pod's in-cluster configuration, with the role's
// rate limits and user agent.
func (f *kubeFlags) config(userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if f.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(f.qps), f.burst
	cfg.UserAgent = userAgent
	return cfg, nil
}

// clients returns the typed client and, when withDynamic is set, the
// dynamic client for the custom resources (nil otherwise).
func (f *kubeFlags) clients(userAgent string, withDynamic bool) (*kubernetes.Clientset, dynamic.Interface, error) {
	cfg, err := f.config(userAgent)
	if err != nil {
		return nil, nil, startFailed(err, "Loading Kubernetes client config failed", "kubeconfig", f.kubeconfig)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, startFailed(err, "Creating Kubernetes client failed")
	}
	if !withDynamic {
		return client, nil, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, startFailed(err, "Creating dynamic client failed")
	}
	return client, dyn, nil
}

// informerFactories are a role's informers: cluster-wide, and those of its
// own namespace (proxy workloads, reports, Secrets).
type informerFactories struct {
	cluster, system informers.SharedInformerFactory
}

func newInformerFactories(client kubernetes.Interface, namespace string) informerFactories {
	return informerFactories{
		cluster: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim.Object)),
		system:  informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace), informers.WithTransform(trim.Object)),
	}
}

// start starts the informers requested so far and returns the function
// that waits for them to stop once ctx is done.
func (f informerFactories) start(ctx context.Context) (shutdown func()) {
	f.cluster.Start(ctx.Done())
	f.system.Start(ctx.Done())
	return func() {
		f.system.Shutdown()
		f.cluster.Shutdown()
	}
}

// eventRecorder returns a recorder whose Events are logged at V(3) and
// written through client as component, and the function that flushes and
// stops it.
func eventRecorder(ctx context.Context, client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), broadcaster.Shutdown
}
