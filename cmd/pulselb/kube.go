package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/pulselb/pulselb/api/trim"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
)

// kubeFlags are the API client flags of a role that talks to the API
// server.
type kubeFlags struct {
	kubeconfig string
	qps        float64
	burst      int
	// host is the API server's address, once config has run.
	host string
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
// rate limits and user agent, and redial for the requests that ask for it.
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
	cfg.Wrap(newRedial)
	f.host = cfg.Host
	return cfg, nil
}

// API server waits: the first retry comes after apiRetryMin, each next one
// after twice as long, up to apiRetryMax; one attempt lasts at most
// apiAttemptTimeout.
const (
	apiRetryMin       = time.Second
	apiRetryMax       = 30 * time.Second
	apiAttemptTimeout = 10 * time.Second
)

// waitForAPIServer returns nil once the API server at host answers a
// request (GET /version; any HTTP answer, even a refusal, shows it is
// reachable). Until then it logs that the server cannot be reached, naming
// it, at once and before every retry, waiting twice as long each time up
// to apiRetryMax. It gives up with an error after giveUp when giveUp is
// positive, and returns ctx's error when ctx is done first.
func waitForAPIServer(ctx context.Context, c rest.Interface, host string, giveUp time.Duration) error {
	logger := klog.FromContext(ctx)
	start := time.Now()
	delay := apiRetryMin
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, apiAttemptTimeout)
		err := c.Get().AbsPath("/version").Do(actx).Error()
		cancel()
		var answer apierrors.APIStatus
		if err == nil || errors.As(err, &answer) {
			if attempt > 1 {
				logger.Info("Reached the API server", "address", host, "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := delay
		if giveUp > 0 {
			left := giveUp - time.Since(start)
			if left <= 0 {
				return fmt.Errorf("cannot reach the API server at %s within --api-server-wait=%s: %w", host, giveUp, err)
			}
			wait = min(wait, left)
		}
		logger.Error(err, "Cannot reach the API server; retrying", "address", host, "attempt", attempt, "retryIn", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		delay = min(2*delay, apiRetryMax)
	}
}

// clients returns the typed client and, when withDynamic is set, the
// dynamic client for the custom resources (nil otherwise).
func (f *kubeFlags) clients(userAgent string, withDynamic bool) (*kubernetes.Clientset, dynamic.Interface, error) {
	return f.wrappedClients(userAgent, withDynamic, nil)
}

// wrappedClients is clients with every request going through wrap first
// (when not nil).
func (f *kubeFlags) wrappedClients(userAgent string, withDynamic bool, wrap transport.WrapperFunc) (*kubernetes.Clientset, dynamic.Interface, error) {
	cfg, err := f.config(userAgent)
	if err != nil {
		return nil, nil, startFailed(err, "Loading Kubernetes client config failed", "kubeconfig", f.kubeconfig)
	}
	if wrap != nil {
		cfg.Wrap(wrap)
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

// start starts the informers requested so far, with ctx (and so its
// values: redialing) and returns the function that waits for them to stop
// once ctx is done.
func (f informerFactories) start(ctx context.Context) (shutdown func()) {
	f.cluster.StartWithContext(ctx)
	f.system.StartWithContext(ctx)
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
