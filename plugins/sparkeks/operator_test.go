package main

// The real plugin binary, through go-plugin, against the real kubeflow
// spark-operator (internal/kubetest.StartOperatorStack). kube-apiserver +
// etcd, spark-operator's controller running the stand-in spark-submit,
// kube-controller-manager's garbage collector and the kubelet stand-in that
// runs the driver pods as their tether.sim.* spark conf scripts them and
// serves their logs through the apiserver's pods/log. The Simulator-backed
// tests in kube_test.go cover what the operator cannot be made to do (API
// faults through the proxy, refused credentials, EKS access).

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// The operator stack, started by the first test that needs it and stopped
// by TestMain (stopOperatorStack).
var opStack struct {
	once sync.Once
	dir  string
	s    *kubetest.OperatorStack
	err  error
}

func operatorStack(t *testing.T) *kubetest.OperatorStack {
	t.Helper()
	opStack.once.Do(func() {
		if opStack.dir, opStack.err = os.MkdirTemp("", "tether-sparkeks-operator-"); opStack.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		opStack.s, opStack.err = kubetest.StartOperatorStack(ctx, opStack.dir,
			slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	})
	require.NoError(t, opStack.err, "starting the operator stack")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("spark-operator log ends:\n%s", opStack.s.OperatorLog())
		}
	})
	return opStack.s
}

func stopOperatorStack() {
	if opStack.s != nil {
		if err := opStack.s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "operator stack:", err)
		}
	}
	if opStack.dir != "" {
		os.RemoveAll(opStack.dir)
	}
}

// opJob is a job against the operator stack. conf is its spark_conf (the
// kubelet's tether.sim.* keys script the driver).
func opJob(t *testing.T, s *kubetest.OperatorStack, conf map[string]string, extra map[string]any) *plugin.Job {
	t.Helper()
	return jobFor(t, s.Proxy.Kubeconfig, conf, extra)
}

// startOpJob starts the operator stack if it is not up, and makes a job
// against it (as opJob) and a watch on its application in namespace
// default, for a test of its own. ctx is the test's.
func startOpJob(t *testing.T, conf map[string]string, extra map[string]any) (s *kubetest.OperatorStack, ctx context.Context, job *plugin.Job, name string, w *appWatch) {
	t.Helper()
	s = operatorStack(t)
	ctx = testCtx(t)
	job = opJob(t, s, conf, extra)
	name = "spark-sql-job-" + job.ID
	return s, ctx, job, name, watchApp(t, ctx, s, "default", name)
}

// appWatch records, from watches established before the job starts, the
// successive applicationState.state values of one SparkApplication, the
// highest executionAttempts, and every driver pod (by UID) the application
// ever had.
type appWatch struct {
	s         *kubetest.OperatorStack
	namespace string
	name      string

	mu       sync.Mutex
	states   []string
	attempts int64
	pods     map[types.UID]corev1.PodPhase
	gone     bool
}

func watchApp(t *testing.T, ctx context.Context, s *kubetest.OperatorStack, namespace, name string) *appWatch {
	t.Helper()
	w := &appWatch{s: s, namespace: namespace, name: name, pods: map[types.UID]corev1.PodPhase{}}
	apps := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace(namespace)
	pods := s.Env.Clientset.CoreV1().Pods(namespace)
	// resourceVersion 0: the current state, then every change. Again
	// whenever a watch ends.
	appOpts := metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: "0"}
	podOpts := metav1.ListOptions{LabelSelector: "sparkoperator.k8s.io/app-name=" + name, ResourceVersion: "0"}
	start := func(open func() (watch.Interface, error), see func(watch.Event)) {
		first, err := open()
		require.NoError(t, err)
		go func() {
			for wi := first; ; {
				for ev := range wi.ResultChan() {
					see(ev)
				}
				wi.Stop()
				for {
					if ctx.Err() != nil {
						return
					}
					if wi, err = open(); err == nil {
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}()
	}
	start(func() (watch.Interface, error) { return apps.Watch(ctx, appOpts) }, func(ev watch.Event) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return
		}
		st, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "state")
		n, _, _ := unstructured.NestedInt64(u.Object, "status", "executionAttempts")
		w.mu.Lock()
		defer w.mu.Unlock()
		if ev.Type == watch.Deleted {
			w.gone = true
			return
		}
		w.gone = false
		if len(w.states) == 0 || w.states[len(w.states)-1] != st {
			w.states = append(w.states, st)
		}
		w.attempts = max(w.attempts, n)
	})
	start(func() (watch.Interface, error) { return pods.Watch(ctx, podOpts) }, func(ev watch.Event) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || p.Labels["spark-role"] != "driver" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if ev.Type == watch.Deleted {
			p.Status.Phase = "Deleted"
		}
		w.pods[p.UID] = p.Status.Phase
	})
	t.Cleanup(func() { t.Logf("%s/%s: states %q, driver pods %v", namespace, name, w.seen(), w.driverPods()) })
	return w
}

