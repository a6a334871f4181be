package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// hungTimings: a 12 s hang stays far below the self-fence point
// (40 − 2 − 0.25 ≈ 37.75 s). The agents' writes give up on the hung server
// and are sent again (log flushes after 5 s, final writes after 10 s).
func hungTimings() timings {
	tm := fast()
	tm.Keepalive = time.Second
	tm.StaleJob = 40 * time.Second
	tm.OfflineAfter = 20 * time.Second
	return tm
}

// TestHungDatabaseStoresEveryLineOnce covers the case where the whole
// PostgreSQL cluster is frozen (SIGSTOP of the postmaster and every backend,
// then SIGCONT) while jobs print, and again while jobs end. Statements the
// agents gave up on sit in the hung backends' sockets and commit when the
// server wakes. The agents send them again on new connections. Every job
// succeeds, every line is stored exactly once, and no end is taken for a
// lost lease.
func TestHungDatabaseStoresEveryLineOnce(t *testing.T) {
	t.Parallel() // its own clusters and agents, long waits: beside the other two
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster, url := pgtest.StartCluster(t)
	h := newHarness(t, url, hungTimings())
	h.startAgent(ctx, "hung-1")
	h.startAgent(ctx, "hung-2")

	{
		t.Log("phase 1: a 7 s hang while jobs print")
		const lines = 200
		var ids []string
		for range 4 {
			ids = append(ids, h.submitShellScript(ctx, countingScript(lines, 40*time.Millisecond)))
		}
		for _, id := range ids {
			h.waitStdout(ctx, id, "line 20\n", 20*time.Second)
		}
		require.NoError(t, cluster.Freeze(ctx))
		frozen := time.Now()
		sleep(ctx, 7*time.Second)
		require.NoError(t, cluster.Thaw(ctx))
		t.Logf("frozen for %s", time.Since(frozen).Round(time.Millisecond))
		h.pool.Reset()
		h.waitTerminal(ctx, ids, 60*time.Second)
		for _, id := range ids {
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
			h.assertLinesOnce(ctx, id, lines)
			h.checkTimeline(ctx, id)
		}
	}
	{
		t.Log("phase 2: a 12 s hang while 40 jobs end")
		var ids []string
		for i := range 40 {
			ids = append(ids, h.submitShellScript(ctx, fmt.Sprintf("sleep 0.5; echo only-%d", i)))
		}
		// Frozen once the first ones run. The rest end (or start) in it.
		deadline := time.Now().Add(20 * time.Second)
		for len(h.jobsIn(ctx, ids, store.StatusRunning)) < 10 {
			require.True(t, time.Now().Before(deadline), "the jobs did not start")
			sleep(ctx, 20*time.Millisecond)
		}
		require.NoError(t, cluster.Freeze(ctx))
		sleep(ctx, 12*time.Second)
		require.NoError(t, cluster.Thaw(ctx))
		h.pool.Reset()
		h.waitTerminal(ctx, ids, 90*time.Second)
		for i, id := range ids {
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
			assert.Equal(t, fmt.Sprintf("only-%d\n", i), h.stdout(ctx, id), "job %s: its one line, once", id)
			for _, e := range h.events(ctx, id) {
				assert.NotEqual(t, "lease_lost", e.Kind, "job %s: its own end, sent again, is not a lost lease: %s", id, h.eventSummary(ctx, id))
			}
			h.checkTimeline(ctx, id)
		}
	}
	resent := 0
	for _, l := range h.agentLogLines("") {
		if strings.Contains(l, "will retry") || strings.Contains(l, "earlier try whose answer was lost") {
			resent++
		}
	}
	t.Logf("%d agent log lines about writes sent again", resent)
}

// jobsIn returns which of ids are in status now.
func (h *harness) jobsIn(ctx context.Context, ids []string, status jobstate.JobStatus) []string {
	h.t.Helper()
	rows, err := h.pool.Query(ctx, `SELECT id FROM jobs WHERE id = ANY($1) AND status = $2`, ids, status)
	require.NoError(h.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		require.NoError(h.t, rows.Scan(&id))
		out = append(out, id)
	}
	return out
}
