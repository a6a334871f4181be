package kubetest

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The operator stack, shared by the package's operator tests and started by
// the first of them (stopped by TestMain).
var opStack struct {
	once  sync.Once
	s     *OperatorStack
	dir   string
	err   error
	dyn   dynamic.Interface    // through the proxy
	cs    kubernetes.Interface // through the proxy
	start time.Duration
}

func operatorStack(t *testing.T) *OperatorStack {
	t.Helper()
	opStack.once.Do(func() {
		began := time.Now()
		opStack.dir, opStack.err = os.MkdirTemp("", "kubetest-operator")
		if opStack.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		opStack.s, opStack.err = StartOperatorStack(ctx, opStack.dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if opStack.err != nil {
			return
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", opStack.s.Proxy.Kubeconfig)
		if err != nil {
			opStack.err = err
			return
		}
		if opStack.dyn, opStack.err = dynamic.NewForConfig(cfg); opStack.err != nil {
			return
		}
		opStack.cs, opStack.err = kubernetes.NewForConfig(cfg)
		opStack.start = time.Since(began)
	})
	require.NoError(t, opStack.err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("spark-operator log ends:\n%s", opStack.s.OperatorLog())
		}
	})
	return opStack.s
}

func stopOperatorStack() error {
	if opStack.s == nil {
		return nil
	}
	err := opStack.s.Stop()
	if os.Getenv("TETHER_KUBETEST_KEEP") == "" { // set it to read the logs afterwards
		os.RemoveAll(opStack.dir)
	} else {
		slog.Info("kubetest: operator stack files kept", "dir", opStack.dir)
	}
	return err
}

// sparkApp is a SparkApplication shaped as the sparkeks plugin builds it
// (plugins/sparkeks/sparkeks/app.go, buildApp): cluster mode, restartPolicy
// Never, the query ConfigMap as a volume mounted into the driver.
func sparkApp(name string, conf map[string]string, spec map[string]any) *unstructured.Unstructured {
	sc := map[string]any{}
	for k, v := range conf {
		sc[k] = v
	}
	s := map[string]any{
		"type": "Python", "mode": "cluster", "sparkVersion": "3.5.3",
		"image":               "example.com/spark:3.5.3",
		"mainApplicationFile": "local:///opt/tether/run_sql.py",
		"arguments":           []any{"/etc/tether/query/query.sql"},
		"restartPolicy":       map[string]any{"type": "Never"},
		"sparkConf":           sc,
		"volumes":             []any{map[string]any{"name": "tether-query", "configMap": map[string]any{"name": name + "-query"}}},
		"driver": map[string]any{"cores": int64(1), "memory": "512m", "serviceAccount": "spark",
			"labels":       map[string]any{"tether.dev/job": name},
			"volumeMounts": []any{map[string]any{"name": "tether-query", "mountPath": "/etc/tether/query", "readOnly": true}}},
		"executor": map[string]any{"cores": int64(1), "instances": int64(1), "memory": "512m"},
	}
	for k, v := range spec {
		s[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sparkoperator.k8s.io/v1beta2",
		"kind":       "SparkApplication",
		"metadata":   map[string]any{"name": name, "namespace": "default", "labels": map[string]any{"tether.dev/managed": "true"}},
		"spec":       s,
	}}
}

// stateRecorder collects the successive applicationState.state values of
// one SparkApplication from a watch.
type stateRecorder struct {
	mu     sync.Mutex
	states []string
	last   *unstructured.Unstructured
	gone   bool
}

func recordStates(t *testing.T, ctx context.Context, name string) *stateRecorder {
	t.Helper()
	r := &stateRecorder{}
	res := opApps()
	sel := metav1.ListOptions{FieldSelector: "metadata.name=" + name}
	see := func(typ watch.EventType, u *unstructured.Unstructured) {
		st, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "state")
		r.mu.Lock()
		defer r.mu.Unlock()
		r.last = u
		if typ == watch.Deleted {
			r.gone = true
		} else if len(r.states) == 0 || r.states[len(r.states)-1] != st {
			r.states = append(r.states, st)
		}
	}
	// Watch from resourceVersion 0 (the watch cache's state, then every
	// change), established before the test creates the app, so no state is
	// missed. A list's resourceVersion can be "too large" for a quiet CRD's
	// watch cache. Again when a watch ends.
	sel.ResourceVersion = "0"
	w, err := res.Watch(ctx, sel)
	require.NoError(t, err)
	go func() {
		for ctx.Err() == nil {
			for ev := range w.ResultChan() {
				if u, ok := ev.Object.(*unstructured.Unstructured); ok {
					see(ev.Type, u)
				}
			}
			w.Stop()
			for ctx.Err() == nil {
				if w, err = res.Watch(ctx, sel); err == nil {
					break
				}
				sleep(ctx, 50*time.Millisecond)
			}
		}
	}()
	return r
}

