package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// newLivenessHarness is a harness with livenessTimings and dead_after 1s.
func newLivenessHarness(t *testing.T, dbURL string, capacity int) *harness {
	t.Helper()
	tm := livenessTimings()
	tm.Capacity = capacity
	h := newHarness(t, dbURL, tm)
	h.setAgentYAML("dead_after: " + livenessDeadAfter.String())
	return h
}

// kill -9 of an agent holding resumable and shell jobs, another agent
// idle. Its name lock frees with its connection, so the resumable jobs are
// released early ("name lock free") and resumed by the other agent well
// before stale_job, their work started once. The shell jobs (no Resume)
// are not touched before stale_job. A free lock does not prove their local
// processes stopped. After it they fail as before (awol).
func TestLivenessKill9ReleasesResumableEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newLivenessHarness(t, pgtest.URL(t), 10)
	tm := h.tm

	victim := h.startAgent(ctx, "live-victim")
	res, sh := h.submitMix(ctx, 4, 2, 60*time.Second, 60*time.Second)
	h.waitStarted(ctx, res, sh)
	rescuer := h.startAgent(ctx, "live-rescuer")

	killedAt := h.dbNow(ctx)
	h.kill9(victim)

	for _, id := range res {
		resumed := h.waitEvent(ctx, id, "resumed", tm.StaleJob/2)
		assert.Equal(t, rescuer.gen, resumed.Generation, "job %s: the idle agent resumes it", id)
		var released event
		for _, e := range h.events(ctx, id) {
			if e.Kind == "released" && e.ID < resumed.ID {
				released = e
			}
		}
		if assert.NotZero(t, released.ID, "job %s: released before it is resumed: %s", id, h.eventSummary(ctx, id)) {
			took := released.At.Sub(killedAt)
			t.Logf("job %s released %s after kill -9 (stale_job %s): %s", id, took.Round(time.Millisecond), tm.StaleJob, released.Message)
			assert.Contains(t, released.Message, earlyReason, "job %s: the early path released it", id)
			assert.Contains(t, released.Message, victim.name, "job %s: the release names the dead agent", id)
			assert.Less(t, took, tm.StaleJob/2, "job %s: released long before stale_job", id)
		}
	}
	// The resumable jobs were released well before stale_job. The shell
	// jobs are still the dead agent's.
	for _, id := range sh {
		assert.Equal(t, victim.name, h.holder(ctx, id), "shell job %s: still held by the dead agent: %s", id, h.eventSummary(ctx, id))
		assert.Equal(t, store.StatusRunning, h.job(ctx, id).Status, "shell job %s", id)
	}

	h.waitTerminal(ctx, sh, tm.StaleJob+15*time.Second)
	for _, id := range sh {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusFailed, j.Status, "shell job %s; events: %s", id, h.eventSummary(ctx, id))
		assert.Contains(t, j.Error, "awol", "shell job %s: the stale_job path failed it", id)
		assert.NotContains(t, j.Error, earlyReason, "shell job %s", id)
		for _, e := range h.events(ctx, id) {
			if e.Kind == "released" || e.Kind == "failed" {
				// The lease was last renewed at most a keepalive before the
				// kill. The janitor may act from stale_job after that renewal.
				took := e.At.Sub(killedAt)
				assert.GreaterOrEqual(t, took, tm.StaleJob-2*tm.Keepalive, "shell job %s: %s %s after the kill, before stale_job", id, e.Kind, took)
			}
		}
		h.checkTimeline(ctx, id)
		// The failure queued a Cleanup, which a live agent runs after it.
		h.waitGroupGone(ctx, id, 15*time.Second)
	}
	for _, id := range res {
		assert.Equal(t, 1, h.startCount(id), "resumable job %s: work starts", id)
		assert.Equal(t, rescuer.name, h.holder(ctx, id), "resumable job %s", id)
	}
	// One dead generation, counted once by the agent that found it.
	assert.Equal(t, 1.0, h.metric(ctx, rescuer, "tether_agents_dead_total"), "agents found dead by the rescuer")
}

// SIGSTOP of an agent for longer than dead_after (well within stale_job).
// It is silent but alive, its connections open and its name lock held, so
// nothing may happen early. After SIGCONT it goes on holding every job
// under the same lease.
func TestLivenessSIGSTOPIsNotDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLivenessHarness(t, pgtest.URL(t), 10)
	tm := h.tm

	stopped := h.startAgent(ctx, "live-stopped")
	ids, _ := h.submitMix(ctx, 6, 0, 45*time.Second, 0)
	h.waitStarted(ctx, ids, nil)
	h.startAgent(ctx, "live-observer") // its liveness check looks at the stopped agent
	before := h.leases(ctx, ids)
	lockPID := h.nameLockPID(ctx, stopped.name)
	require.NotZero(t, lockPID, "the agent holds its name lock")

	h.signal(stopped, syscall.SIGSTOP)
	stoppedAt := h.dbNow(ctx)
	// 4 × dead_after of silence. A check that read last_seen alone would act.
	pause := 4 * livenessDeadAfter
	require.Less(t, pause+2*tm.Keepalive, tm.StaleJob-2*tm.Keepalive-tm.KillGrace, "the pause must end before the self-fence")
	h.assertStill(ctx, ids, before, pause, "while the agent is stopped")
	assert.Equal(t, lockPID, h.nameLockPID(ctx, stopped.name), "a stopped process keeps its name lock")
	assert.False(t, h.lastSeen(ctx, stopped.name).After(stoppedAt.Add(tm.Keepalive)), "the stopped agent was silent")
	h.signal(stopped, syscall.SIGCONT)

	resumedAt := h.dbNow(ctx)
	h.waitSeenAfter(ctx, stopped.name, resumedAt, 5*time.Second)
	// Two more dead_after. A first observation of a free lock during the
	// pause (there was none) would have matured by now.
	h.assertStill(ctx, ids, before, 2*livenessDeadAfter, "after SIGCONT")
	assert.False(t, stopped.exited(), "the agent lives on")
	h.assertNoAgentSaid(earlyReason)
}

