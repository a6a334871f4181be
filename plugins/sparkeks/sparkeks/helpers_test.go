package sparkeks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// testAccess is the access the tests' jobs configure. The fakes are put in
// the plugin's client cache under it.
var testAccess = Access{Kubeconfig: "test-kubeconfig"}

// env is a plugin whose cluster is a pair of client-go fakes.
type env struct {
	p       *Plugin
	dyn     *dynfake.FakeDynamicClient
	kube    *kubefake.Clientset
	creates atomic.Int32 // SparkApplications created
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		dyn:  dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "SparkApplicationList"}),
		kube: kubefake.NewClientset(),
		p:    &Plugin{log: slog.New(slog.DiscardHandler)},
	}
	// The fake tracker sets neither UID nor creation time. The API server does.
	e.dyn.PrependReactor("create", Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		obj.SetUID(types.UID(uuid.NewString()))
		obj.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
		return false, nil, nil
	})
	e.dyn.PrependReactor("create", Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		if _, err := e.dyn.Tracker().Get(GVR, obj.GetNamespace(), obj.GetName()); err == nil {
			return false, nil, nil // the tracker answers AlreadyExists
		}
		e.creates.Add(1)
		return false, nil, nil
	})
	e.kube.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap)
		obj.SetUID(types.UID(uuid.NewString()))
		return false, nil, nil
	})
	e.p.clients.m = map[Access]*clients{testAccess: {dyn: e.dyn, kube: e.kube, host: "https://fake"}}
	e.p.watchers.linger = 10 * time.Millisecond
	t.Cleanup(e.p.watchers.stopAll)
	return e
}

// newJob is a job with valid settings. extra keys go into its context.
func newJob(t *testing.T, extra map[string]any) *plugin.Job {
	t.Helper()
	ctx := map[string]any{
		"image":                 "spark:3.5.3",
		"main_application_file": "local:///opt/tether/run_sql.py",
		"query":                 "SELECT 1",
		"poll_interval":         "10ms",
	}
	for k, v := range extra {
		ctx[k] = v
	}
	cb, err := json.Marshal(ctx)
	require.NoError(t, err)
	return &plugin.Job{
		ID:      uuid.Must(uuid.NewV7()).String(),
		Command: "spark-sql",
		Attempt: 1,
		Config:  json.RawMessage(`{"kubeconfig":"test-kubeconfig","namespace":"spark"}`),
		Context: cb,
	}
}

func (e *env) app(t *testing.T, job *plugin.Job) *unstructured.Unstructured {
	t.Helper()
	app, err := e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
	require.NoError(t, err)
	return app
}

// waitApp waits until the job's SparkApplication exists.
func (e *env) waitApp(t *testing.T, job *plugin.Job) *unstructured.Unstructured {
	t.Helper()
	var app *unstructured.Unstructured
	require.Eventually(t, func() bool {
		var err error
		app, err = e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
		return err == nil
	}, 5*time.Second, time.Millisecond)
	return app
}

// setStatus sets the application's status, as spark-operator would.
func (e *env) setStatus(t *testing.T, job *plugin.Job, state, errMsg, driverPod string) {
	t.Helper()
	app := e.app(t, job)
	status := map[string]any{
		"applicationState":   map[string]any{"state": state, "errorMessage": errMsg},
		"sparkApplicationId": "spark-" + job.ID[:8],
	}
	if driverPod != "" {
		status["driverInfo"] = map[string]any{"podName": driverPod}
	}
	app.Object["status"] = status
	_, err := e.dyn.Resource(GVR).Namespace("spark").Update(context.Background(), app, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// addPod creates a driver pod on a node.
func (e *env) addPod(t *testing.T, name string) {
	t.Helper()
	_, err := e.kube.CoreV1().Pods("spark").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "spark"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: driverContainer}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (e *env) configMap(job *plugin.Job) (*corev1.ConfigMap, error) {
	return e.kube.CoreV1().ConfigMaps("spark").Get(context.Background(), ConfigMapName(job.ID), metav1.GetOptions{})
}

// outcome is what an Execute or Resume run in the background returned.
type outcome struct {
	res *plugin.Result
	err error
}

func background(f func() (*plugin.Result, error)) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := f()
		ch <- outcome{res, err}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not return")
		return outcome{}
	}
}

// failNTimes makes the first n calls of verb on resource fail with err.
func failNTimes(f interface {
	PrependReactor(string, string, k8stesting.ReactionFunc)
}, verb, resource string, n int, err error) *atomic.Int32 {
	var calls atomic.Int32
	f.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= int32(n) {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &calls
}

func unavailable() error {
	return apierrors.NewServiceUnavailable("injected")
}

func lastHandle(t *testing.T, b []byte) *Handle {
	t.Helper()
	h, err := decodeHandle(b)
	require.NoError(t, err)
	return h
}

// lockedBuffer is a concurrency-safe writer.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var _ io.Writer = (*lockedBuffer)(nil)

var metav1CreateOptions = metav1.CreateOptions{}

func podWithoutNode(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "spark"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: driverContainer}}},
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// current is the runtime's last checkpointed handle, or an empty one before
// the first checkpoint. For polling in Eventually.
func current(rt *plugintest.Runtime) *Handle {
	h, err := decodeHandle(rt.Handle())
	if err != nil {
		return &Handle{}
	}
	return h
}