func (w *appWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.states...)
}

func (w *appWatch) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.states) == 0 {
		return ""
	}
	return w.states[len(w.states)-1]
}

func (w *appWatch) executionAttempts() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.attempts
}

func (w *appWatch) driverPods() map[types.UID]corev1.PodPhase {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[types.UID]corev1.PodPhase{}
	for k, v := range w.pods {
		out[k] = v
	}
	return out
}

func (w *appWatch) waitState(t *testing.T, want string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return w.state() == want }, within, 20*time.Millisecond, "want %s; states seen %v", want, w.seen())
}

// waitPod waits until one driver pod is in phase.
func (w *appWatch) waitPod(t *testing.T, phase corev1.PodPhase, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, p := range w.driverPods() {
			if p == phase {
				return true
			}
		}
		return false
	}, within, 20*time.Millisecond, "want a driver pod %s; pods %v", phase, w.driverPods())
}

// waitAllGone waits until the application, its query ConfigMap and its
// driver pods (the garbage collector's work) are gone.
func (w *appWatch) waitAllGone(t *testing.T, ctx context.Context, within time.Duration) {
	t.Helper()
	cs := w.s.Env.Clientset
	require.Eventually(t, func() bool {
		_, err := w.s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false
		}
		if _, err := cs.CoreV1().ConfigMaps(w.namespace).Get(ctx, w.name+"-query", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false
		}
		l, err := cs.CoreV1().Pods(w.namespace).List(ctx, metav1.ListOptions{LabelSelector: "sparkoperator.k8s.io/app-name=" + w.name})
		return err == nil && len(l.Items) == 0
	}, within, 20*time.Millisecond, "SparkApplication %s/%s, its ConfigMap and its driver pods should be gone; states %v, pods %v",
		w.namespace, w.name, w.seen(), w.driverPods())
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

// adjacent says whether a is followed directly by b in seen.
func adjacent(seen []string, a, b string) bool {
	for i := 0; i+1 < len(seen); i++ {
		if seen[i] == a && seen[i+1] == b {
			return true
		}
	}
	return false
}

// requireLinesOnce checks that stdout holds "driver line i of n" for every
// i, each exactly once and in order.
func requireLinesOnce(t *testing.T, stdout string, n int) {
	t.Helper()
	var got []string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "driver line ") {
			got = append(got, l)
		}
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("driver line %d of %d", i+1, n)
	}
	require.Equal(t, want, got, "every driver log line exactly once, in order; stdout:\n%s", stdout)
}