func (r *stateRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.states...)
}

func (r *stateRecorder) current() (string, *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return "", r.last
	}
	return r.states[len(r.states)-1], r.last
}

// waitFor waits until the application is in state want (per the watch).
func (r *stateRecorder) waitFor(t *testing.T, want string, within time.Duration) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	require.Eventually(t, func() bool {
		st, u := r.current()
		got = u
		return st == want
	}, within, 20*time.Millisecond, "want state %s; states seen %v", want, r.seen())
	return got
}

func (r *stateRecorder) waitGone(t *testing.T, ctx context.Context, name string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		gone := r.gone
		r.mu.Unlock()
		if gone {
			return true
		}
		_, err := opApps().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, within, 20*time.Millisecond, "SparkApplication not deleted; states seen %v", r.seen())
}

// inOrder says whether want appears in seen in order (other states may be
// in between).
func inOrder(seen, want []string) bool {
	i := 0
	for _, s := range seen {
		if i < len(want) && s == want[i] {
			i++
		}
	}
	return i == len(want)
}

func create(t *testing.T, ctx context.Context, app *unstructured.Unstructured) (*stateRecorder, *unstructured.Unstructured) {
	t.Helper()
	r := recordStates(t, ctx, app.GetName())
	u, err := opApps().Create(ctx, app, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, last := r.current()
		msg := ""
		if last != nil {
			msg = errorMessage(last)
		}
		t.Logf("%s: states %q, errorMessage %q", app.GetName(), r.seen(), msg)
	})
	return r, u
}

// opTest starts the operator stack if it is not up and gives the test a
// context that ends within timeout and a fresh application name.
func opTest(t *testing.T, prefix string, timeout time.Duration) (*OperatorStack, context.Context, string) {
	t.Helper()
	s := operatorStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return s, ctx, uniq(prefix)
}

// opApps are the SparkApplications of namespace default, through the proxy.
func opApps() dynamic.ResourceInterface {
	return opStack.dyn.Resource(SparkApplications).Namespace("default")
}

// driverPod is the application's driver pod, through the proxy.
func driverPod(ctx context.Context, name string) (*corev1.Pod, error) {
	return opStack.cs.CoreV1().Pods("default").Get(ctx, name+"-driver", metav1.GetOptions{})
}

var uniqs atomic.Int64

// uniq is a fresh application name (tests share the stack, also under
// -count).
func uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, uniqs.Add(1)) }

func errorMessage(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "errorMessage")
	return s
}

func TestOperatorCompletesApplication(t *testing.T) {
	t.Parallel()
	s, ctx, name := opTest(t, "op-ok", 30*time.Second)

	r, u := create(t, ctx, sparkApp(name, map[string]string{SimRun: "500ms"}, nil))
	done := r.waitFor(t, "COMPLETED", 20*time.Second)
	require.True(t, inOrder(r.seen(), []string{"SUBMITTED", "RUNNING", "COMPLETED"}), "states %v", r.seen())
	require.Empty(t, errorMessage(done))
	require.Equal(t, 1, s.Created("default", name))

	// The driver pod as spark-submit created it and the operator found it.
	podName, _, _ := unstructured.NestedString(done.Object, "status", "driverInfo", "podName")
	require.Equal(t, name+"-driver", podName)
	pod, err := opStack.cs.CoreV1().Pods("default").Get(ctx, podName, metav1.GetOptions{})
	require.NoError(t, err)
	appID, _, _ := unstructured.NestedString(done.Object, "status", "sparkApplicationId")
	subID, _, _ := unstructured.NestedString(done.Object, "status", "submissionID")
	require.Equal(t, appID, pod.Labels["spark-app-selector"])
	require.Equal(t, "driver", pod.Labels["spark-role"])
	require.Equal(t, name, pod.Labels["sparkoperator.k8s.io/app-name"])
	require.Equal(t, "true", pod.Labels["sparkoperator.k8s.io/launched-by-spark-operator"])
	require.Equal(t, "true", pod.Labels["sparkoperator.k8s.io/mutated-by-spark-operator"])
	require.Equal(t, subID, pod.Labels["sparkoperator.k8s.io/submission-id"])
	require.Equal(t, name, pod.Labels["tether.dev/job"], "spec.driver.labels")
	require.Equal(t, "true", pod.Labels["tether.dev/managed"], "the app's own labels")
	require.Equal(t, "500ms", pod.Annotations[SimRun])
	require.Equal(t, "spark", pod.Spec.ServiceAccountName)
	require.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	require.Equal(t, "example.com/spark:3.5.3", pod.Spec.Containers[0].Image)
	require.Equal(t, DriverContainer, pod.Spec.Containers[0].Name)
	require.Equal(t, corev1.PodSucceeded, pod.Status.Phase)
	require.Len(t, pod.OwnerReferences, 1)
	require.Equal(t, u.GetUID(), pod.OwnerReferences[0].UID)
	require.True(t, *pod.OwnerReferences[0].Controller)
	// spark-operator 2.5.2 applies spec.volumes / driver.volumeMounts of
	// ConfigMaps only in its mutating webhook (internal/webhook/
	// sparkpod_defaulter.go, addVolumes). spark-submit gets only the
	// spark-local-dir-* ones (submission.go, driverVolumeMountsOption).
	// Without the webhook the driver pod has no query volume.
	require.Empty(t, pod.Spec.Volumes)
}

