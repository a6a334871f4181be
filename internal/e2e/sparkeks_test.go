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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// The Kubernetes control plane is started by the first Spark test that needs
// it and stopped when the package's tests end (stopKube, from TestMain).
var kube struct {
	once  sync.Once
	dir   string
	stack *kubetest.Stack
	err   error
}

func kubeEnv(t *testing.T) (*kubetest.Env, *kubetest.Proxy, *kubetest.Simulator) {
	t.Helper()
	kube.once.Do(func() {
		if kube.dir, kube.err = os.MkdirTemp("", "tether-e2e-kube-"); kube.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kube.stack, kube.err = kubetest.StartStack(ctx, kube.dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	})
	require.NoError(t, kube.err, "starting the Kubernetes test environment")
	return kube.stack.Env, kube.stack.Proxy, kube.stack.Sim
}

func stopKube() {
	if err := kube.stack.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}
	if kube.dir != "" {
		os.RemoveAll(kube.dir)
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

// submitSpark submits a Spark SQL job; sim scripts the simulated operator.
func (h *harness) submitSpark(ctx context.Context, sim map[string]string) string {
	h.t.Helper()
	raw, err := json.Marshal(map[string]any{"query": "SELECT count(*) FROM events", "spark_conf": sim})
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
// agent up: the second resumes the job, follows the same application (one
// ever created) and the job succeeds with the application's outputs.
func TestSparkKill9ResumesSameApplication(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newSparkHarness(t, ecsKillTimings())
	env, _, sim := kubeEnv(t)

	a := h.startAgent(ctx, "spark-a")
	id := h.submitSpark(ctx, map[string]string{kubetest.SimRun: "8s"})
	name := "spark-sql-job-" + id
	h.waitSubmitted(ctx, id, 20*time.Second)
	require.Equal(t, a.name, h.holder(ctx, id))
	b := h.startAgent(ctx, "spark-b")
	app, err := env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)

	h.kill9(a)
	resumed := h.waitEvent(ctx, id, "resumed", 20*time.Second)
	assert.Equal(t, b.gen, resumed.Generation, "the surviving agent resumes it")

	h.waitTerminal(ctx, []string{id}, 40*time.Second)
	j := h.job(ctx, id)
	require.Equal(t, store.StatusSucceeded, j.Status, "error: %s; events: %s", j.Error, h.eventSummary(ctx, id))
	assert.Equal(t, 1, sim.Created("default", name), "exactly one SparkApplication ever created for the job")
	var out map[string]any
	require.NoError(t, json.Unmarshal(j.Result, &out))
	assert.Equal(t, string(app.GetUID()), out["uid"], "the job followed the application it created")
	assert.Equal(t, name+"-driver", out["driver_pod"])
	assert.NotEmpty(t, out["spark_application_id"])
	final := h.checkTimeline(ctx, id)
	assert.Equal(t, b.gen, final.Generation)
}

// An application deleted by hand while no agent watched: the job that
// resumes it ends outcome_unknown and nothing is submitted again.
func TestSparkApplicationDeletedWhileNoAgentWatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newSparkHarness(t, ecsKillTimings())
	env, _, sim := kubeEnv(t)
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
	assert.Equal(t, string(plugin.OutcomeUnknown), j.ErrorClass)
	assert.Contains(t, j.Error, "not resubmitting")
	assert.Contains(t, h.eventSummary(ctx, id), "resumed")
	_, err := res.Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "not resubmitted: %v", err)
	assert.Equal(t, 1, sim.Created("default", name))
	h.checkTimeline(ctx, id)
}