// A job runs to completion. The operator moves it SUBMITTED → RUNNING →
// SUCCEEDING → COMPLETED, and the driver's log, which the kubelet serves and
// the plugin reads through the apiserver's pods/log, arrives in the job's
// stdout, each line once.
func TestOperatorJobCompletes(t *testing.T) {
	t.Parallel()
	const lines = 8
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimRun: "1600ms", kubetest.KubeletLogLines: fmt.Sprint(lines)}, nil)

	res, rt := executeOK(t, ctx, connect(t), job)
	var out map[string]any
	require.NoError(t, json.Unmarshal(res.Output, &out))
	require.Equal(t, "COMPLETED", out["state"])
	require.Equal(t, name+"-driver", out["driver_pod"])
	require.NotEmpty(t, out["spark_application_id"])

	w.waitState(t, "COMPLETED", 5*time.Second)
	require.True(t, inOrder(w.seen(), []string{"SUBMITTED", "RUNNING", "SUCCEEDING", "COMPLETED"}), "states %v", w.seen())
	require.True(t, adjacent(w.seen(), "SUCCEEDING", "COMPLETED"), "states %v", w.seen())
	requireLinesOnce(t, rt.StdoutString(), lines)
	// The follower starts once the driver pod is named (SUBMITTED). Until
	// its container runs, the cached pod says it is waiting, which is no
	// warning. The plugin looks again within a second and then streams.
	require.Contains(t, rt.StderrString(), "streaming the log of driver pod default/"+name+"-driver")
	require.NotContains(t, rt.StderrString(), "driver logs unavailable", "a driver that is starting is not a warning")

	app, err := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, out["uid"], string(app.GetUID()))
	require.Equal(t, out["spark_application_id"], nestedString(app, "status", "sparkApplicationId"))
	require.Equal(t, 1, s.Created("default", name))
	require.Len(t, w.driverPods(), 1)
	require.EqualValues(t, 1, w.executionAttempts())
}

func nestedString(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

// A driver that fails. The job fails permanently with the operator's
// message, restartPolicy Never keeps the operator from running it again,
// and the host's Cleanup deletes the application (UID precondition) and the
// garbage collector its driver pod and ConfigMap.
func TestOperatorFailedDriverIsPermanentAndNotRerun(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimOutcome: "failed", kubetest.KubeletExitCode: "3",
		kubetest.SimMessage: "boom: table events not found", kubetest.SimRun: "300ms"}, nil)

	rt := plugintest.NewRuntime(nil)
	_, err := connect(t).Execute(ctx, job, rt)
	requireClass(t, err, plugin.Permanent)
	require.Contains(t, err.Error(), "FAILED: driver container failed with ExitCode: 3, Reason: Error")
	// The driver's last line (the kubelet prints the message) reached stdout.
	require.Contains(t, rt.StdoutString(), "boom: table events not found\n")

	app, err := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	typ, _, _ := unstructured.NestedString(app.Object, "spec", "restartPolicy", "type")
	require.Equal(t, "Never", typ)
	// FAILED is terminal under Never. The operator's requeues (at most 1 s
	// apart here) never make it PENDING_RERUN.
	require.Never(t, func() bool { return w.state() != "FAILED" }, 1500*time.Millisecond, 20*time.Millisecond, "states %v", w.seen())
	require.NotContains(t, w.seen(), "PENDING_RERUN")
	require.EqualValues(t, 1, w.executionAttempts())
	require.Len(t, w.driverPods(), 1)
	require.Equal(t, 1, s.Created("default", name))

	job.Handle = rt.Handle()
	require.NoError(t, connect(t).Cleanup(ctx, job))
	w.waitAllGone(t, ctx, 20*time.Second)
	for uid, phase := range w.driverPods() {
		require.Equal(t, corev1.PodPhase("Deleted"), phase, "driver pod %s", uid)
	}

	// Never is forced. A template asking the operator to rerun on failure
	// is refused before anything is submitted.
	rerun := opJob(t, s, nil, map[string]any{"template": map[string]any{"spec": map[string]any{
		"restartPolicy": map[string]any{"type": "OnFailure", "onFailureRetries": 3}}}})
	_, err = connect(t).Execute(ctx, rerun, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.Permanent)
	require.Contains(t, err.Error(), "template.spec.restartPolicy.type: must be \"Never\"")
	require.Zero(t, s.Created("default", "spark-sql-job-"+rerun.ID))
}

// The driver pod vanishes while the application runs. The operator fails it
// with "driver pod not found", which may come after the query finished, so
// the outcome is unknown.
func TestOperatorDriverPodVanishedIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimOutcome: "vanish", kubetest.SimRun: "400ms"}, nil)

	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.OutcomeUnknown)
	require.Contains(t, err.Error(), "FAILED: driver pod not found")
	require.True(t, inOrder(w.seen(), []string{"SUBMITTED", "RUNNING", "FAILED"}), "states %v", w.seen())
	require.NotContains(t, w.seen(), "PENDING_RERUN")
	require.Equal(t, 1, s.Created("default", name))
}

