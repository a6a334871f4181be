package janitor

import (
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/jobstate"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// submitWith queues a job of command c on plugin p with the given limits.
func (f *fixture) submitWith(p string, l limits.Set) string {
	f.t.Helper()
	j, _, err := f.st.Submit(f.ctx, store.SubmitParams{Command: "c", Plugin: p, Limits: l})
	require.NoError(f.t, err)
	return j.ID
}

func (f *fixture) runAfter(id string) (finite bool, wait time.Duration) {
	f.t.Helper()
	var secs float64
	require.NoError(f.t, f.pool.QueryRow(f.ctx,
		`SELECT isfinite(run_after), CASE WHEN isfinite(run_after) THEN extract(epoch FROM run_after - now())::float8 ELSE 0 END
		 FROM active_jobs WHERE job_id = $1`, id).Scan(&finite, &secs))
	return finite, time.Duration(secs * float64(time.Second))
}

// An awol failure of a non-resumable job with retries left is retried. The
// next attempt waits for the Cleanup of the last one, then for its backoff.
func TestAWOLFailureIsRetriedAfterItsCleanup(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"sh": shCaps})
	dead := f.agent("dead", "dead-g1", map[string][]string{"sh": shCaps})
	l := limits.Set{MaxRetry: 1, RetryBackoff: time.Hour, RetryBackoffMax: time.Hour}
	id := f.submitWith("sh", l)
	cs, err := f.st.Claim(f.ctx, dead, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	_, err = f.st.MarkRunning(f.ctx, id, cs[0].Lease, "")
	require.NoError(t, err)
	f.silence(id, 10*time.Minute)

	plugins := newFakePlugins(plugin.Info{Name: "sh", Capabilities: shCaps})
	svc := New(f.pool, plugins, Config{Logger: quiet, Holder: live})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	j := f.job(id)
	assert.Equal(t, store.StatusQueued, j.Status)
	assert.Equal(t, 2, j.Attempt)
	assert.Equal(t, jobstate.Retriable, j.ErrorClass)
	assert.Contains(t, j.Error, "awol: agent dead silent for")
	assert.True(t, j.WaitingForCleanup)
	retry := f.events(id, "retry_scheduled")
	require.Len(t, retry, 1)
	assert.Contains(t, retry[0].Message, "attempt 2 after Cleanup, not before ")
	assert.Empty(t, f.events(id, "failed"), "not final")
	r, ok := f.active(id)
	require.True(t, ok)
	assert.Nil(t, r.Agent)
	assert.Equal(t, cs[0].Lease+1, r.Lease, "the old holder is fenced out")
	finite, _ := f.runAfter(id)
	assert.False(t, finite, "held until the Cleanup is done")
	assert.ErrorIs(t, f.st.Finish(f.ctx, dead, id, cs[0].Lease, store.Outcome{Status: store.StatusSucceeded}), store.ErrLeaseLost)

	// The Cleanup (of attempt 1) runs. Then the retry waits out its backoff.
	got, err := svc.CleanupPass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, got)
	calls := plugins.jobCalls(id)
	require.Len(t, calls, 1)
	assert.Equal(t, 1, calls[0].Attempt, "Cleanup of the attempt that ran")
	finite, wait := f.runAfter(id)
	assert.True(t, finite)
	assert.Greater(t, wait, 29*time.Minute, "backoff in [half, all] of 1h")
	assert.LessOrEqual(t, wait, time.Hour)
	cl, err := f.st.Claim(f.ctx, live, 1, []string{"c"})
	require.NoError(t, err)
	assert.Empty(t, cl, "not before its backoff")

	// With no retries left the next awol failure is final.
	f.exec(`UPDATE active_jobs SET run_after = now() WHERE job_id = $1`, id)
	cs, err = f.st.Claim(f.ctx, dead, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, 2, cs[0].Job.Attempt)
	_, err = f.st.MarkRunning(f.ctx, id, cs[0].Lease, "")
	require.NoError(t, err)
	f.silence(id, 10*time.Minute)
	_, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	j = f.job(id)
	assert.Equal(t, store.StatusFailed, j.Status)
	assert.Equal(t, 2, j.Attempt)
	assert.Len(t, f.events(id, "retry_scheduled"), 1)
}

