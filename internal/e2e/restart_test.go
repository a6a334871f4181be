package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// An agent killed and restarted under the same name gets its running
// resumable job back at once. The restart is detected at start-up (the name
// lock is free, the generation changed), not after stale_job.
func TestRestartUnderSameNameResumesAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tm := fast()
	tm.Keepalive = time.Second
	tm.StaleJob = 60 * time.Second // far beyond the test: only restart detection can explain a quick resume
	tm.OfflineAfter = 3 * time.Second
	tm.CleanInterval = time.Second
	tm.AWOLTimeout = 120 * time.Second
	h := newHarness(t, pgtest.URL(t), tm)

	a := h.startAgent(ctx, "restarter")
	id := h.submitResumable(ctx, 6*time.Second)
	h.waitHandle(ctx, id, 15*time.Second)

	killedAt := h.dbNow(ctx)
	h.kill9(a)
	b := h.startAgent(ctx, "restarter")
	require.NotEqual(t, a.gen, b.gen, "a restarted agent has a new generation")

	resumed := h.waitEvent(ctx, id, "resumed", 10*time.Second)
	took := resumed.At.Sub(killedAt)
	t.Logf("resumed %s after kill -9 (stale_job %s)", took, tm.StaleJob)
	assert.Less(t, took, 5*time.Second, "resume must follow the restart, not stale_job")
	assert.Equal(t, b.gen, resumed.Generation, "the restarted process resumes it")

	h.waitTerminal(ctx, []string{id}, 20*time.Second)
	j := h.job(ctx, id)
	assert.Equal(t, store.StatusSucceeded, j.Status, "error: %s", j.Error)
	assert.Equal(t, 1, h.startCount(id), "the work must be started exactly once")
	final := h.checkTimeline(ctx, id)
	assert.Equal(t, b.gen, final.Generation)

	var released bool
	for _, e := range h.events(ctx, id) {
		if e.Kind == "released" && e.ID < resumed.ID {
			released = true
		}
	}
	assert.True(t, released, "the previous generation's job is released before it is resumed: %s", h.eventSummary(ctx, id))
}

// waitHandle waits until the job is running with a checkpointed handle. Its
// work exists.
func (h *harness) waitHandle(ctx context.Context, id string, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var ok bool
		require.NoError(h.t, h.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM active_jobs a JOIN jobs j ON j.id = a.job_id
			WHERE a.job_id = $1 AND j.status = 'running' AND a.handle IS NOT NULL)`, id).Scan(&ok))
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s not running with a handle after %s: %s", id, within, h.eventSummary(ctx, id))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// waitEvent waits for the job's first event of kind.
func (h *harness) waitEvent(ctx context.Context, id, kind string, within time.Duration) event {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, e := range h.events(ctx, id) {
			if e.Kind == kind {
				return e
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s: no %s event after %s: %s", id, kind, within, h.eventSummary(ctx, id))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}
