package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/store"
)

// backendOutageTimings are TestDatabaseOutage's. Agents self-fence after
// 5 s without a heartbeat, the janitor acts after 6 s. Two slots per agent,
// so both agents of a test hold some of its four jobs.
func backendOutageTimings() timings {
	tm := fast()
	tm.Capacity = 2
	tm.Keepalive = 500 * time.Millisecond
	tm.StaleJob = 6 * time.Second
	tm.OfflineAfter = 1500 * time.Millisecond
	return tm
}

// withoutShell removes the shell plugin and command from the harness's
// config before any agent starts. These tests run no shell job, and the
// shell plugin's kill grace would count against the self-fence point the
// short timings leave (the agent validates stale_job − 2×keepalive − the
// longest kill grace).
func (h *harness) withoutShell() *harness {
	h.t.Helper()
	b, err := os.ReadFile(h.cfgPath)
	require.NoError(h.t, err)
	cfg := shellPluginRE.ReplaceAllString(string(b), "")
	cfg = shellCommandRE.ReplaceAllString(cfg, "")
	require.NoError(h.t, os.WriteFile(h.cfgPath, []byte(cfg), 0o600))
	return h
}

var (
	shellPluginRE  = regexp.MustCompile(`(?m)^  shell:\n    config: \{[^\n]*\}\n`)
	shellCommandRE = regexp.MustCompile(`(?m)^  shell: \{plugin: shell\}\n`)
)

// outageLimits are the levers the outage tests' jobs run under. The
// default max_retry of 2 (so a job wrongly failed is launched again), with a
// short backoff so such a retry shows within the test.
var outageLimits = limits.Set{MaxRetry: 2, RetryBackoff: 200 * time.Millisecond, RetryBackoffMax: time.Second}

// outageDuring stops the server, runs during (if any) while it is down,
// waits out the rest of down, starts it again and returns how long it was
// unreachable (from the stop request to the start's return).
func (h *harness) outageDuring(ctx context.Context, c *pgcluster.Cluster, down time.Duration, during func()) time.Duration {
	h.t.Helper()
	begin := time.Now()
	// A clean (fast) shutdown, as in outage. The test cluster runs without
	// fsync.
	require.NoError(h.t, c.StopServer(ctx))
	stopped := time.Now()
	if during != nil {
		during()
	}
	sleep(ctx, down-time.Since(stopped))
	require.NoError(h.t, c.StartServer(ctx))
	took := time.Since(begin)
	h.pool.Reset()
	return took
}

// submitLimited submits a job under outageLimits.
func (h *harness) submitLimited(ctx context.Context, command, pluginName string, jobCtx map[string]any) string {
	h.t.Helper()
	raw, err := json.Marshal(jobCtx)
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: command, Plugin: pluginName, Context: raw, Submitter: "e2e", Limits: outageLimits})
	require.NoError(h.t, err)
	return j.ID
}

// submitECSJobs submits n ecs jobs whose one task runs script.
func (h *harness) submitECSJobs(ctx context.Context, n int, script string) []string {
	h.t.Helper()
	var ids []string
	for range n {
		ids = append(ids, h.submitLimited(ctx, "ecs", "ecs", map[string]any{
			"container_overrides": []any{map[string]any{"name": ecsContainer, "command": []string{"sh", "-c", script}}},
		}))
	}
	return ids
}

// waitECSPrinting waits until every job's task is launched and checkpointed
// and its log is being copied.
func (h *harness) waitECSPrinting(ctx context.Context, ids []string) {
	h.t.Helper()
	for _, id := range ids {
		h.waitHandle(ctx, id, 20*time.Second)
	}
	for _, id := range ids {
		h.waitStdout(ctx, id, "line 2\n", 20*time.Second)
	}
}

// submitSparkJobs submits n spark-sql jobs whose applications the
// simulated operator takes to RUNNING and leaves there (the test moves them
// on).
func (h *harness) submitSparkJobs(ctx context.Context, n int) []string {
	h.t.Helper()
	var ids []string
	for range n {
		ids = append(ids, h.submitLimited(ctx, "spark-sql", "sparkeks", map[string]any{
			"query":      "SELECT count(*) FROM events",
			"spark_conf": map[string]string{kubetest.SimOutcome: "hang"},
		}))
	}
	return ids
}

// assertSingleAttempt asserts the job ran as its first attempt only: never
// failed, never retried.
func (h *harness) assertSingleAttempt(ctx context.Context, id string) {
	h.t.Helper()
	j := h.job(ctx, id)
	evs := h.events(ctx, id)
	assert.Equal(h.t, 1, j.Attempt, "job %s: attempts; events: %s", id, h.eventSummary(ctx, id))
	assert.Empty(h.t, kindsOf(evs, "retry_scheduled"), "job %s was retried: %s", id, h.eventSummary(ctx, id))
	assert.Empty(h.t, kindsOf(evs, "failed"), "job %s failed on the way: %s", id, h.eventSummary(ctx, id))
}

