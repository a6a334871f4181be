package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// The Kubernetes control plane with the real spark-operator (its
// controller, the garbage collector and the kubelet stand-in:
// kubetest.StartOperatorStack) is started by the first Spark test that
// needs it and stopped when the package's tests end (stopKube, from
// TestMain). Jobs script their driver pods through the kubelet's
// tether.sim.* spark conf keys.
var kube sharedStack[*kubetest.OperatorStack]

func kubeEnv(t *testing.T) (*kubetest.Env, *kubetest.Proxy, *kubetest.OperatorStack) {
	t.Helper()
	stack := kube.get(t, "tether-e2e-kube-", "the Kubernetes test environment", kubetest.StartOperatorStack)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("spark-operator log ends:\n%s", stack.OperatorLog())
		}
	})
	return stack.Env, stack.Proxy, stack
}

// simKube is a control plane whose SparkApplications the Simulator moves
// instead of spark-operator (kubetest.StartStack), for the one test that
// plays the operator's transitions itself at moments it chooses
// (TestDatabaseOutageSpark: a state change while the database is down, a
// completion only once the job is followed again), which the real operator
// and the kubelet stand-in cannot be told to make. Started by the first test
// that needs it, stopped by stopKube.
var simKube sharedStack[*kubetest.Stack]

func simKubeEnv(t *testing.T) (*kubetest.Env, *kubetest.Proxy, *kubetest.Simulator) {
	t.Helper()
	stack := simKube.get(t, "tether-e2e-kubesim-", "the simulated Kubernetes test environment", kubetest.StartStack)
	return stack.Env, stack.Proxy, stack.Sim
}

func stopKube() {
	kube.stop()
	simKube.stop()
}

// sharedStack is a control plane started by the first test that needs it
// (in a temporary directory of its own) and stopped, the directory
// removed, by stop.
type sharedStack[S interface{ Stop() error }] struct {
	once  sync.Once
	dir   string
	stack S
	err   error
}

// get starts the stack with start the first time. what names it in the
// failure.
func (s *sharedStack[S]) get(t *testing.T, dirPrefix, what string, start func(context.Context, string, *slog.Logger) (S, error)) S {
	t.Helper()
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", dirPrefix); s.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.stack, s.err = start(ctx, s.dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	})
	require.NoError(t, s.err, "starting "+what)
	return s.stack
}

func (s *sharedStack[S]) stop() {
	if err := s.stack.Stop(); err != nil { // a nil stack stops as nothing
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// newSparkHarness runs agents with the sparkeks plugin pointed at the
// control plane through the proxy, and a spark-sql command.
func newSparkHarness(t *testing.T, tm timings) *harness {
	t.Helper()
	_, proxy, _ := kubeEnv(t)
	plugins := fmt.Sprintf("  sparkeks:\n    config: {kubeconfig: %q, poll_interval: 200ms}\n", proxy.Kubeconfig)
	commands := "  spark-sql:\n    plugin: sparkeks\n    context: {image: \"spark:3.5.3\", main_application_file: \"local:///opt/tether/spark_sql.py\"}\n"
	return newHarnessWith(t, pgtest.URL(t), tm, plugins, commands)
}

// submitSpark submits a Spark SQL job. conf (its spark_conf) scripts the
// driver pod through the kubelet stand-in's tether.sim.* keys.
func (h *harness) submitSpark(ctx context.Context, conf map[string]string) string {
	h.t.Helper()
	raw, err := json.Marshal(map[string]any{"query": "SELECT count(*) FROM events", "spark_conf": conf})
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "spark-sql", Plugin: "sparkeks", Context: raw, Submitter: "e2e"})
	require.NoError(h.t, err)
	return j.ID
}

