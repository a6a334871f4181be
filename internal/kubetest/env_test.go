package kubetest

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// One control plane for the package. Starting one takes seconds.
var testEnv *Env

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubetest")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	testEnv, err = Start(ctx, dir)
	cancel()
	if err != nil {
		os.RemoveAll(dir)
		slog.Error("kubetest", "err", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := stopOperatorStack(); err != nil {
		slog.Error("kubetest", "err", err)
		code = 1
	}
	if err := testEnv.Stop(); err != nil {
		slog.Error("kubetest", "err", err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func app(name string, conf map[string]string) *unstructured.Unstructured {
	sc := map[string]any{}
	for k, v := range conf {
		sc[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sparkoperator.k8s.io/v1beta2",
		"kind":       "SparkApplication",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"type": "Python", "sparkVersion": "3.5.3", "mode": "cluster",
			"mainApplicationFile": "local:///opt/tether/run_sql.py",
			"sparkConf":           sc,
			"driver":              map[string]any{"cores": int64(1)},
			"executor":            map[string]any{"cores": int64(1), "instances": int64(1)},
		},
	}}
}

func waitState(t *testing.T, ctx context.Context, dyn dynamic.Interface, name, want string) *unstructured.Unstructured {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		u, err := dyn.Resource(SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		last, _, _ = unstructured.NestedString(u.Object, "status", "applicationState", "state")
		if last == want {
			return u
		}
		sleep(ctx, 20*time.Millisecond)
	}
	t.Fatalf("%s: state %q, want %q", name, last, want)
	return nil
}

func queryConfigMap(name string, uid string) *corev1.ConfigMap {
	ctrl := true
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-query", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "sparkoperator.k8s.io/v1beta2", Kind: "SparkApplication", Name: name, UID: typesUID(uid), Controller: &ctrl}}},
		Data: map[string]string{"query.sql": "SELECT 1"},
	}
}

func TestSimulatorDrivesApplications(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sim := NewSimulator(testEnv, slog.Default())
	go sim.Run(ctx)

	res := testEnv.Dynamic.Resource(SparkApplications).Namespace("default")
	cms := testEnv.Clientset.CoreV1().ConfigMaps("default")

	// Succeeds when its query ConfigMap exists and is owned by it.
	u, err := res.Create(ctx, app("ok", map[string]string{SimRun: "100ms"}), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cms.Create(ctx, queryConfigMap("ok", string(u.GetUID())), metav1.CreateOptions{})
	require.NoError(t, err)
	done := waitState(t, ctx, testEnv.Dynamic, "ok", "COMPLETED")
	id, _, _ := unstructured.NestedString(done.Object, "status", "sparkApplicationId")
	pod, _, _ := unstructured.NestedString(done.Object, "status", "driverInfo", "podName")
	require.NotEmpty(t, id)
	require.Equal(t, "ok-driver", pod)
	_, err = testEnv.Clientset.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, sim.Created("default", "ok"))

	// Fails with the scripted message.
	u, err = res.Create(ctx, app("bad", map[string]string{SimOutcome: "failed", SimMessage: "boom", SimRun: "10ms"}), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cms.Create(ctx, queryConfigMap("bad", string(u.GetUID())), metav1.CreateOptions{})
	require.NoError(t, err)
	failed := waitState(t, ctx, testEnv.Dynamic, "bad", "FAILED")
	msg, _, _ := unstructured.NestedString(failed.Object, "status", "applicationState", "errorMessage")
	require.Equal(t, "boom", msg)

	// No query ConfigMap. The driver cannot start.
	_, err = res.Create(ctx, app("noquery", map[string]string{SimSubmit: "10ms"}), metav1.CreateOptions{})
	require.NoError(t, err)
	failed = waitState(t, ctx, testEnv.Dynamic, "noquery", "FAILED")
	msg, _, _ = unstructured.NestedString(failed.Object, "status", "applicationState", "errorMessage")
	require.Contains(t, msg, "noquery-query")

	// Foreground deletion completes, taking the dependents with it.
	fg := metav1.DeletePropagationForeground
	require.NoError(t, res.Delete(ctx, "ok", metav1.DeleteOptions{PropagationPolicy: &fg}))
	for ctx.Err() == nil {
		_, err := res.Get(ctx, "ok", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		sleep(ctx, 20*time.Millisecond)
	}
	_, err = cms.Get(ctx, "ok-query", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "configmap left after foreground deletion: %v", err)
	_, err = testEnv.Clientset.CoreV1().Pods("default").Get(ctx, "ok-driver", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "driver pod left after foreground deletion: %v", err)

	// A second application under the same name counts as a second creation.
	_, err = res.Create(ctx, app("ok", map[string]string{SimOutcome: "hang"}), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sim.Created("default", "ok") == 2 }, 10*time.Second, 20*time.Millisecond)
}

func TestProxyInjectsFaultsAndCountsCreates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartProxy(testEnv, t.TempDir())
	require.NoError(t, err)
	defer p.Close()
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	res := dyn.Resource(SparkApplications).Namespace("default")

	p.Inject(Fault{Method: http.MethodGet, Contains: "/sparkapplications/proxied", Status: http.StatusServiceUnavailable, Count: 1})
	_, err = res.Create(ctx, app("proxied", map[string]string{SimOutcome: "hang"}), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = res.Get(ctx, "proxied", metav1.GetOptions{})
	require.True(t, apierrors.IsServiceUnavailable(err), "want the injected 503, got %v", err)
	_, err = res.Get(ctx, "proxied", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, p.Injected())
	require.Equal(t, 1, p.Creates("/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications"))

	// Watches pass through. An apiserver may end a watch with an error
	// event (a *metav1.Status) when it is loaded. A client watches again,
	// and so does this test.
	for {
		w, err := res.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=proxied"})
		require.NoError(t, err)
		select {
		case ev := <-w.ResultChan():
			w.Stop()
			if ev.Type == watch.Error {
				t.Logf("watch ended by the apiserver, watching again: %v", apierrors.FromObject(ev.Object))
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			require.True(t, ok, "watch event %s carries a %T", ev.Type, ev.Object)
			require.Equal(t, "proxied", u.GetName())
			return
		case <-ctx.Done():
			w.Stop()
			t.Fatal("no watch event through the proxy")
		}
	}
}

func typesUID(s string) types.UID { return types.UID(s) }