func TestOperatorFailedDriver(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-fail", 30*time.Second)

	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimOutcome: "failed", KubeletExitCode: "3", SimMessage: "boom", SimRun: "200ms"}, nil))
	failed := r.waitFor(t, "FAILED", 20*time.Second)
	require.True(t, inOrder(r.seen(), []string{"SUBMITTED", "RUNNING", "FAILED"}), "states %v", r.seen())
	// controller.go, updateDriverState.
	require.Equal(t, "driver container failed with ExitCode: 3, Reason: Error", errorMessage(failed))
	term, _, _ := unstructured.NestedString(failed.Object, "status", "terminationTime")
	require.NotEmpty(t, term)
}

func TestOperatorDriverPodVanishes(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-vanish", 30*time.Second)

	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimOutcome: "vanish", SimRun: "300ms"}, nil))
	failed := r.waitFor(t, "FAILED", 20*time.Second)
	require.True(t, inOrder(r.seen(), []string{"SUBMITTED", "RUNNING", "FAILED"}), "states %v", r.seen())
	// controller.go, updateDriverState. A missing driver pod outside
	// SUBMITTED's grace period makes the app FAILING with this message.
	// restartPolicy Never then makes it FAILED, message kept.
	require.Equal(t, "driver pod not found", errorMessage(failed))
}

func TestOperatorSubmissionRefused(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-refused", 30*time.Second)

	// A label value the apiserver refuses (the CRD does not check it), so
	// creating the driver pod fails and spark-submit exits 1.
	app := sparkApp(name, nil, nil)
	require.NoError(t, unstructured.SetNestedField(app.Object, "not a valid label value!", "spec", "driver", "labels", "tether.dev/bad"))
	r, _ := create(t, ctx, app)
	failed := r.waitFor(t, "FAILED", 20*time.Second)
	require.True(t, inOrder(r.seen(), []string{"SUBMISSION_FAILED", "FAILED"}), "states %v", r.seen())
	require.NotContains(t, r.seen(), "SUBMITTED")
	msg := errorMessage(failed)
	require.True(t, strings.HasPrefix(msg, "failed to submit spark application: failed to run spark-submit: failed to run spark-submit: "), msg)
	require.Contains(t, msg, "code=422")
	attempts, _, _ := unstructured.NestedInt64(failed.Object, "status", "submissionAttempts")
	require.Equal(t, int64(1), attempts)
	_, err := driverPod(ctx, name)
	require.True(t, apierrors.IsNotFound(err), "driver pod: %v", err)
}

func TestOperatorTimeToLive(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-ttl", 30*time.Second)

	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimRun: "100ms"}, map[string]any{"timeToLiveSeconds": int64(1)}))
	r.waitFor(t, "COMPLETED", 20*time.Second)
	// reconcileTerminatedSparkApplication deletes it once terminationTime
	// is more than timeToLiveSeconds ago (pkg/util, IsExpired).
	r.waitGone(t, ctx, name, 10*time.Second)
	require.Eventually(t, func() bool {
		_, err := driverPod(ctx, name)
		return apierrors.IsNotFound(err)
	}, 10*time.Second, 20*time.Millisecond, "the garbage collector deletes the driver pod with its owner")
}