// The agent's name-lock connection is killed with pg_terminate_backend
// while the agent itself heartbeats. The lock is free for a moment but the
// agent is alive, so nothing is released, and the agent takes its lock
// again within a few keepalives.
func TestLivenessLockConnectionKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLivenessHarness(t, pgtest.URL(t), 10)
	tm := h.tm

	a := h.startAgent(ctx, "live-lockless")
	ids, _ := h.submitMix(ctx, 6, 0, 45*time.Second, 0)
	h.waitStarted(ctx, ids, nil)
	h.startAgent(ctx, "live-observer")
	before := h.leases(ctx, ids)

	pid := h.nameLockPID(ctx, a.name)
	require.NotZero(t, pid, "the agent holds its name lock")
	var ok bool
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok))
	require.True(t, ok, "terminating the lock backend %d", pid)
	killedAt := h.dbNow(ctx)

	newPID := h.waitNameLock(ctx, a.name, pid, 10*tm.Keepalive)
	t.Logf("name lock re-taken by backend %d (was %d) %s after the kill", newPID, pid, h.dbNow(ctx).Sub(killedAt).Round(time.Millisecond))
	h.waitSeenAfter(ctx, a.name, killedAt, 5*time.Second)
	// From the kill on, for 3 × dead_after. A check that took the free
	// lock alone for death would have acted by then.
	h.assertStill(ctx, ids, before, 3*livenessDeadAfter, "after the lock connection was killed")
	assert.False(t, a.exited(), "the agent lives on: %s", a.out.tail(2000))
	assert.Equal(t, newPID, h.nameLockPID(ctx, a.name), "the agent keeps its new lock")
	h.assertNoAgentSaid(earlyReason)
}

// PostgreSQL restarts under 3 agents holding 60 resumable jobs. Every name
// lock frees at once, and the database is down for longer than dead_after,
// so every last_seen is older than that when it comes back. The agents
// reconnect, re-take their locks and heartbeat within a keepalive. No
// stampede, zero releases, zero lease changes.
func TestLivenessDatabaseRestartNoStampede(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cluster, url := pgtest.StartCluster(t)
	h := newLivenessHarness(t, url, 20)
	tm := h.tm

	agents := []*agentProc{h.startAgent(ctx, "live-1"), h.startAgent(ctx, "live-2"), h.startAgent(ctx, "live-3")}
	ids, _ := h.submitMix(ctx, 60, 0, 90*time.Second, 0)
	h.waitStarted(ctx, ids, nil)
	before := h.leases(ctx, ids)
	perAgent := map[string]int{}
	for _, l := range before {
		perAgent[strings.SplitN(l, "/", 2)[0]]++
	}
	t.Logf("jobs per agent before the restart: %v", perAgent)
	for _, a := range agents {
		require.NotZero(t, h.nameLockPID(ctx, a.name), "agent %s holds its name lock", a.name)
	}

	down := 2 * livenessDeadAfter
	took := h.outage(ctx, cluster, down)
	backAt := h.dbNow(ctx)
	t.Logf("database down for %s (dead_after %s, self-fence after %s)", took.Round(time.Millisecond), livenessDeadAfter, tm.StaleJob-2*tm.Keepalive)
	require.Less(t, took, tm.StaleJob/2, "the restart was meant to be short")

	for _, a := range agents {
		h.waitNameLock(ctx, a.name, 0, 10*time.Second)
		h.waitSeenAfter(ctx, a.name, backAt, 10*time.Second)
	}
	// Every agent is back. A first observation of a free lock made before
	// one re-took it would mature within dead_after. Watch 3 of them.
	h.assertStill(ctx, ids, before, 3*livenessDeadAfter, "after the database restart")
	var released, requeued int
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = 'released'), count(*) FILTER (WHERE kind = 'requeued')
		FROM job_timeline WHERE job_id = ANY($1)`, ids).Scan(&released, &requeued))
	assert.Zero(t, released, "released events")
	assert.Zero(t, requeued, "requeued events")
	for _, a := range agents {
		assert.False(t, a.exited(), "agent %s lives on", a.name)
	}
	h.assertNoAgentSaid(earlyReason)
}