// The driver pod is deleted while the query runs (a node drained, an
// operator's kubectl delete). Its kubelet records the driver container
// ended by SIGTERM (exit 143) before the pod goes, so the operator fails
// the application with that exit code, not "driver pod not found". The
// query was interrupted, not at fault, and may have done some of its
// work: outcome_unknown, never permanent.
func TestOperatorDriverPodDeletedIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimOutcome: "hang"}, nil)
	rt := plugintest.NewRuntime(nil)
	done := make(chan error, 1)
	go func() { _, err := connect(t).Execute(ctx, job, rt); done <- err }()
	w.waitState(t, "RUNNING", 20*time.Second)
	require.NoError(t, s.Env.Clientset.CoreV1().Pods("default").Delete(ctx, name+"-driver", metav1.DeleteOptions{}))

	err := <-done
	requireClass(t, err, plugin.OutcomeUnknown)
	require.Contains(t, err.Error(), "ExitCode: 143", "the kubelet stand-in records the SIGTERM before the pod goes")
	require.Contains(t, err.Error(), "driver pod "+name+"-driver was deleted")
	require.True(t, inOrder(w.seen(), []string{"SUBMITTED", "RUNNING", "FAILED"}), "states %v", w.seen())
	require.Equal(t, 1, s.Created("default", name))
}

// The kubelet evicts the driver pod for node pressure: Failed, reason
// Evicted, the container killed (exit 137). The query is not at fault:
// outcome_unknown, naming the eviction.
func TestOperatorDriverPodEvictedIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimOutcome: "evicted", kubetest.SimRun: "400ms"}, nil)

	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.OutcomeUnknown)
	require.Contains(t, err.Error(), "ExitCode: 137")
	require.Contains(t, err.Error(), "driver pod "+name+"-driver was evicted: The node was low on resource: memory.")
	require.True(t, inOrder(w.seen(), []string{"SUBMITTED", "RUNNING", "FAILED"}), "states %v", w.seen())
	require.Equal(t, 1, s.Created("default", name))
}

// An image that never pulls. startup_timeout fails the job naming
// ImagePullBackOff, and the plugin deletes the application. The garbage
// collector removes its driver pod.
func TestOperatorStartupTimeoutNamesTheImagePull(t *testing.T) {
	t.Parallel()
	_, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimOutcome: "image_pull"}, map[string]any{"startup_timeout": "2s"})

	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.Permanent)
	require.Contains(t, err.Error(), "startup_timeout 2s")
	require.Contains(t, err.Error(), "(state SUBMITTED)")
	require.Contains(t, err.Error(), "driver pod "+name+"-driver container spark-kubernetes-driver waiting: ImagePullBackOff")
	require.Contains(t, err.Error(), `Back-off pulling image "spark:3.5.3"`)
	require.Contains(t, err.Error(), "deleted it")
	require.NotContains(t, w.seen(), "RUNNING")
	w.waitAllGone(t, ctx, 20*time.Second)
	require.Len(t, w.driverPods(), 1)
}

// A retry (attempt 2) while attempt 1's application RUNS adopts it. One
// SparkApplication and one driver pod ever, and the retry's stdout has the
// whole driver log, once.
func TestOperatorRetryAdoptsTheRunningApplication(t *testing.T) {
	t.Parallel()
	const lines = 6
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimRun: "3s", kubetest.KubeletLogLines: fmt.Sprint(lines)}, nil)
	executeUntilSubmitted(t, ctx, job) // attempt 1 lost its agent; the host retries it
	w.waitState(t, "RUNNING", 20*time.Second)
	first, err := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)

	job.Attempt = 2
	res, rt := executeOK(t, ctx, connect(t), job)
	require.Contains(t, string(res.Output), string(first.GetUID()))
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Contains(t, rt.StderrString(), "of attempt 1 exists and it is RUNNING and may run (or have run) the query; adopting it as attempt 2's")
	requireLinesOnce(t, rt.StdoutString(), lines)
	require.Equal(t, 1, s.Created("default", name), "never submitted again")
	require.Len(t, w.driverPods(), 1, "one driver ever")
	require.EqualValues(t, 1, w.executionAttempts())
	requireAdopted(t, rt)
}

