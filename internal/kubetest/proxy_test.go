package kubetest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A client that knows only the proxy's URL and CA, and sends a bearer token
// the apiserver has never heard of, still gets through. The proxy records
// the token and authenticates as the admin itself.
func TestProxyURLCADataAndBearerTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartProxy(testEnv, t.TempDir())
	require.NoError(t, err)
	defer p.Close()
	require.Empty(t, p.BearerTokens())

	for _, tok := range []string{"first-token", "second-token", "first-token"} {
		cs, err := kubernetes.NewForConfig(&rest.Config{
			Host:            p.URL(),
			TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData()},
			BearerToken:     tok,
		})
		require.NoError(t, err)
		_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		require.NoError(t, err)
	}
	require.Equal(t, []string{"first-token", "second-token"}, p.BearerTokens())

	// Without the CA, the proxy's certificate is not trusted.
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: p.URL()})
	require.NoError(t, err)
	_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.ErrorContains(t, err, "certificate")
}

// How the proxy classifies requests by verb and resource.
func TestClassifyRequest(t *testing.T) {
	const apps = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications"
	for _, c := range []struct {
		method, target string
		want           RequestKey
	}{
		{"GET", apps + "/spark-sql-job-1", RequestKey{Verb: "GET", Resource: "sparkapplications"}},
		{"GET", apps + "?labelSelector=a%3Db", RequestKey{Verb: "LIST", Resource: "sparkapplications"}},
		{"GET", apps + "?watch=true&fieldSelector=metadata.name%3Dx", RequestKey{Verb: "WATCH", Resource: "sparkapplications"}},
		{"GET", "/apis/sparkoperator.k8s.io/v1beta2/watch/namespaces/default/sparkapplications", RequestKey{Verb: "WATCH", Resource: "sparkapplications"}},
		{"GET", "/apis/sparkoperator.k8s.io/v1beta2/sparkapplications?watch=1", RequestKey{Verb: "WATCH", Resource: "sparkapplications"}},
		{"POST", apps, RequestKey{Verb: "CREATE", Resource: "sparkapplications"}},
		{"PUT", apps + "/x/status", RequestKey{Verb: "UPDATE", Resource: "sparkapplications/status"}},
		{"PATCH", apps + "/x", RequestKey{Verb: "PATCH", Resource: "sparkapplications"}},
		{"DELETE", apps + "/x", RequestKey{Verb: "DELETE", Resource: "sparkapplications"}},
		{"DELETE", apps + "?labelSelector=a", RequestKey{Verb: "DELETECOLLECTION", Resource: "sparkapplications"}},
		{"GET", "/api/v1/namespaces/default/pods/p-driver/log?follow=true&timestamps=true", RequestKey{Verb: "GET", Resource: "pods/log"}},
		{"GET", "/api/v1/namespaces/default/pods/p-driver", RequestKey{Verb: "GET", Resource: "pods"}},
		{"POST", "/api/v1/namespaces/default/pods/p/binding", RequestKey{Verb: "CREATE", Resource: "pods/binding"}},
		{"POST", "/api/v1/namespaces/default/configmaps", RequestKey{Verb: "CREATE", Resource: "configmaps"}},
		{"GET", "/api/v1/namespaces/default", RequestKey{Verb: "GET", Resource: "namespaces"}},
		{"GET", "/api/v1/namespaces", RequestKey{Verb: "LIST", Resource: "namespaces"}},
		{"PUT", "/api/v1/namespaces/default/finalize", RequestKey{Verb: "UPDATE", Resource: "namespaces/finalize"}},
		{"GET", "/api/v1/nodes/n1", RequestKey{Verb: "GET", Resource: "nodes"}},
		{"GET", "/apis", RequestKey{Verb: "GET", Resource: "/apis"}},
		{"GET", "/apis/sparkoperator.k8s.io/v1beta2", RequestKey{Verb: "GET", Resource: "/apis/sparkoperator.k8s.io/v1beta2"}},
		{"GET", "/version", RequestKey{Verb: "GET", Resource: "/version"}},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		require.Equal(t, c.want, ClassifyRequest(r), "%s %s", c.method, c.target)
	}
	r := httptest.NewRequest("GET", "/api/v1/namespaces/default/pods", nil)
	r.Header.Set("User-Agent", "tether-plugin-sparkeks/0.2.0 (linux/amd64)")
	require.Equal(t, RequestKey{Client: "tether-plugin-sparkeks/0.2.0", Verb: "LIST", Resource: "pods"}, ClassifyRequest(r))
}