// waitSubmitted waits until the job's handle records the application's UID.
func (h *harness) waitSubmitted(ctx context.Context, id string, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var handle []byte
		_ = h.pool.QueryRow(ctx, `SELECT handle FROM active_jobs WHERE job_id = $1`, id).Scan(&handle)
		if strings.Contains(string(handle), `"uid":"`) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s: no application UID in its handle after %s: %s", id, within, h.eventSummary(ctx, id))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// kill -9 the agent following a running SparkApplication, with a second
// agent up. The second resumes the job, follows the same application (one
// ever created) and the job succeeds with the application's outputs.
func TestSparkKill9ResumesSameApplication(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newSparkHarness(t, ecsKillTimings())
	env, _, stack := kubeEnv(t)

	const lines = 16 // one every 0.5 s: printed before and after the kill
	a := h.startAgent(ctx, "spark-a")
	id := h.submitSpark(ctx, map[string]string{kubetest.SimRun: "8s", kubetest.KubeletLogLines: fmt.Sprint(lines)})
	name := "spark-sql-job-" + id
	h.waitSubmitted(ctx, id, 20*time.Second)
	require.Equal(t, a.name, h.holder(ctx, id))
	b := h.startAgent(ctx, "spark-b")
	app, err := env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	h.waitStdout(ctx, id, "driver line 2 of 16\n", 20*time.Second)

	h.kill9(a)
	resumed := h.waitEvent(ctx, id, "resumed", 20*time.Second)
	assert.Equal(t, b.gen, resumed.Generation, "the surviving agent resumes it")

	out := h.sparkSucceededOnce(ctx, stack, id, name)
	assert.Equal(t, string(app.GetUID()), out["uid"], "the job followed the application it created")
	assert.Equal(t, name+"-driver", out["driver_pod"])
	assert.NotEmpty(t, out["spark_application_id"])
	h.checkResumedSpark(ctx, env, id, name, b.gen, lines)
}

// kill -9 the agent while its application runs and, meanwhile, kill the
// operator too, starting it again only after the surviving agent resumed
// the job. The operator's state machine picks the application up (its
// driver finished while neither watched), the job succeeds, one
// SparkApplication and one driver ever, and the job's stdout has every
// driver log line once.
func TestSparkKill9AndOperatorRestartResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newSparkHarness(t, ecsKillTimings())
	env, _, stack := kubeEnv(t)
	res := env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default")

	const lines = 12 // over 6 s
	a := h.startAgent(ctx, "spark-op-a")
	id := h.submitSpark(ctx, map[string]string{kubetest.SimRun: "6s", kubetest.KubeletLogLines: fmt.Sprint(lines)})
	name := "spark-sql-job-" + id
	h.waitSubmitted(ctx, id, 20*time.Second)
	b := h.startAgent(ctx, "spark-op-b")
	h.waitStdout(ctx, id, "driver line 2 of 12\n", 20*time.Second)
	app, err := res.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "RUNNING", appState(app))

	h.kill9(a)
	require.NoError(t, stack.KillOperator())
	t.Cleanup(func() {
		if !stack.Operator.Running() {
			_ = stack.StartOperator(context.Background())
		}
	})
	resumed := h.waitEvent(ctx, id, "resumed", 20*time.Second)
	assert.Equal(t, b.gen, resumed.Generation, "the surviving agent resumes it")
	// The driver ends while the operator is down. The application stays
	// RUNNING until the operator is back.
	require.Eventually(t, func() bool {
		p, err := env.Clientset.CoreV1().Pods("default").Get(ctx, name+"-driver", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded
	}, 20*time.Second, 20*time.Millisecond, "the driver pod succeeds")
	app, err = res.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "RUNNING", appState(app), "nothing moved the application while the operator was down")
	require.NotEqual(t, store.StatusSucceeded, h.job(ctx, id).Status)
	require.NoError(t, stack.StartOperator(ctx))

	out := h.sparkSucceededOnce(ctx, stack, id, name)
	assert.Equal(t, string(app.GetUID()), out["uid"])
	assert.Equal(t, "COMPLETED", out["state"])
	h.checkResumedSpark(ctx, env, id, name, b.gen, lines)
}

