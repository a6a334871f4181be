package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// PostgreSQL goes away under two running agents. Shorter than
// stale_job − 2×keepalive. Nothing fails. Longer: shell jobs fail truthfully
// (their agents stopped them) and resumable jobs are released, resumed and
// succeed, their work started once.
func TestDatabaseOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cluster, url := pgtest.StartCluster(t)
	tm := fast()
	tm.Keepalive = 500 * time.Millisecond
	tm.StaleJob = 6 * time.Second
	tm.OfflineAfter = 1500 * time.Millisecond
	h := newHarness(t, url, tm)
	selfFence := tm.StaleJob - 2*tm.Keepalive

	h.startAgent(ctx, "outage-1")
	h.startAgent(ctx, "outage-2")

	// Phases run in sequence on one cluster. They are not subtests, since the
	// harness reports failures on t.
	{
		t.Log("phase 1: an outage shorter than stale_job − 2×keepalive")
		res, sh := h.submitMix(ctx, 6, 4, 7*time.Second, 7*time.Second)
		h.waitStarted(ctx, res, sh)
		took := h.outage(ctx, cluster, 1500*time.Millisecond)
		t.Logf("database was down for %s (self-fencing after %s)", took, selfFence)
		require.Less(t, took, selfFence-time.Second, "the outage was meant to be short; the cluster took too long to stop or start")

		h.waitTerminal(ctx, append(append([]string(nil), res...), sh...), 30*time.Second)
		for _, id := range append(append([]string(nil), res...), sh...) {
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "job %s (%s): %s; events: %s", id, j.Command, j.Error, h.eventSummary(ctx, id))
			h.checkTimeline(ctx, id)
		}
		for _, id := range res {
			assert.Equal(t, 1, h.startCount(id), "job %s: work starts", id)
		}
	}
	{
		t.Log("phase 2: an outage longer than stale_job")
		down := tm.StaleJob + 3*time.Second
		res, sh := h.submitMix(ctx, 6, 4, down+8*time.Second, 60*time.Second)
		h.waitStarted(ctx, res, sh)
		took := h.outage(ctx, cluster, down)
		t.Logf("database was down for %s (stale_job %s)", took, tm.StaleJob)

		h.waitTerminal(ctx, append(append([]string(nil), res...), sh...), 40*time.Second)
		for _, id := range sh {
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusFailed, j.Status, "shell job %s; events: %s", id, h.eventSummary(ctx, id))
			assert.NotEmpty(t, j.Error, "shell job %s must say why it failed", id)
			t.Logf("shell job %s: %s", id, j.Error)
			if pgid := h.shellPGID(id); assert.Positive(t, pgid, "shell job %s never started", id) {
				assert.Empty(t, groupMembers(pgid), "shell job %s: its process group %d must have been stopped", id, pgid)
			}
		}
		for _, id := range res {
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "resumable job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
			assert.Equal(t, 1, h.startCount(id), "resumable job %s: work starts", id)
			var released, resumed bool
			for _, e := range h.events(ctx, id) {
				switch e.Kind {
				case "released":
					released = true
				case "resumed":
					resumed = released
				}
			}
			assert.True(t, released && resumed, "resumable job %s must be released, then resumed: %s", id, h.eventSummary(ctx, id))
		}
	}
}

// submitMix submits nRes resumable jobs lasting resFor and nShell shell jobs
// sleeping shellFor.
func (h *harness) submitMix(ctx context.Context, nRes, nShell int, resFor, shellFor time.Duration) (res, sh []string) {
	for range nRes {
		res = append(res, h.submitResumable(ctx, resFor))
	}
	for range nShell {
		sh = append(sh, h.submitShell(ctx, shellFor))
	}
	return res, sh
}

// waitStarted waits until every resumable job checkpointed its work and
// every shell job's script runs.
func (h *harness) waitStarted(ctx context.Context, res, sh []string) {
	h.t.Helper()
	for _, id := range res {
		h.waitHandle(ctx, id, 20*time.Second)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range sh {
		for h.shellPGID(id) == 0 {
			if time.Now().After(deadline) {
				h.t.Fatalf("shell job %s did not start: %s", id, h.eventSummary(ctx, id))
			}
			sleep(ctx, 20*time.Millisecond)
		}
	}
}

// outage stops the server, waits down, starts it again and returns how long
// it was unreachable (from the stop request to the start's return).
func (h *harness) outage(ctx context.Context, c *pgcluster.Cluster, down time.Duration) time.Duration {
	h.t.Helper()
	begin := time.Now()
	// A clean (fast) shutdown. The test cluster runs without fsync, so a
	// crash-style stop would lose commits the agents were told succeeded.
	require.NoError(h.t, c.StopServer(ctx))
	sleep(ctx, down)
	require.NoError(h.t, c.StartServer(ctx))
	took := time.Since(begin)
	// The harness's own connections died with the server.
	h.pool.Reset()
	return took
}
