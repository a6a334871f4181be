package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// startEmulator runs the ECS emulator in the test process until the test
// ends, with its hostile profile: tasks MISSING for a while after RunTask,
// log lines delivered late, transient RunTask refusals and capacity
// failures, 5xx answers to calls that did run, account-wide rate limits.
// Only infrastructure stops are off. They relaunch a task, which these
// tests' exact launch and line counts do not allow (the plugin's tests and
// make bench-ecs cover them).
func startEmulator(t *testing.T) (*emulator.Emulator, string) {
	t.Helper()
	opts := emulator.HostileOptions()
	opts.InfraStopRate = 0
	opts.StopTimeout = time.Second
	em := emulator.New(opts)
	url, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = em.Close() })
	return em, url
}

// countingScript prints "line 1" … "line n", one every interval.
func countingScript(n int, interval time.Duration) string {
	return fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep %.3f; done`, n, interval.Seconds())
}

// assertLinesOnce asserts the job's stdout is exactly "line 1" … "line n",
// each once and in order. Nothing is lost or copied twice across agents.
func (h *harness) assertLinesOnce(ctx context.Context, id string, n int) {
	h.t.Helper()
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	got := strings.Split(strings.TrimRight(h.stdout(ctx, id), "\n"), "\n")
	assert.Equal(h.t, want, got, "job %s: stdout must hold every line exactly once", id)
}

// waitStdout waits until the job's stdout contains s. Its log is being copied.
func (h *harness) waitStdout(ctx context.Context, id, s string, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(h.stdout(ctx, id), s) {
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s: stdout has no %q after %s: %q; events: %s", id, s, within, h.stdout(ctx, id), h.eventSummary(ctx, id))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// holder is the name of the agent holding the job ("" if none).
func (h *harness) holder(ctx context.Context, id string) string {
	h.t.Helper()
	var name string
	err := h.pool.QueryRow(ctx, `SELECT coalesce(agent_name, '') FROM active_jobs WHERE job_id = $1`, id).Scan(&name)
	if err != nil {
		return ""
	}
	return name
}

// ecsKillTimings: a lost agent's job is released after 3 s.
func ecsKillTimings() timings {
	tm := fast()
	tm.StaleJob = 3 * time.Second
	tm.Keepalive = 500 * time.Millisecond
	tm.CleanInterval = 500 * time.Millisecond
	return tm
}

// kill -9 the agent watching a running ECS task, with a second agent up.
// The second one resumes the job and follows the same task (one launch),
// and the job's stdout has every line of the task's log exactly once.
func TestECSKill9ResumesSameTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	em, url := startEmulator(t)
	h := newECSHarness(t, pgtest.URL(t), ecsKillTimings(), url)

	const lines = 30 // 6 s of output: the task outlives stale_job
	a := h.startAgent(ctx, "ecs-a")
	id := h.submitECS(ctx, countingScript(lines, 200*time.Millisecond), nil)
	h.waitHandle(ctx, id, 15*time.Second)
	require.Equal(t, a.name, h.holder(ctx, id))
	b := h.startAgent(ctx, "ecs-b")
	h.waitStdout(ctx, id, "line 3\n", 10*time.Second)

	killedAt := h.dbNow(ctx)
	h.kill9(a)
	resumed := h.waitEvent(ctx, id, "resumed", 15*time.Second)
	t.Logf("resumed %s after kill -9 (stale_job %s)", resumed.At.Sub(killedAt), h.tm.StaleJob)
	assert.Equal(t, b.gen, resumed.Generation, "the surviving agent resumes it")

	h.waitTerminal(ctx, []string{id}, 30*time.Second)
	j := h.job(ctx, id)
	assert.Equal(t, store.StatusSucceeded, j.Status, "error: %s; events: %s", j.Error, h.eventSummary(ctx, id))
	assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "the task must be launched exactly once")
	final := h.checkTimeline(ctx, id)
	assert.Equal(t, b.gen, final.Generation)
	h.assertLinesOnce(ctx, id, lines)
}

// An agent killed and restarted under the same name gets its ECS job back
// at once (restart detection, not stale_job) and follows the same task.
func TestECSRestartUnderSameNameResumesSameTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	em, url := startEmulator(t)
	tm := drainTimings() // stale_job 60 s: only restart detection explains a quick resume
	h := newECSHarness(t, pgtest.URL(t), tm, url)

	const lines = 30
	a := h.startAgent(ctx, "ecs-restarter")
	id := h.submitECS(ctx, countingScript(lines, 200*time.Millisecond), nil)
	h.waitHandle(ctx, id, 15*time.Second)
	h.waitStdout(ctx, id, "line 3\n", 10*time.Second)

	killedAt := h.dbNow(ctx)
	h.kill9(a)
	b := h.startAgent(ctx, "ecs-restarter")
	require.NotEqual(t, a.gen, b.gen)

	resumed := h.waitEvent(ctx, id, "resumed", 10*time.Second)
	took := resumed.At.Sub(killedAt)
	t.Logf("resumed %s after kill -9 (stale_job %s)", took, tm.StaleJob)
	assert.Less(t, took, 3*time.Second, "resume must follow the restart, not stale_job")
	assert.Equal(t, b.gen, resumed.Generation)

	h.waitTerminal(ctx, []string{id}, 30*time.Second)
	j := h.job(ctx, id)
	assert.Equal(t, store.StatusSucceeded, j.Status, "error: %s; events: %s", j.Error, h.eventSummary(ctx, id))
	assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "the task must be launched exactly once")
	h.checkTimeline(ctx, id)
	h.assertLinesOnce(ctx, id, lines)
}

// A rolling deploy (new agent up, old one SIGTERMed, one at a time) while 10
// ECS jobs run. Every job is handed off and resumed within a couple of claim
// intervals, succeeds, and its task was launched once.
func TestECSRollingDeploy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	em, url := startEmulator(t)
	tm := drainTimings()
	tm.Capacity = 4 // 3 × 4 slots for 10 jobs: every agent holds some
	h := newECSHarness(t, pgtest.URL(t), tm, url)
	env := drainEnv(30*time.Second, "immediate")
	const lines = 30 // 15 s at 500 ms a line

	live := []*agentProc{
		h.startAgent(ctx, "ecs-roll-1", env...),
		h.startAgent(ctx, "ecs-roll-2", env...),
		h.startAgent(ctx, "ecs-roll-3", env...),
	}
	var ids []string
	for range 10 {
		ids = append(ids, h.submitECS(ctx, countingScript(lines, 500*time.Millisecond), nil))
	}
	for _, id := range ids {
		h.waitHandle(ctx, id, 20*time.Second)
	}

	drained := map[string]bool{}
	rollStart := time.Now()
	for i, old := range live {
		var held int
		require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM active_jobs WHERE agent_name = $1`, old.name).Scan(&held))
		assert.Positive(t, held, "agent %s should hold jobs before it is replaced", old.name)

		next := h.startAgent(ctx, fmt.Sprintf("ecs-roll-%d", len(live)+i+1), env...)
		h.signal(old, syscall.SIGTERM)
		code := h.waitExit(old, 15*time.Second)
		require.Equal(t, 0, code, "agent %s exit code", old.name)
		drained[old.name] = true
		live[i] = next
		t.Logf("replaced %s (held %d jobs) by %s", old.name, held, next.name)
	}
	rollout := time.Since(rollStart)
	t.Logf("rollout took %s", rollout)
	var finished int
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND status IN ('succeeded', 'failed', 'canceled')`, ids).Scan(&finished))
	require.Zero(t, finished, "jobs must outlive the rollout (took %s)", rollout)

	h.waitTerminal(ctx, ids, 30*time.Second)
	gap := handoffGap(tm)
	var handoffCount int
	var worst time.Duration
	for _, id := range ids {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "job %s: launches; events: %s", id, h.eventSummary(ctx, id))
		h.checkTimeline(ctx, id)
		h.assertLinesOnce(ctx, id, lines)

		evs := h.events(ctx, id)
		var released int
		for i, e := range evs {
			if e.Kind != "released" {
				continue
			}
			released++
			name, ok := strings.CutPrefix(e.Message, "handoff: agent ")
			name, ok2 := strings.CutSuffix(name, " draining")
			if !assert.True(t, ok && ok2 && drained[name], "job %s: release %q is not a drain's handoff: %s", id, e.Message, h.eventSummary(ctx, id)) {
				continue
			}
			handoffCount++
			var resumed event
			for _, f := range evs[i+1:] {
				if f.Kind == "resumed" {
					resumed = f
					break
				}
			}
			if assert.NotZero(t, resumed.ID, "job %s: handoff by %s never resumed: %s", id, name, h.eventSummary(ctx, id)) {
				d := resumed.At.Sub(e.At)
				worst = max(worst, d)
				assert.Less(t, d, gap, "job %s: handoff by %s → resume took %s: %s", id, name, d, h.eventSummary(ctx, id))
			}
		}
		assert.Positive(t, released, "job %s was never handed off: %s", id, h.eventSummary(ctx, id))
	}
	t.Logf("%d handoffs; slowest handoff → resume %s (bound %s)", handoffCount, worst, gap)
}

// A task that always fails, max_fail_count 3, its agent killed with -9 right
// after the second launch. The resuming agent launches it exactly once more
// and the job fails.
func TestECSMaxFailCountHoldsAcrossKill9(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	em, url := startEmulator(t)
	h := newECSHarness(t, pgtest.URL(t), ecsKillTimings(), url)

	a := h.startAgent(ctx, "ecs-fail-a")
	id := h.submitECS(ctx, `echo failing; sleep 1; exit 1`, map[string]any{"max_fail_count": 3})
	sb := ecs.StartedBy(id, 0)
	h.waitHandle(ctx, id, 15*time.Second)
	require.Equal(t, a.name, h.holder(ctx, id))
	b := h.startAgent(ctx, "ecs-fail-b")

	deadline := time.Now().Add(15 * time.Second)
	for em.Launches(sb) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second launch after 15s (launches %d); events: %s", em.Launches(sb), h.eventSummary(ctx, id))
		}
		sleep(ctx, 5*time.Millisecond)
	}
	h.kill9(a)
	require.Equal(t, 2, em.Launches(sb), "launches when the agent died")

	resumed := h.waitEvent(ctx, id, "resumed", 15*time.Second)
	assert.Equal(t, b.gen, resumed.Generation)
	h.waitTerminal(ctx, []string{id}, 30*time.Second)
	j := h.job(ctx, id)
	assert.Equal(t, store.StatusFailed, j.Status, "events: %s", h.eventSummary(ctx, id))
	assert.Equal(t, 3, em.Launches(sb), "max_fail_count 3 allows exactly 3 launches in all; error %q; events: %s", j.Error, h.eventSummary(ctx, id))
	h.checkTimeline(ctx, id)
	t.Logf("job failed: %s", j.Error)
}

// The task ends while no agent watches it (its only agent was killed). The
// agent that resumes the job later reads the outcome from ECS, copies the
// rest of the log from the stored position, and launches nothing.
func TestECSTaskEndsWhileNoAgentWatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	em, url := startEmulator(t)
	h := newECSHarness(t, pgtest.URL(t), ecsKillTimings(), url)

	// About 6 s of output. Line 2 reaches the database a few seconds after
	// it is printed (CloudWatch's lag, checkpoints every 2 s), and the
	// task must still be running when its agent is killed.
	const lines = 60
	a := h.startAgent(ctx, "ecs-alone")
	ok := h.submitECS(ctx, countingScript(lines, 100*time.Millisecond), nil)
	bad := h.submitECS(ctx, countingScript(lines, 100*time.Millisecond)+"; exit 4", nil)
	h.waitStdout(ctx, ok, "line 2\n", 15*time.Second)
	h.waitStdout(ctx, bad, "line 2\n", 15*time.Second)
	h.kill9(a)
	sleep(ctx, 7*time.Second) // both tasks end with nobody watching

	h.startAgent(ctx, "ecs-later")
	h.waitTerminal(ctx, []string{ok, bad}, 30*time.Second)
	j := h.job(ctx, ok)
	assert.Equal(t, store.StatusSucceeded, j.Status, "error: %s; events: %s", j.Error, h.eventSummary(ctx, ok))
	h.assertLinesOnce(ctx, ok, lines)
	assert.Contains(t, h.eventSummary(ctx, ok), "resumed")
	f := h.job(ctx, bad)
	assert.Equal(t, store.StatusFailed, f.Status, "events: %s", h.eventSummary(ctx, bad))
	assert.Contains(t, f.Error, "exited with code 4")
	h.assertLinesOnce(ctx, bad, lines)
	for _, id := range []string{ok, bad} {
		assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "job %s: the outcome is read, nothing relaunched", id)
		h.checkTimeline(ctx, id)
	}
}
