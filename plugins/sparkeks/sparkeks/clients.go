package sparkeks

import (
	"context"
	"encoding/base64"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/eks"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Client-side rate limits shared by every job of the process on one cluster.
// client-go's defaults (5/s, burst 10) are too low for many jobs each
// polling, watching and streaming logs.
const (
	clientQPS   = 50
	clientBurst = 100
)

// clients are the dynamic client (SparkApplications) and the typed one
// (ConfigMaps, pods, pod logs, discovery) of one cluster.
type clients struct {
	dyn  dynamic.Interface
	kube kubernetes.Interface
	host string // for messages
}

// clientCache holds one set of clients per cluster access for the plugin
// process. Every job shares them, with their connections and rate limits,
// and an EKS cluster is described once. A failed lookup is not cached, so
// a cluster still being created is looked up again by the next job.
type clientCache struct {
	mu sync.Mutex
	m  map[Access]*clients
}

func (c *clientCache) get(ctx context.Context, a Access) (*clients, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.m[a]; ok {
		return cl, nil
	}
	rc, err := restConfig(ctx, a)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = clientQPS, clientBurst
	rc.UserAgent = "tether-plugin-sparkeks/" + PluginVersion
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, plugin.Errorf(plugin.Permanent, "sparkeks: creating the dynamic client for %s: %v", rc.Host, err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, plugin.Errorf(plugin.Permanent, "sparkeks: creating the client for %s: %v", rc.Host, err)
	}
	cl := &clients{dyn: dyn, kube: kube, host: rc.Host}
	if c.m == nil {
		c.m = map[Access]*clients{}
	}
	c.m[a] = cl
	return cl, nil
}

// restConfig builds the API server connection of one access mode.
func restConfig(ctx context.Context, a Access) (*rest.Config, error) {
	switch {
	case a.Kubeconfig != "":
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: a.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: a.Context},
		).ClientConfig()
		if err != nil {
			return nil, plugin.Errorf(plugin.Permanent, "sparkeks: kubeconfig %q (context %q): %v", a.Kubeconfig, a.Context, err)
		}
		return rc, nil
	case a.InCluster:
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, plugin.Errorf(plugin.Permanent, "sparkeks: in_cluster: %v", err)
		}
		return rc, nil
	default:
		return eksRestConfig(ctx, a)
	}
}

// eksRestConfig reaches an EKS cluster. It takes its endpoint and CA from the
// settings, or else from DescribeCluster, and a bearer token made from the
// SDK's default credentials.
func eksRestConfig(ctx context.Context, a Access) (*rest.Config, error) {
	cfg, err := eksAWSConfig(ctx, a)
	if err != nil {
		return nil, err
	}
	ec := eksCluster{endpoint: a.EKSEndpoint, caData: a.EKSCAData}
	if ec.endpoint == "" { // and caData: both or neither (Access.checkEKS)
		if ec, err = describeEKSCluster(ctx, eks.NewFromConfig(cfg), a.EKSCluster, a.Region); err != nil {
			return nil, err
		}
	}
	ca, err := base64.StdEncoding.DecodeString(ec.caData)
	if err != nil {
		return nil, plugin.Errorf(plugin.Permanent, "sparkeks: the certificate authority data of EKS cluster %q: %v", a.EKSCluster, err)
	}
	src := newEKSTokenSourceFromConfig(cfg, a.EKSCluster)
	return &rest.Config{
		Host:            ec.endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		WrapTransport:   src.wrap,
	}, nil
}