// assertReleasedThenResumed asserts the job was released and, after that,
// resumed.
func (h *harness) assertReleasedThenResumed(ctx context.Context, id string) {
	h.t.Helper()
	var released, resumed bool
	for _, e := range h.events(ctx, id) {
		switch e.Kind {
		case "released":
			released = true
		case "resumed":
			resumed = resumed || released
		}
	}
	assert.True(h.t, released && resumed, "job %s must be released, then resumed: %s", id, h.eventSummary(ctx, id))
}

// assertLinesOnceOrEvents is assertLinesOnce, logging the job's events when
// its output is wrong.
func (h *harness) assertLinesOnceOrEvents(ctx context.Context, id string, n int) {
	h.t.Helper()
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	got := strings.Split(strings.TrimRight(h.stdout(ctx, id), "\n"), "\n")
	if !slices.Equal(want, got) {
		h.t.Errorf("job %s: stdout must hold \"line 1\" … \"line %d\", each once and in order; it holds %d lines: %s\nevents: %s",
			id, n, len(got), summarizeLines(got), h.eventSummary(ctx, id))
	}
}

// summarizeLines abbreviates a run of "line k" lines. Consecutive numbers
// are shown as ranges ("line 1‥3, line 1‥30").
func summarizeLines(lines []string) string {
	var parts []string
	start, prev := -1, -1
	flush := func() {
		switch {
		case start < 0:
		case start == prev:
			parts = append(parts, fmt.Sprintf("line %d", start))
		default:
			parts = append(parts, fmt.Sprintf("line %d‥%d", start, prev))
		}
	}
	for _, l := range lines {
		var k int
		if _, err := fmt.Sscanf(l, "line %d", &k); err != nil || fmt.Sprintf("line %d", k) != l {
			flush()
			start, prev = -1, -1
			parts = append(parts, fmt.Sprintf("%q", l))
			continue
		}
		if start >= 0 && k == prev+1 {
			prev = k
			continue
		}
		flush()
		start, prev = k, k
	}
	flush()
	return strings.Join(parts, ", ")
}

// storedStream is the job's whole output on stream as stored.
func (h *harness) storedStream(ctx context.Context, id, stream string) string {
	h.t.Helper()
	var b strings.Builder
	var after int64
	for {
		chunks, err := h.st.Logs(ctx, id, stream, after, 1000)
		require.NoError(h.t, err)
		if len(chunks) == 0 {
			return b.String()
		}
		for _, c := range chunks {
			b.Write(c.Data)
			after = c.Seq
		}
	}
}

// assertSparkNotesOnce checks the sparkeks plugin's notes on the job's
// stderr: one submission, the COMPLETED transition noted, and nothing
// stored twice — no run of the plugin (an Execute, each Resume) noted
// following its application more than once, and no stored chunk repeats the
// whole chunk before it (a batch written again). State lines themselves may
// repeat. A watch may deliver an older state after a newer get, and the
// plugin notes each change. After a short outage (short) the plugin must
// have run once and its note of the transition it saw while the database
// was down must be stored. Nothing is lost. After a long one that note may
// be gone with the detached run's unstored output — the resuming run
// derives its notes from the application as it finds it.
func (h *harness) assertSparkNotesOnce(ctx context.Context, id string, short bool) {
	h.t.Helper()
	text := h.storedStream(ctx, id, "stderr")
	assert.Equal(h.t, 1, strings.Count(text, "sparkeks: submitting SparkApplication"), "job %s: submissions noted on stderr:\n%s", id, text)
	assert.Contains(h.t, text, " is COMPLETED", "job %s: stderr", id)
	if short {
		assert.Contains(h.t, text, " is SUCCEEDING", "job %s: the transition seen during the outage must be in its output", id)
		assert.NotContains(h.t, text, "sparkeks: resuming job", "job %s: a short outage must not make another run follow it:\n%s", id, text)
	}
	following := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "sparkeks: resuming job") || strings.Contains(line, "sparkeks: submitting SparkApplication") {
			following = 0 // a new run of the plugin
		}
		if strings.Contains(line, "sparkeks: following SparkApplication") {
			following++
			if following == 2 {
				h.t.Errorf("job %s: one run of the plugin noted following its application twice: output stored twice; stderr:\n%s", id, text)
			}
		}
	}
	h.assertNoChunkRepeated(ctx, id)
}