// The proxy counts requests by client (User-Agent), verb and resource, and
// the watches open and their peak. ResetRequests starts again from the
// watches still open.
func TestProxyRequestAccounting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartProxy(testEnv, t.TempDir())
	require.NoError(t, err)
	defer p.Close()
	cfg := func(ua string) *rest.Config {
		return &rest.Config{Host: p.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData()}, UserAgent: ua}
	}
	const plug, other = "tether-plugin-sparkeks/9.9.9", "bench-other/1"
	cs, err := kubernetes.NewForConfig(cfg(plug))
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg(plug))
	require.NoError(t, err)
	cs2, err := kubernetes.NewForConfig(cfg(other))
	require.NoError(t, err)

	cms := cs.CoreV1().ConfigMaps("default")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "proxy-accounting"}, Data: map[string]string{"a": "1"}}
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	defer func() {
		_ = testEnv.Clientset.CoreV1().ConfigMaps("default").Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	}()
	_, err = cms.Get(ctx, cm.Name, metav1.GetOptions{})
	require.NoError(t, err)
	_, err = cms.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	_, err = cms.Patch(ctx, cm.Name, "application/merge-patch+json", []byte(`{"data":{"b":"2"}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = dyn.Resource(SparkApplications).Namespace("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	_, err = cs2.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)

	// Two watches of the plugin and one of the other client, open at once
	// (from resourceVersion 0: the watch cache answers at once, whatever
	// its progress).
	fromCache := metav1.ListOptions{ResourceVersion: "0"}
	w1, err := cms.Watch(ctx, fromCache)
	require.NoError(t, err)
	w2, err := dyn.Resource(SparkApplications).Namespace("default").Watch(ctx, fromCache)
	require.NoError(t, err)
	w3, err := cs2.CoreV1().ConfigMaps("default").Watch(ctx, fromCache)
	require.NoError(t, err)
	waitOpen := func(client string, n int) {
		t.Helper()
		require.Eventually(t, func() bool { return p.Requests().OpenWatches[client] == n }, 10*time.Second, 10*time.Millisecond,
			"open watches of %q: %v", client, p.Requests().OpenWatches)
	}
	waitOpen(plug, 2)
	waitOpen(other, 1)
	waitOpen("", 3)

	s := p.Requests()
	require.Equal(t, 1, s.Count(plug, "CREATE", "configmaps"))
	require.Equal(t, 1, s.Count(plug, "GET", "configmaps"))
	require.Equal(t, 1, s.Count(plug, "LIST", "configmaps"))
	require.Equal(t, 1, s.Count(plug, "PATCH", "configmaps"))
	require.Equal(t, 1, s.Count(plug, "WATCH", "configmaps"))
	require.Equal(t, 1, s.Count(plug, "LIST", "sparkapplications"))
	require.Equal(t, 1, s.Count(plug, "WATCH", "sparkapplications"))
	require.Equal(t, 0, s.Count(plug, "LIST", "pods"))
	require.Equal(t, 1, s.Count(other, "LIST", "pods"))
	require.Equal(t, 2, s.Count("", "WATCH", "configmaps"))
	require.Equal(t, []string{other, plug}, s.Clients())
	require.Equal(t, 2, s.PeakWatches[plug])
	require.Equal(t, 3, s.PeakWatches[""])

	w1.Stop()
	waitOpen(plug, 1)
	before := p.ResetRequests()
	require.Equal(t, 2, before.PeakWatches[plug], "the snapshot before the reset keeps its peak")
	require.Equal(t, 1, before.Count(plug, "CREATE", "configmaps"))
	s = p.Requests()
	require.Empty(t, s.Counts)
	require.Equal(t, 1, s.PeakWatches[plug], "a reset starts the peak from the watches open")
	require.Equal(t, 1, s.OpenWatches[plug])
	require.False(t, s.Since.Before(before.Since))

	require.NoError(t, cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}))
	w2.Stop()
	w3.Stop()
	waitOpen("", 0)
	s = p.Requests()
	require.Equal(t, 1, s.Count(plug, "DELETE", "configmaps"))
	require.Equal(t, 1, s.PeakWatches[plug])
	require.Equal(t, 2, s.PeakWatches[""])

	// A followed log is a stream of its own kind (this one ends at once:
	// there is no such pod). An unfollowed one is not.
	_, err = cs.CoreV1().Pods("default").GetLogs("no-such-pod", &corev1.PodLogOptions{Follow: true}).DoRaw(ctx)
	require.Error(t, err)
	_, err = cs.CoreV1().Pods("default").GetLogs("no-such-pod", &corev1.PodLogOptions{}).DoRaw(ctx)
	require.Error(t, err)
	require.Eventually(t, func() bool { return p.Requests().OpenLogStreams[plug] == 0 }, 10*time.Second, 10*time.Millisecond)
	s = p.Requests()
	require.Equal(t, 2, s.Count(plug, "GET", "pods/log"))
	require.Equal(t, 1, s.PeakLogStreams[plug])
	require.Equal(t, 1, s.PeakWatches[plug], "a log stream is not a watch")
}
