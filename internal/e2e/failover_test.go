package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// failoverTimings: the switch to the standby (a few seconds) stays far
// below the self-fence point (20 − 1 − 0.25 ≈ 18.75 s).
func failoverTimings() timings {
	tm := fast()
	tm.Keepalive = 500 * time.Millisecond
	tm.StaleJob = 20 * time.Second
	tm.OfflineAfter = 5 * time.Second
	return tm
}

// failoverJobs starts two agents on the multi-host URL and submits ECS and
// shell jobs that print lines lines, one every interval.
func failoverJobs(ctx context.Context, h *harness, lines int, interval time.Duration) (ecsIDs, shIDs []string) {
	h.startAgent(ctx, "fo-1")
	h.startAgent(ctx, "fo-2")
	for range 3 {
		ecsIDs = append(ecsIDs, h.submitECS(ctx, countingScript(lines, interval), nil))
	}
	for range 3 {
		shIDs = append(shIDs, h.submitShellScript(ctx, countingScript(lines, interval)))
	}
	for _, id := range append(append([]string(nil), ecsIDs...), shIDs...) {
		h.waitStdout(ctx, id, "line 2\n", 20*time.Second)
	}
	return ecsIDs, shIDs
}

// promote stops the primary at once (no shutdown checkpoint, connections
// cut) and promotes the standby. The harness's own pool reconnects.
func promote(ctx context.Context, t *testing.T, h *harness, primary, standby *pgcluster.Cluster, startStandby bool) time.Duration {
	t.Helper()
	began := time.Now()
	require.NoError(t, primary.StopServerImmediate(ctx))
	if startStandby {
		require.NoError(t, standby.StartServer(ctx))
	}
	require.NoError(t, standby.Promote(ctx))
	h.pool.Reset()
	return time.Since(began)
}

// TestFailoverToSynchronousStandby covers the case where the primary dies
// and its synchronous standby is promoted under running ECS and shell jobs.
// Agents find the new primary through the multi-host URL and notice the new
// timeline. Nothing they were told is stored was lost, so nothing is
// released, failed or launched again, and every line is stored once.
func TestFailoverToSynchronousStandby(t *testing.T) {
	t.Parallel() // its own clusters and agents, long waits: beside the other two
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, standby, url := pgtest.StartReplicated(t, true)
	em, emURL := startEmulator(t)
	h := newECSHarness(t, url, failoverTimings(), emURL)
	const lines = 40
	ecsIDs, shIDs := failoverJobs(ctx, h, lines, 150*time.Millisecond)

	took := promote(ctx, t, h, primary, standby, false)
	t.Logf("failover took %s", took)
	all := append(append([]string(nil), ecsIDs...), shIDs...)
	h.waitTerminal(ctx, all, 60*time.Second)
	for _, id := range all {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "job %s (%s): %s; events: %s", id, j.Command, j.Error, h.eventSummary(ctx, id))
		h.assertLinesOnce(ctx, id, lines)
		for _, e := range h.events(ctx, id) {
			assert.NotContains(t, []string{"released", "lease_lost", "database_history_lost", "retry_scheduled"}, e.Kind,
				"job %s: nothing was lost, so nothing is repaired: %s", id, h.eventSummary(ctx, id))
		}
		h.checkTimeline(ctx, id)
	}
	for _, id := range ecsIDs {
		assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "job %s: one launch", id)
	}
	assert.Positive(t, h.agentLogCount("the database's history changed"), "the agents noticed the new timeline")
}

