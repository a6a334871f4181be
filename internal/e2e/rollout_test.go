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
)

// A rolling deploy the way ECS does it (maximumPercent 200,
// minimumHealthyPercent 100). For each of 3 agents, a replacement under a
// new name starts, then the old one gets SIGTERM and drains. 30 resumable
// jobs outlive the rollout. Every job succeeds, its work started exactly
// once, and no job waited for stale_job (60 s). Every release is a drain's
// handoff, followed by a resume within a couple of claim intervals.
func TestRollingDeployLosesAndDelaysNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	tm := drainTimings()
	tm.Capacity = 10 // 3 × 10 slots for 30 jobs: every agent holds some
	h := newHarness(t, pgtest.URL(t), tm)
	env := drainEnv(30*time.Second, "immediate")
	const jobDuration = 20 * time.Second

	live := []*agentProc{
		h.startAgent(ctx, "roll-1", env...),
		h.startAgent(ctx, "roll-2", env...),
		h.startAgent(ctx, "roll-3", env...),
	}
	var ids []string
	for range 30 {
		ids = append(ids, h.submitResumable(ctx, jobDuration))
	}
	for _, id := range ids {
		h.waitHandle(ctx, id, 20*time.Second)
	}
	firstStart := time.Now() // no job's work can end before firstStart-ish + jobDuration

	drained := map[string]bool{}
	rollStart := time.Now()
	for i, old := range live {
		var held int
		require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM active_jobs WHERE agent_name = $1`, old.name).Scan(&held))
		assert.Positive(t, held, "agent %s should hold jobs before it is replaced", old.name)

		next := h.startAgent(ctx, fmt.Sprintf("roll-%d", len(live)+i+1), env...)
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
	require.Zero(t, finished, "jobs must outlive the rollout (took %s, jobs last %s from %s)", rollout, jobDuration, firstStart)

	h.waitTerminal(ctx, ids, jobDuration+20*time.Second)
	gap := handoffGap(tm)
	var handoffCount int
	var worst time.Duration
	for _, id := range ids {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		assert.Equal(t, 1, h.startCount(id), "job %s: work starts; events: %s", id, h.eventSummary(ctx, id))
		h.checkTimeline(ctx, id)

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
				assert.Less(t, d, gap, "job %s: handoff by %s → resume took %s (stale_job %s): %s", id, name, d, tm.StaleJob, h.eventSummary(ctx, id))
			}
		}
		// Every original agent was replaced, so every job was handed off.
		assert.Positive(t, released, "job %s was never handed off: %s", id, h.eventSummary(ctx, id))
	}
	t.Logf("%d handoffs; slowest handoff → resume %s (bound %s, stale_job %s)", handoffCount, worst, gap, tm.StaleJob)
}