func TestPendingTimeoutAndActiveTimeoutBackup(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"sh": shCaps})
	pending := f.submitWith("sh", limits.Set{MaxRetry: 5, PendingTimeout: time.Minute})
	young := f.submitWith("sh", limits.Set{PendingTimeout: time.Minute})
	f.exec(`UPDATE active_jobs SET run_after = now() - interval '61 seconds' WHERE job_id = $1`, pending)

	slow := f.submitWith("sh", limits.Set{MaxRetry: 1, ActiveTimeout: time.Minute, RetryBackoff: time.Second, RetryBackoffMax: time.Second})
	cs, err := f.st.Claim(f.ctx, live, 10, []string{"c"})
	require.NoError(t, err)
	var lease int64
	for _, c := range cs {
		if c.Job.ID == slow {
			lease = c.Lease
		}
	}
	require.NotZero(t, lease)
	_, err = f.st.MarkRunning(f.ctx, slow, lease, "")
	require.NoError(t, err)
	// The claim took the pending jobs too. Put them back in the queue.
	f.exec(`UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL WHERE job_id = ANY($1)`, []string{pending, young})
	f.exec(`UPDATE jobs SET status = 'queued' WHERE id = ANY($1)`, []string{pending, young})
	f.exec(`UPDATE jobs SET attempt_started_at = now() - interval '2 minutes' WHERE id = $1`, slow)

	svc := New(f.pool, newFakePlugins(plugin.Info{Name: "sh", Capabilities: shCaps}),
		Config{Logger: quiet, Holder: live, Keepalive: time.Second, CleanInterval: time.Second})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	j := f.job(pending)
	assert.Equal(t, store.StatusFailed, j.Status)
	assert.Equal(t, jobstate.Permanent, j.ErrorClass, "never retried")
	assert.Equal(t, "pending timeout: not started within pending_timeout (1m0s)", j.Error)
	assert.False(t, f.cleanupQueued(pending), "nothing ran")
	assert.Equal(t, store.StatusQueued, f.job(young).Status)

	j = f.job(slow)
	assert.Equal(t, store.StatusQueued, j.Status, "retried")
	assert.Equal(t, 2, j.Attempt)
	assert.Contains(t, j.Error, "active_timeout of 1m0s exceeded")
	assert.True(t, f.cleanupQueued(slow), "what the attempt left is cleaned up")
	assert.ErrorIs(t, f.st.Finish(f.ctx, live, slow, lease, store.Outcome{Status: store.StatusSucceeded}), store.ErrLeaseLost)
}

func TestRetentionAndOrphanGates(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"sh": shCaps})
	day := 24 * time.Hour
	finish := func(l limits.Set, o store.Outcome) string {
		id := f.submitWith("sh", l)
		cs, err := f.st.Claim(f.ctx, live, 1, []string{"c"})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.NoError(t, f.st.Finish(f.ctx, live, id, cs[0].Lease, o))
		return id
	}
	ok := store.Outcome{Status: store.StatusSucceeded}
	bad := store.Outcome{Status: store.StatusFailed, Error: "x", ErrorClass: "permanent"}
	oldOK := finish(limits.Set{TTLSucceeded: day}, ok)
	newOK := finish(limits.Set{TTLSucceeded: day}, ok)
	oldBad := finish(limits.Set{TTLFailed: day}, bad)
	forever := finish(limits.Set{TTLSucceeded: day}, bad) // ttl_failed 0
	uncleaned := finish(limits.Set{TTLFailed: day}, bad)
	require.NoError(t, f.st.EnqueueCleanup(f.ctx, uncleaned, "cleanup after the job ended failed: boom"))
	f.exec(`UPDATE cleanups SET next_at = now() + interval '1 hour' WHERE job_id = $1`, uncleaned) // not due this pass
	// Finished 25 hours ago. The expiry the ending statement stamped moves
	// with it (tether_expiry, the rule it applies).
	f.exec(`UPDATE jobs SET finished_at = now() - interval '25 hours',
	        expires_at = tether_expiry(status, now() - interval '25 hours', ttl_succeeded, ttl_failed) WHERE id = ANY($1)`,
		[]string{oldOK, oldBad, forever, uncleaned})
	assert.Nil(t, f.job(forever).ExpiresAt)
	require.NotNil(t, f.job(newOK).ExpiresAt)

	queued := f.submitWith("sh", limits.Set{TTLSucceeded: time.Second})
	f.exec(`UPDATE jobs SET expires_at = now() - interval '1 day' WHERE id = $1`, queued)
	f.exec(`UPDATE active_jobs SET run_after = 'infinity' WHERE job_id = $1`, queued) // a gate with no Cleanup

	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: live, RetentionBatch: 1})
	_, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	exists := func(id string) bool {
		_, err := f.st.GetJob(f.ctx, id)
		return err == nil
	}
	assert.False(t, exists(oldOK))
	assert.False(t, exists(oldBad))
	assert.True(t, exists(newOK))
	assert.True(t, exists(forever))
	assert.True(t, exists(queued), "never a non-terminal job")
	assert.True(t, exists(uncleaned), "kept while its Cleanup is queued")
	assert.True(t, f.cleanupQueued(uncleaned), "and the Cleanup with it")
	var evs int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM job_timeline WHERE job_id = ANY($1)`, []string{oldOK, oldBad}).Scan(&evs))
	assert.Zero(t, evs)
	finite, _ := f.runAfter(queued)
	assert.True(t, finite, "a gate whose Cleanup is gone is lifted")
}