// A retry whose attempt-1 application COMPLETED succeeds at once with it.
func TestOperatorRetryAdoptsACompletedApplication(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimRun: "200ms"}, nil)
	c := connect(t)
	first, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)

	job.Attempt = 2
	res, rt := executeOK(t, ctx, c, job)
	require.JSONEq(t, string(first.Output), string(res.Output), "the same application's outputs")
	require.Contains(t, rt.StderrString(), "exists and it completed; adopting it as attempt 2's")
	// Created counts this application's successful creates. The proxy's
	// count for the whole collection also moves with the parallel tests
	// sharing the stack, so it cannot say "none by this retry".
	require.Equal(t, 1, s.Created("default", name), "never created again")
	require.Len(t, w.driverPods(), 1)
}

// spark-submit is refused (a ResourceQuota allows no pods, so creating the
// driver pod fails): SUBMISSION_FAILED, then FAILED under restartPolicy
// Never, never submitted again. The job fails retriably with the
// operator's message: no driver ran, and a quota full for a moment must
// not fail it for good.
func TestOperatorSubmissionRefusedIsRetriable(t *testing.T) {
	t.Parallel()
	s := operatorStack(t)
	ctx := testCtx(t)
	ns := fmt.Sprintf("tether-quota-%d", quotaNS.Add(1))
	cs := s.Env.Clientset
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// No quota controller runs. The test sets the status it would.
	none := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	q, err := cs.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-pods"}, Spec: corev1.ResourceQuotaSpec{Hard: none}}, metav1.CreateOptions{})
	require.NoError(t, err)
	q.Status = corev1.ResourceQuotaStatus{Hard: none, Used: none}
	_, err = cs.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{})
	require.NoError(t, err)

	job := opJob(t, s, map[string]string{kubetest.SimRun: "100ms"}, map[string]any{"namespace": ns})
	name := "spark-sql-job-" + job.ID
	w := watchApp(t, ctx, s, ns, name)
	_, err = connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.Retriable)
	require.Contains(t, err.Error(), "failed to submit spark application")
	require.Contains(t, err.Error(), "exceeded quota: no-pods")
	// The plugin ends on SUBMISSION_FAILED. The operator then makes it FAILED.
	w.waitState(t, "FAILED", 10*time.Second)
	require.True(t, inOrder(w.seen(), []string{"SUBMISSION_FAILED", "FAILED"}), "states %v", w.seen())
	require.NotContains(t, w.seen(), "SUBMITTED")
	require.Never(t, func() bool { return w.state() != "FAILED" }, time.Second, 20*time.Millisecond, "states %v", w.seen())
	app, err := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	attempts, _, _ := unstructured.NestedInt64(app.Object, "status", "submissionAttempts")
	require.EqualValues(t, 1, attempts, "submitted once")
	require.Empty(t, w.driverPods())
	require.Equal(t, 1, s.Created(ns, name))
}

var quotaNS atomic.Int64

// time_to_live: the plugin sets spec.timeToLiveSeconds (at least 10m, too
// long to wait for here). Once it is shortened, as if the time had passed,
// the operator deletes the completed application and the garbage collector
// its driver pod and ConfigMap.
func TestOperatorTimeToLiveDeletesTheCompletedApplication(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimRun: "100ms"}, map[string]any{"time_to_live": "10m"})
	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)

	apps := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default")
	app, err := apps.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	ttl, _, _ := unstructured.NestedInt64(app.Object, "spec", "timeToLiveSeconds")
	require.EqualValues(t, 600, ttl)
	require.NotEmpty(t, nestedString(app, "status", "terminationTime"))
	_, err = s.Env.Clientset.CoreV1().ConfigMaps("default").Get(ctx, name+"-query", metav1.GetOptions{})
	require.NoError(t, err, "the query ConfigMap lives as long as its application")

	_, err = apps.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"timeToLiveSeconds":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	w.waitAllGone(t, ctx, 20*time.Second)
}