// assertNoChunkRepeated fails when a stored chunk of the job's output
// begins with the whole of the chunk before it on the same stream: a batch
// of output written a second time (with what came after it).
func (h *harness) assertNoChunkRepeated(ctx context.Context, id string) {
	h.t.Helper()
	for _, stream := range []string{"stdout", "stderr"} {
		var prev []byte
		var after int64
		for {
			chunks, err := h.st.Logs(ctx, id, stream, after, 1000)
			require.NoError(h.t, err)
			if len(chunks) == 0 {
				break
			}
			for _, c := range chunks {
				if len(prev) > 0 && bytes.HasPrefix(c.Data, prev) {
					h.t.Errorf("job %s: %s chunk %d repeats the chunk before it: %q", id, stream, c.Seq, prev)
				}
				prev, after = c.Data, c.Seq
			}
		}
	}
}

// sparkApps plays spark-operator's later transitions for the jobs'
// SparkApplications (namespace default).
type sparkApps struct {
	h   *harness
	env *kubetest.Env
}

func (a sparkApps) res() interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error)
	UpdateStatus(ctx context.Context, obj *unstructured.Unstructured, opts metav1.UpdateOptions) (*unstructured.Unstructured, error)
} {
	return a.env.Dynamic.Resource(kubetest.SparkApplications).Namespace("default")
}

// waitRunning waits until every job is running with a handle that recorded
// its application RUNNING: the simulated operator is done with it.
func (a sparkApps) waitRunning(ctx context.Context, ids []string) {
	h := a.h
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			var handle []byte
			_ = h.pool.QueryRow(ctx, `SELECT a.handle FROM active_jobs a JOIN jobs j ON j.id = a.job_id
				WHERE a.job_id = $1 AND j.status = 'running'`, id).Scan(&handle)
			if strings.Contains(string(handle), `"state":"RUNNING"`) {
				break
			}
			if time.Now().After(deadline) {
				h.t.Fatalf("job %s: no RUNNING application in its handle after 30s: %s; events: %s", id, handle, h.eventSummary(ctx, id))
			}
			sleep(ctx, 20*time.Millisecond)
		}
	}
}

// set moves the job's application to state when it is in one of from (any
// state when from is empty). It returns the application's UID when it did.
func (a sparkApps) set(ctx context.Context, id, state string, from ...string) (types.UID, error) {
	name := "spark-sql-job-" + id
	for {
		u, err := a.res().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		cur, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "state")
		if u.GetDeletionTimestamp() != nil || (len(from) > 0 && !slices.Contains(from, cur)) {
			return "", nil
		}
		status, _, _ := unstructured.NestedMap(u.Object, "status")
		if status == nil {
			status = map[string]any{}
		}
		status["applicationState"] = map[string]any{"state": state, "errorMessage": ""}
		if state == "COMPLETED" {
			status["terminationTime"] = time.Now().UTC().Format(time.RFC3339)
		}
		u.Object["status"] = status
		_, err = a.res().UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if err == nil {
			return u.GetUID(), nil
		}
		if !apierrors.IsConflict(err) {
			return "", err
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// setAll moves every job's application to state.
func (a sparkApps) setAll(ctx context.Context, ids []string, state string) {
	a.h.t.Helper()
	for _, id := range ids {
		if _, err := a.set(ctx, id, state); err != nil {
			a.h.t.Errorf("job %s: setting its SparkApplication %s: %v", id, state, err)
		}
	}
}

// completeWhen completes, in the background, each job's running
// application once ready(id) holds. ready runs off the test goroutine, so
// it must not fail the test. Applications created later for the same job
// (a retry's) are completed too. The returned func stops it.
func (a sparkApps) completeWhen(ctx context.Context, ids []string, ready func(id string) bool) (stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for cctx.Err() == nil {
			for _, id := range ids {
				if !ready(id) {
					continue
				}
				if uid, err := a.set(cctx, id, "COMPLETED", "RUNNING", "SUCCEEDING"); err == nil && uid != "" {
					a.h.t.Logf("completed SparkApplication of job %s (uid %s)", id, uid)
				}
			}
			sleep(cctx, 100*time.Millisecond)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// followedAgain reports, without failing the test (it runs off the test
// goroutine), whether the job has been resumed, retried or has ended.
func (h *harness) followedAgain(ctx context.Context, id string) bool {
	var attempt int
	var status string
	var resumed bool
	err := h.pool.QueryRow(ctx, `SELECT j.attempt, j.status,
			EXISTS (SELECT 1 FROM job_timeline e WHERE e.job_id = j.id AND e.kind = 'resumed')
		FROM jobs j WHERE j.id = $1`, id).Scan(&attempt, &status, &resumed)
	return err == nil && (attempt > 1 || store.Terminal(jobstate.JobStatus(status)) || resumed)
}
