package e2e

// The database-outage promise (docs/operations.md: an outage shorter than
// the self-fence point — stale_job − 2×keepalive − the longest kill grace;
// these agents run no plugin that stops local work, so stale_job −
// 2×keepalive — fails nothing and loses nothing. A longer one releases
// resumable jobs, which are resumed, never started again) with the real
// resumable plugins: ECS jobs against the emulator and Spark jobs
// against the kube-apiserver. Both plugins checkpoint while they follow
// their remote work (ECS on every poll, as its log position moves; Spark on
// every state change), so a checkpoint that cannot be stored while the
// database is away must not end the job. Every job runs with max_retry 2. A
// job wrongly failed shows up as a second ECS launch or a second
// SparkApplication, and as output stored twice.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// Two agents run ECS jobs printing numbered lines through a short outage,
// then through one longer than stale_job.
func TestDatabaseOutageECS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	testStart := time.Now()
	em, emURL := startEmulator(t)
	cluster, url := pgtest.StartCluster(t)
	tm := backendOutageTimings()
	h := newECSHarness(t, url, tm, emURL).withoutShell()
	selfFence := tm.StaleJob - 2*tm.Keepalive

	h.startAgent(ctx, "ecs-outage-1")
	h.startAgent(ctx, "ecs-outage-2")

	// check asserts what both phases promise of every job. lines is what
	// each job's task prints.
	check := func(ids []string, lines int) {
		t.Helper()
		for _, id := range ids {
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "ecs job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
			assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "ecs job %s: tasks launched; events: %s", id, h.eventSummary(ctx, id))
			h.assertSingleAttempt(ctx, id)
			h.checkTimeline(ctx, id)
			h.assertLinesOnceOrEvents(ctx, id, lines)
			h.assertNoChunkRepeated(ctx, id)
		}
	}

	{
		t.Log("phase 1: an outage shorter than stale_job − 2×keepalive")
		const lines = 30 // 6 s at 200 ms a line: the tasks outlive the outage
		ids := h.submitECSJobs(ctx, 4, countingScript(lines, 200*time.Millisecond))
		h.waitECSPrinting(ctx, ids)
		took := h.outageDuring(ctx, cluster, 1500*time.Millisecond, nil)
		t.Logf("database was down for %s (self-fencing after %s)", took, selfFence)
		require.Less(t, took, selfFence-time.Second, "the outage was meant to be short; the cluster took too long to stop or start")

		h.waitTerminal(ctx, ids, 30*time.Second)
		check(ids, lines)
		for _, id := range ids {
			assert.Empty(t, kindsOf(h.events(ctx, id), "released"), "ecs job %s: a short outage releases nothing: %s", id, h.eventSummary(ctx, id))
		}
	}
	{
		t.Log("phase 2: an outage longer than stale_job")
		const lines = 75 // 15 s at 200 ms a line: running when the agents self-fence, and after
		down := tm.StaleJob + 3*time.Second
		ids := h.submitECSJobs(ctx, 4, countingScript(lines, 200*time.Millisecond))
		h.waitECSPrinting(ctx, ids)
		took := h.outageDuring(ctx, cluster, down, nil)
		t.Logf("database was down for %s (stale_job %s)", took, tm.StaleJob)

		h.waitTerminal(ctx, ids, 40*time.Second)
		check(ids, lines)
		for _, id := range ids {
			h.assertReleasedThenResumed(ctx, id)
		}
	}
	t.Logf("test took %s", time.Since(testStart).Round(time.Millisecond))
}

// Two agents run Spark jobs against the kube-apiserver through a short
// outage, then one longer than stale_job. The test plays spark-operator's
// later transitions itself. RUNNING → SUCCEEDING while the database is down
// (the plugin sees a state change and checkpoints), COMPLETED once it is
// back. It runs against the Simulator stack (simKubeEnv), not the real
// operator. The operator completes a SUCCEEDING application at once (so the
// plugin sees COMPLETED while the database is down, and a phase-2 job could
// end before it is followed again), and the kubelet stand-in cannot be told
// to end a driver at a chosen moment.
func TestDatabaseOutageSpark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	testStart := time.Now()
	env, proxy, sim := simKubeEnv(t)
	t.Logf("Kubernetes test environment ready after %s", time.Since(testStart).Round(time.Millisecond))
	phasesStart := time.Now()
	cluster, url := pgtest.StartCluster(t)
	tm := backendOutageTimings()
	plugins := fmt.Sprintf("  sparkeks:\n    config: {kubeconfig: %q, poll_interval: 200ms}\n", proxy.Kubeconfig)
	commands := "  spark-sql:\n    plugin: sparkeks\n    context: {image: \"spark:3.5.3\", main_application_file: \"local:///opt/tether/spark_sql.py\"}\n"
	h := newHarnessWith(t, url, tm, plugins, commands).withoutShell()
	selfFence := tm.StaleJob - 2*tm.Keepalive
	apps := sparkApps{h: h, env: env}

	h.startAgent(ctx, "spark-outage-1")
	h.startAgent(ctx, "spark-outage-2")

	check := func(ids []string, short bool) {
		t.Helper()
		for _, id := range ids {
			name := "spark-sql-job-" + id
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "spark job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
			assert.Equal(t, 1, sim.Created("default", name), "spark job %s: SparkApplications created; events: %s", id, h.eventSummary(ctx, id))
			h.assertSingleAttempt(ctx, id)
			h.checkTimeline(ctx, id)
			h.assertSparkNotesOnce(ctx, id, short)
		}
	}

	{
		t.Log("phase 1: an outage shorter than stale_job − 2×keepalive")
		ids := h.submitSparkJobs(ctx, 4)
		apps.waitRunning(ctx, ids)
		took := h.outageDuring(ctx, cluster, 1500*time.Millisecond, func() { apps.setAll(ctx, ids, "SUCCEEDING") })
		t.Logf("database was down for %s (self-fencing after %s)", took, selfFence)
		require.Less(t, took, selfFence-time.Second, "the outage was meant to be short; the cluster took too long to stop or start")

		stop := apps.completeWhen(ctx, ids, func(string) bool { return true })
		h.waitTerminal(ctx, ids, 30*time.Second)
		stop()
		check(ids, true)
		for _, id := range ids {
			assert.Empty(t, kindsOf(h.events(ctx, id), "released"), "spark job %s: a short outage releases nothing: %s", id, h.eventSummary(ctx, id))
		}
	}
	{
		t.Log("phase 2: an outage longer than stale_job")
		down := tm.StaleJob + 3*time.Second
		ids := h.submitSparkJobs(ctx, 4)
		apps.waitRunning(ctx, ids)
		took := h.outageDuring(ctx, cluster, down, func() { apps.setAll(ctx, ids, "SUCCEEDING") })
		t.Logf("database was down for %s (stale_job %s)", took, tm.StaleJob)

		// The applications complete once their jobs are followed again (or,
		// should a job have been failed and retried, once the retry runs:
		// the test then fails on what it shows rather than on a hang).
		stop := apps.completeWhen(ctx, ids, func(id string) bool { return h.followedAgain(ctx, id) })
		h.waitTerminal(ctx, ids, 40*time.Second)
		stop()
		check(ids, false)
		for _, id := range ids {
			h.assertReleasedThenResumed(ctx, id)
		}
	}
	t.Logf("phases took %s; test %s", time.Since(phasesStart).Round(time.Millisecond), time.Since(testStart).Round(time.Millisecond))
}
