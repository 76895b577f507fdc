package main

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeConfig returns the client configuration of a role that talks to the
// API server: from the kubeconfig file when one is named, else the pod's
// in-cluster configuration, with the role's rate limits and user agent.
func kubeConfig(kubeconfig string, qps float64, burst int, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = userAgent
	return cfg, nil
}