func TestOperatorOnFailureReruns(t *testing.T) {
	t.Parallel()
	s, ctx, name := opTest(t, "op-rerun", 40*time.Second)

	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimOutcome: "failed", SimRun: "100ms"}, map[string]any{
		"restartPolicy": map[string]any{"type": "OnFailure", "onFailureRetries": int64(1), "onFailureRetryInterval": int64(1),
			"onSubmissionFailureRetries": int64(1), "onSubmissionFailureRetryInterval": int64(1)}}))
	failed := r.waitFor(t, "FAILED", 30*time.Second)
	require.True(t, inOrder(r.seen(), []string{"SUBMITTED", "RUNNING", "FAILING", "PENDING_RERUN", "SUBMITTED", "RUNNING", "FAILED"}) ||
		inOrder(r.seen(), []string{"SUBMITTED", "RUNNING", "PENDING_RERUN", "SUBMITTED", "RUNNING", "FAILED"}), "states %v", r.seen())
	attempts, _, _ := unstructured.NestedInt64(failed.Object, "status", "executionAttempts")
	require.Equal(t, int64(2), attempts)
	// The same SparkApplication object ran twice. A watcher counting
	// creations sees one.
	require.Equal(t, 1, s.Created("default", name))
}

func TestOperatorImagePullKeepsSubmitted(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-pull", 30*time.Second)

	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimOutcome: "image_pull"}, nil))
	r.waitFor(t, "SUBMITTED", 20*time.Second)
	require.Eventually(t, func() bool {
		pod, err := driverPod(ctx, name)
		if err != nil || len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].State.Waiting == nil {
			return false
		}
		return pod.Status.ContainerStatuses[0].State.Waiting.Reason == "ImagePullBackOff"
	}, 10*time.Second, 20*time.Millisecond)
	// The pod stays Pending, and Pending is SUBMITTED to the operator
	// (pkg/util, DriverStateToApplicationState).
	require.Never(t, func() bool { st, _ := r.current(); return st != "SUBMITTED" }, time.Second, 50*time.Millisecond, "states %v", r.seen())
	require.NoError(t, opApps().Delete(ctx, name, metav1.DeleteOptions{}))
}

func TestOperatorForegroundDeletion(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-fg", 30*time.Second)

	r, u := create(t, ctx, sparkApp(name, map[string]string{SimOutcome: "hang"}, nil))
	ctrl := true
	_, err := opStack.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: name + "-query", OwnerReferences: []metav1.OwnerReference{{APIVersion: "sparkoperator.k8s.io/v1beta2", Kind: "SparkApplication",
			Name: name, UID: u.GetUID(), Controller: &ctrl}}}, Data: map[string]string{"query.sql": "SELECT 1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	r.waitFor(t, "RUNNING", 20*time.Second)

	fg := metav1.DeletePropagationForeground
	require.NoError(t, opApps().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}))
	r.waitGone(t, ctx, name, 20*time.Second)
	_, err = driverPod(ctx, name)
	require.True(t, apierrors.IsNotFound(err), "driver pod left after foreground deletion: %v", err)
	_, err = opStack.cs.CoreV1().ConfigMaps("default").Get(ctx, name+"-query", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "configmap left after foreground deletion: %v", err)
}

func TestOperatorDriverLogsThroughAPIServer(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-logs", 30*time.Second)

	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimRun: "1s", KubeletLogLines: "5"}, nil))
	r.waitFor(t, "RUNNING", 20*time.Second)

	// Follow from the start. Every line comes, each with the kubelet's
	// timestamp, and the stream ends when the container does.
	pods := opStack.cs.CoreV1().Pods("default")
	stream, err := pods.GetLogs(name+"-driver", &corev1.PodLogOptions{Container: DriverContainer, Follow: true, Timestamps: true}).Stream(ctx)
	require.NoError(t, err)
	var lines []string
	var stamps []time.Time
	sc := bufio.NewScanner(stream)
	for sc.Scan() {
		ts, text, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok, sc.Text())
		at, err := time.Parse(time.RFC3339Nano, ts)
		require.NoError(t, err)
		lines, stamps = append(lines, text), append(stamps, at)
	}
	require.NoError(t, sc.Err())
	stream.Close()
	require.Equal(t, []string{"driver line 1 of 5", "driver line 2 of 5", "driver line 3 of 5", "driver line 4 of 5", "driver line 5 of 5"}, lines)
	r.waitFor(t, "COMPLETED", 20*time.Second)

	// sinceTime (whole seconds on the wire) and limitBytes.
	since := metav1.NewTime(stamps[4].Truncate(time.Second))
	b, err := pods.GetLogs(name+"-driver", &corev1.PodLogOptions{SinceTime: &since}).DoRaw(ctx)
	require.NoError(t, err)
	var want []string
	for i, at := range stamps {
		if !at.Before(since.Time) {
			want = append(want, lines[i])
		}
	}
	require.Equal(t, strings.Join(want, "\n")+"\n", string(b))
	limit := int64(10)
	b, err = pods.GetLogs(name+"-driver", &corev1.PodLogOptions{LimitBytes: &limit}).DoRaw(ctx)
	require.NoError(t, err)
	require.Equal(t, "driver lin", string(b))
	tailLines := int64(2)
	b, err = pods.GetLogs(name+"-driver", &corev1.PodLogOptions{TailLines: &tailLines}).DoRaw(ctx)
	require.NoError(t, err)
	require.Equal(t, "driver line 4 of 5\ndriver line 5 of 5\n", string(b))
}