// sparkSucceededOnce waits for the job to end and requires it succeeded,
// with exactly one SparkApplication (name) ever created for it. It
// returns the job's result.
func (h *harness) sparkSucceededOnce(ctx context.Context, stack *kubetest.OperatorStack, id, name string) map[string]any {
	h.t.Helper()
	h.waitTerminal(ctx, []string{id}, 40*time.Second)
	j := h.job(ctx, id)
	require.Equal(h.t, store.StatusSucceeded, j.Status, "error: %s; events: %s", j.Error, h.eventSummary(ctx, id))
	assert.Equal(h.t, 1, stack.Created("default", name), "exactly one SparkApplication ever created for the job")
	var out map[string]any
	require.NoError(h.t, json.Unmarshal(j.Result, &out))
	return out
}

// checkResumedSpark checks a resumed Spark job. Its timeline ends in the
// agent generation gen, its stdout holds each of the lines driver lines
// once, and its application (name) had one driver pod ever.
func (h *harness) checkResumedSpark(ctx context.Context, env *kubetest.Env, id, name, gen string, lines int) {
	h.t.Helper()
	final := h.checkTimeline(ctx, id)
	assert.Equal(h.t, gen, final.Generation)
	h.assertDriverLinesOnce(ctx, id, lines)
	assert.Equal(h.t, 1, driverPods(ctx, h.t, env, name), "one driver pod ever")
}

func appState(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "state")
	return s
}

// driverPods counts the application's driver pods (they stay after it
// ends, until it is deleted).
func driverPods(ctx context.Context, t testing.TB, env *kubetest.Env, name string) int {
	t.Helper()
	l, err := env.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "spark-role=driver,sparkoperator.k8s.io/app-name=" + name})
	require.NoError(t, err)
	return len(l.Items)
}

// assertDriverLinesOnce checks the job's stored stdout holds the kubelet's
// "driver line i of n", each once and in order.
func (h *harness) assertDriverLinesOnce(ctx context.Context, id string, n int) {
	h.t.Helper()
	var want, got []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("driver line %d of %d", i, n))
	}
	for _, l := range strings.Split(h.stdout(ctx, id), "\n") {
		if strings.HasPrefix(l, "driver line ") {
			got = append(got, l)
		}
	}
	assert.Equal(h.t, want, got, "job %s: every driver log line once, in order; events: %s", id, h.eventSummary(ctx, id))
}

// An application deleted by hand while no agent watched. The job that
// resumes it ends outcome_unknown and nothing is submitted again.
func TestSparkApplicationDeletedWhileNoAgentWatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newSparkHarness(t, ecsKillTimings())
	env, _, stack := kubeEnv(t)
	res := env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default")

	a := h.startAgent(ctx, "spark-alone")
	id := h.submitSpark(ctx, map[string]string{kubetest.SimOutcome: "hang"})
	name := "spark-sql-job-" + id
	h.waitSubmitted(ctx, id, 20*time.Second)
	h.kill9(a)

	fg := metav1.DeletePropagationForeground
	require.NoError(t, res.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}))
	require.Eventually(t, func() bool {
		_, err := res.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 20*time.Second, 50*time.Millisecond)

	h.startAgent(ctx, "spark-later")
	h.waitTerminal(ctx, []string{id}, 40*time.Second)
	j := h.job(ctx, id)
	require.Equal(t, store.StatusFailed, j.Status, "events: %s", h.eventSummary(ctx, id))
	assert.Equal(t, plugin.OutcomeUnknown, j.ErrorClass)
	assert.Contains(t, j.Error, "not resubmitting")
	assert.Contains(t, h.eventSummary(ctx, id), "resumed")
	_, err := res.Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "not resubmitted: %v", err)
	assert.Equal(t, 1, stack.Created("default", name))
	h.checkTimeline(ctx, id)
}
