package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// releasedRunning submits a job of command c on plugin p, has h claim it,
// mark it running and release it. The job must now be resumed.
func releasedRunning(t *testing.T, st *store.Store, h store.Holder, c, p string) store.Job {
	t.Helper()
	ctx := context.Background()
	j, _, err := st.Submit(ctx, store.SubmitParams{Command: c, Plugin: p})
	require.NoError(t, err)
	got, err := st.ClaimWith(ctx, h, store.ClaimParams{Limit: 1, Commands: []string{c}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, j.ID, got[0].Job.ID)
	_, err = st.MarkRunning(ctx, j.ID, got[0].Lease, "")
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, h, j.ID, got[0].Lease, "test"))
	return j
}

func TestClaimWithTakesJobsToResumeOnlyForResumablePlugins(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, b := register(t, st, "a"), register(t, st, "b")
	res := releasedRunning(t, st, a, "c", "res")
	queued, _, err := st.Submit(ctx, store.SubmitParams{Command: "c", Plugin: "sh"})
	require.NoError(t, err)

	// b cannot resume with "res": it takes only the queued job.
	got, err := st.ClaimWith(ctx, b, store.ClaimParams{Limit: 5, Commands: []string{"c"}, Resumable: []string{"sh", "ecs"}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, queued.ID, got[0].Job.ID)
	assert.False(t, got[0].Resume)

	// An empty list takes no job to resume.
	got, err = st.ClaimWith(ctx, b, store.ClaimParams{Limit: 5, Commands: []string{"c"}, Resumable: []string{}})
	require.NoError(t, err)
	assert.Empty(t, got)

	got, err = st.ClaimWith(ctx, b, store.ClaimParams{Limit: 5, Commands: []string{"c"}, Resumable: []string{"res"}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, res.ID, got[0].Job.ID)
	assert.True(t, got[0].Resume)

	// Claim (Resumable nil) takes a job to resume whatever its plugin.
	res2 := releasedRunning(t, st, a, "c", "other")
	got, err = st.Claim(ctx, b, 5, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, res2.ID, got[0].Job.ID)
	assert.True(t, got[0].Resume)
}

func TestClaimReturnsTheStampedLimits(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	l := limits.Set{MaxRetry: 3, RetryBackoff: 10 * time.Second, RetryBackoffMax: 5 * time.Minute,
		PendingTimeout: time.Hour, ActiveTimeout: 90 * time.Second, TTLSucceeded: 24 * time.Hour, TTLFailed: 48 * time.Hour}
	j, _, err := st.Submit(ctx, store.SubmitParams{Command: "c", Plugin: "p", Context: json.RawMessage(`{"k":"v"}`), Limits: l})
	require.NoError(t, err)
	got, err := st.Claim(ctx, a, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, j.ID, got[0].Job.ID)
	assert.Equal(t, l, limits.Set(got[0].Job.Limits))
	assert.Equal(t, 90*time.Second, got[0].ActiveTimeout)
	assert.Equal(t, 1, got[0].Job.Attempt)
	assert.JSONEq(t, `{"k":"v"}`, string(got[0].Job.Context))
}

// The oldest due jobs of the agent's commands are claimed, however the
// commands' backlogs compare. Jobs not yet due and other commands wait.
func TestClaimTakesTheOldestAcrossCommands(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.DB(t)
	st := store.New(pool)
	a := register(t, st, "a")
	ids := map[string]string{}
	for _, name := range []string{"x1", "x2", "x3", "y1", "y2", "z1", "later"} {
		cmd := name[:1]
		if name == "later" {
			cmd = "x"
		}
		j, _, err := st.Submit(ctx, store.SubmitParams{Command: cmd, Plugin: "p"})
		require.NoError(t, err)
		ids[name] = j.ID
	}
	// The due order is y1, x1, y2, x2, x3. z is not ours. later is not due.
	for name, ago := range map[string]int{"y1": 50, "x1": 40, "y2": 30, "x2": 20, "x3": 10, "z1": 60, "later": -60} {
		_, err := pool.Exec(ctx, `UPDATE active_jobs SET run_after = now() - $2 * interval '1 minute' WHERE job_id = $1`, ids[name], ago)
		require.NoError(t, err)
	}
	claimIDs := func(limit int) []string {
		got, err := st.ClaimWith(ctx, a, store.ClaimParams{Limit: limit, Commands: []string{"x", "y", "x"}})
		require.NoError(t, err)
		var out []string
		for _, c := range got {
			out = append(out, c.Job.ID)
		}
		return out
	}
	assert.ElementsMatch(t, []string{ids["y1"], ids["x1"], ids["y2"]}, claimIDs(3))
	assert.ElementsMatch(t, []string{ids["x2"], ids["x3"]}, claimIDs(3))
	assert.Empty(t, claimIDs(3))
}

// A cancel commits while a claim waits for the job row. The claim takes
// neither the job nor its active row.
func TestClaimRacingACancelTakesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.DB(t)
	st := store.New(pool)
	a, b := register(t, st, "a"), register(t, st, "b")
	j := releasedRunning(t, st, a, "c", "res")
	var lease int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT lease FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&lease))

	// The "cancel": it holds the job row while the claim starts.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, j.ID)
	require.NoError(t, err)

	type result struct {
		got []store.Claimed
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := st.Claim(ctx, b, 1, []string{"c"})
		done <- result{got, err}
	}()
	// The claim has locked the active row and waits for the job row.
	awaitLockWaits(t, pool, "%picked%", 1, 10*time.Second)
	_, err = tx.Exec(ctx, `UPDATE jobs SET status = 'canceling', updated_at = now() WHERE id = $1`, j.ID)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	assert.Empty(t, r.got)
	var agent *string
	var after int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT agent_name, lease FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&agent, &after))
	assert.Nil(t, agent, "the active row was not taken")
	assert.Equal(t, lease, after)
	assert.NotContains(t, kinds(t, st, j.ID)[4:], "claimed")
}

// TestClaimAsksReadyOnItsConnection checks that the claim's gate is asked
// once it has its connection (acquiring may have waited), and that a no takes
// nothing.
func TestClaimAsksReadyOnItsConnection(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j := submit(t, st, "c")
	asked := 0
	got, err := st.ClaimWith(ctx, a, store.ClaimParams{Limit: 1, Commands: []string{"c"}, Ready: func() bool { asked++; return false }})
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, 1, asked)
	now, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusQueued, now.Status)
	got, err = st.ClaimWith(ctx, a, store.ClaimParams{Limit: 1, Commands: []string{"c"}, Ready: func() bool { return true }})
	require.NoError(t, err)
	require.Len(t, got, 1)
}