func TestOperatorKilledAndRestarted(t *testing.T) {
	// Not parallel. The other tests need a running operator.
	s, ctx, name := opTest(t, "op-restart", 40*time.Second)

	require.NoError(t, s.KillOperator())
	r, _ := create(t, ctx, sparkApp(name, map[string]string{SimRun: "200ms"}, nil))
	require.Never(t, func() bool { st, _ := r.current(); return st != "" }, 300*time.Millisecond, 20*time.Millisecond)
	require.NoError(t, s.StartOperator(ctx))
	r.waitFor(t, "COMPLETED", 20*time.Second)
	require.Equal(t, 1, s.Created("default", name))
	b, err := os.ReadFile(s.Operator.Log)
	require.NoError(t, err)
	require.GreaterOrEqual(t, strings.Count(string(b), `"msg":"Starting manager"`), 2, "the log has both runs")
}

func TestOperatorBinaryMissing(t *testing.T) {
	t.Setenv("TETHER_SPARK_OPERATOR", "/nonexistent/spark-operator")
	_, err := StartOperatorStack(context.Background(), t.TempDir(), slog.Default())
	require.ErrorContains(t, err, "make spark-operator")
}

func TestOperatorDriverTemplateCarriesConfigMapVolume(t *testing.T) {
	t.Parallel()
	_, ctx, name := opTest(t, "op-template", 30*time.Second)

	// Without the webhook, a ConfigMap volume reaches the driver pod only
	// through spec.driver.template. The operator writes it to the pod
	// template file spark-submit reads (submission.go,
	// driverPodTemplateOption), and Spark keeps the template's volumes and
	// the driver container's mounts.
	app := sparkApp(name, map[string]string{SimRun: "100ms"}, nil)
	spec := app.Object["spec"].(map[string]any)
	delete(spec, "volumes")
	delete(spec["driver"].(map[string]any), "volumeMounts")
	spec["driver"].(map[string]any)["template"] = map[string]any{"spec": map[string]any{
		"volumes": []any{map[string]any{"name": "tether-query", "configMap": map[string]any{"name": name + "-query"}}},
		"containers": []any{map[string]any{"name": DriverContainer,
			"volumeMounts": []any{map[string]any{"name": "tether-query", "mountPath": "/etc/tether/query", "readOnly": true}}}},
	}}
	r, _ := create(t, ctx, app)
	// The kubelet stand-in, as a real kubelet, does not start a pod whose
	// ConfigMap is missing. The pod stays ContainerCreating until it exists.
	pods := opStack.cs.CoreV1().Pods("default")
	require.Eventually(t, func() bool {
		p, err := pods.Get(ctx, name+"-driver", metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "ContainerCreating"
	}, 20*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	p, err := pods.Get(ctx, name+"-driver", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, corev1.PodPending, p.Status.Phase, "started without its ConfigMap")
	_, err = opStack.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-query", Namespace: "default"},
		Data:       map[string]string{QueryKey: "SELECT 42\nFROM t"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	r.waitFor(t, "COMPLETED", 20*time.Second)
	pod, err := pods.Get(ctx, name+"-driver", metav1.GetOptions{})
	require.NoError(t, err)
	b, err := pods.GetLogs(name+"-driver", &corev1.PodLogOptions{Container: DriverContainer}).DoRaw(ctx)
	require.NoError(t, err)
	require.Contains(t, string(b), "query: SELECT 42\n", "the driver saw the query")
	require.Len(t, pod.Spec.Volumes, 1)
	require.Equal(t, name+"-query", pod.Spec.Volumes[0].ConfigMap.Name)
	require.Equal(t, "/etc/tether/query", pod.Spec.Containers[0].VolumeMounts[0].MountPath)
	// With a driver template the operator does not add the
	// mutated-by-spark-operator label (submission.go, driverConfOption).
	require.NotContains(t, pod.Labels, "sparkoperator.k8s.io/mutated-by-spark-operator")
}