// Cleanup is fenced by UID and attempt. Attempt 1 failed, attempt 2
// replaced its application (the foreground deletion finished by the garbage
// collector) and runs. Attempt 1's late Cleanup, with and without its
// handle, leaves attempt 2's alone. Attempt 2's deletes it, and its pod goes.
func TestOperatorCleanupIsFencedByUIDAndAttempt(t *testing.T) {
	t.Parallel()
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimOutcome: "failed", kubetest.SimMessage: "first try", kubetest.SimRun: "100ms"}, nil)
	c := connect(t)
	rt1 := plugintest.NewRuntime(nil)
	_, err := c.Execute(ctx, job, rt1)
	require.ErrorContains(t, err, "driver container failed with ExitCode: 1")

	job2 := *job
	job2.Attempt = 2
	job2.Context = opJob(t, s, map[string]string{kubetest.SimOutcome: "hang"}, nil).Context
	rt2 := executeUntilSubmitted(t, ctx, &job2)
	apps := s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default")
	second, err := apps.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "2", second.GetLabels()["tether.dev/job-attempt"])
	require.Equal(t, 2, s.Created("default", name))
	w.waitPod(t, corev1.PodRunning, 20*time.Second)

	job.Handle = rt1.Handle()
	require.NoError(t, c.Cleanup(ctx, job))
	job.Handle = nil
	require.NoError(t, c.Cleanup(ctx, job))
	app, err := apps.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err, "attempt 2's application is not attempt 1's to delete")
	require.Equal(t, second.GetUID(), app.GetUID())
	_, err = s.Env.Clientset.CoreV1().ConfigMaps("default").Get(ctx, name+"-query", metav1.GetOptions{})
	require.NoError(t, err, "nor its ConfigMap")

	job2.Handle = rt2.Handle()
	require.NoError(t, c.Cleanup(ctx, &job2))
	w.waitAllGone(t, ctx, 20*time.Second)
	require.Len(t, w.driverPods(), 2, "attempt 1's driver and attempt 2's")
}

// The operator is killed while the application runs and its driver
// finishes meanwhile. Started again, its state machine picks the
// application up where it was, and the job completes with every log line
// once. Not parallel. The other tests need a running operator (top-level
// sequential tests run before the parallel ones).
func TestOperatorKilledMidRunJobStillCompletes(t *testing.T) {
	const lines = 5
	s, ctx, job, name, w := startOpJob(t, map[string]string{kubetest.SimRun: "1500ms", kubetest.KubeletLogLines: fmt.Sprint(lines)}, nil)

	rt := plugintest.NewRuntime(nil)
	type result struct {
		res *plugin.Result
		err error
	}
	done := make(chan result, 1)
	go func() { res, err := connect(t).Execute(ctx, job, rt); done <- result{res, err} }()
	w.waitState(t, "RUNNING", 20*time.Second)
	require.NoError(t, s.KillOperator())
	t.Cleanup(func() {
		if !s.Operator.Running() {
			_ = s.StartOperator(context.Background())
		}
	})
	w.waitPod(t, corev1.PodSucceeded, 20*time.Second)
	require.Equal(t, "RUNNING", w.state(), "nothing moves the application while the operator is down")
	require.NoError(t, s.StartOperator(ctx))

	r := <-done
	require.NoError(t, r.err, "stderr: %s", rt.StderrString())
	require.Contains(t, string(r.res.Output), `"COMPLETED"`)
	require.True(t, inOrder(w.seen(), []string{"SUBMITTED", "RUNNING", "SUCCEEDING", "COMPLETED"}), "states %v", w.seen())
	requireLinesOnce(t, rt.StdoutString(), lines)
	require.Equal(t, 1, s.Created("default", name))
	require.Len(t, w.driverPods(), 1)
}