// TestFailoverToAsynchronousStandbyThatLostHistory covers the case where the
// standby stops for a few seconds while the primary keeps committing
// (output, checkpoints, ends), then the primary dies and the standby is
// promoted. What the primary acknowledged meanwhile is really gone. The
// agents notice (a new timeline) and reconcile. Every job still ends once,
// succeeded. No ECS task is launched a second time. ECS output the database
// lost is read again from CloudWatch through a resume from the checkpoint it
// kept, so every ECS line is stored once. Shell output lost for good is
// never silent. The job's database_history_lost event says which records.
func TestFailoverToAsynchronousStandbyThatLostHistory(t *testing.T) {
	t.Parallel() // its own clusters and agents, long waits: beside the other two
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, standby, url := pgtest.StartReplicated(t, false)
	em, emURL := startEmulator(t)
	h := newECSHarness(t, url, failoverTimings(), emURL)
	const lines = 80
	ecsIDs, shIDs := failoverJobs(ctx, h, lines, 150*time.Millisecond)
	// A short job that ends while the standby is away. Its end is lost.
	short := h.submitShellScript(ctx, "sleep 1; echo only")
	// Every submit reaches the standby before it stops. A lost submit is a
	// documented limit, not what this test is about.
	_, lsn, err := primary.CurrentWAL(ctx)
	require.NoError(t, err)
	require.NoError(t, standby.WaitReplayed(ctx, lsn))

	require.NoError(t, standby.StopServer(ctx))
	lostFrom := time.Now()
	// Every job stores more output (ECS jobs: with their checkpoints) that
	// the standby never receives.
	stored := map[string]int{}
	for _, id := range append(append([]string(nil), ecsIDs...), shIDs...) {
		stored[id] = strings.Count(h.stdout(ctx, id), "\n")
	}
	for id, n := range stored {
		h.waitStdout(ctx, id, fmt.Sprintf("line %d\n", n+3), 20*time.Second)
	}
	h.waitTerminal(ctx, []string{short}, 20*time.Second)
	took := promote(ctx, t, h, primary, standby, true)
	t.Logf("the primary committed for %s the standby never saw; failover took %s", time.Since(lostFrom).Round(time.Millisecond)-took, took)
	if j := h.job(ctx, short); j.Status == store.StatusSucceeded && len(h.events(ctx, short)) > 0 {
		t.Logf("short job after the failover: %s", h.eventSummary(ctx, short))
	}

	all := append(append([]string{short}, ecsIDs...), shIDs...)
	h.waitTerminal(ctx, all, 90*time.Second)
	lostSomething := false
	for _, id := range all {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "job %s (%s): %s; events: %s", id, j.Command, j.Error, h.eventSummary(ctx, id))
		h.checkTimeline(ctx, id)
		var lost []string
		for _, e := range h.events(ctx, id) {
			if e.Kind == "database_history_lost" {
				lost = append(lost, e.Message)
			}
		}
		if len(lost) > 0 {
			lostSomething = true
			t.Logf("job %s (%s): %s", id, j.Command, strings.Join(lost, " | "))
		}
		switch {
		case j.Command == "ecs":
			h.assertLinesOnce(ctx, id, lines) // read again from CloudWatch where lost
			assert.NotEmpty(t, lost, "job %s: its checkpoints after the standby stopped were lost: it must have been repaired", id)
		case id == short:
			if out := h.stdout(ctx, id); out != "only\n" {
				assert.Empty(t, out)
				require.NotEmpty(t, lost, "job %s: its line was lost and no word of it: %s", id, h.eventSummary(ctx, id))
			}
		default:
			got := strings.Split(strings.TrimRight(h.stdout(ctx, id), "\n"), "\n")
			assertInOrderOnce(t, id, got, lines)
			if len(got) < lines {
				require.NotEmpty(t, lost, "job %s: %d of %d lines stored and no word of the loss: %s", id, len(got), lines, h.eventSummary(ctx, id))
				assert.Contains(t, strings.Join(lost, " "), "cannot be written again")
			}
		}
	}
	for _, id := range ecsIDs {
		assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "job %s: launched once", id)
	}
	assert.True(t, lostSomething, "the promoted standby had lost commits: some job must have been repaired")
	assert.Positive(t, h.agentLogCount("the database's history changed"), "the agents noticed")
	for _, l := range h.agentLogLines("checked every job") {
		t.Log(l)
	}
}

// agentLogLines returns the agents' log lines that contain s.
func (h *harness) agentLogLines(s string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, a := range h.agents {
		for _, l := range strings.Split(a.out.String(), "\n") {
			if strings.Contains(l, s) {
				out = append(out, l)
			}
		}
	}
	return out
}

// assertInOrderOnce: lines are "line k" with k strictly increasing: none
// stored twice, none out of order (some may be missing).
func assertInOrderOnce(t *testing.T, id string, got []string, n int) {
	t.Helper()
	last := 0
	for _, l := range got {
		var k int
		if _, err := fmt.Sscanf(l, "line %d", &k); err != nil || k <= last || k > n {
			t.Errorf("job %s: line %q after line %d: lines must be stored once, in order", id, l, last)
			return
		}
		last = k
	}
}

// agentLogCount counts the agents' log lines that contain s.
func (h *harness) agentLogCount(s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.agents {
		n += strings.Count(a.out.String(), s)
	}
	return n
}
