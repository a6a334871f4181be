package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
)

func submitWith(t *testing.T, st *store.Store, l limits.Set) store.Job {
	t.Helper()
	j, _, err := st.Submit(context.Background(), store.SubmitParams{Command: "c", Plugin: "noop", Context: json.RawMessage(`{}`), Limits: l})
	require.NoError(t, err)
	return j
}

func claimOne(t *testing.T, st *store.Store, h store.Holder, id string) store.Claimed {
	t.Helper()
	got, err := st.Claim(context.Background(), h, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].Job.ID)
	return got[0]
}

// An operator requeue used to recreate the active row at lease
// 0, so the next claim handed out lease 1 again and a stalled holder of
// attempt 1 could write onto attempt 2.
func TestRequeueNeverHandsOutALeaseAgain(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, b := register(t, st, "a"), register(t, st, "b")
	j := submit(t, st, "c")
	first := claimOne(t, st, a, j.ID)
	_, err := st.MarkRunning(ctx, j.ID, first.Lease, "")
	require.NoError(t, err)
	// The janitor fails attempt 1 (lease + 1 on its event) while a stalls.
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: first.Lease, Actor: b, EventLease: first.Lease + 1,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "awol", ErrorClass: "permanent"}})
	require.NoError(t, err)
	_, _, err = st.Requeue(ctx, store.RequeueParams{JobID: j.ID, Reason: "try again", By: "op"})
	require.NoError(t, err)
	second := claimOne(t, st, b, j.ID)
	assert.Greater(t, second.Lease, first.Lease+1, "attempt 2's lease is above every lease attempt 1 had")

	// a wakes up with lease 1 of attempt 1: every write is refused.
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: first.Lease, Actor: a, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	assert.ErrorIs(t, err, store.ErrLeaseLost)
	assert.ErrorIs(t, st.Checkpoint(ctx, j.ID, first.Lease, []byte("old")), store.ErrLeaseLost)
	held, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: first.Lease, Stdout: []byte("stale\n")}}, 1<<20)
	require.NoError(t, err)
	assert.False(t, held[j.ID], "a stale holder's output is refused")
	assert.ErrorIs(t, st.CheckpointWithOutput(ctx, store.LogBatch{JobID: j.ID, Lease: first.Lease, Stdout: []byte("x")}, 1<<20, []byte("h")), store.ErrLeaseLost)

	got, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusAccepted, got.Status)
	assert.Equal(t, 2, got.Attempt)
	assert.Equal(t, second.Lease, got.Lease)
}

// A retriable failure used to queue a job whose cancel was
// requested, so it ran again.
func TestCancelWinsOverARetry(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j := submitWith(t, st, limits.Set{MaxRetry: 3, RetryBackoff: time.Second, RetryBackoffMax: time.Second})
	c := claimOne(t, st, a, j.ID)
	_, err := st.MarkRunning(ctx, j.ID, c.Lease, "")
	require.NoError(t, err)
	_, err = st.Cancel(ctx, j.ID, "stop it")
	require.NoError(t, err)

	// The attempt failed retriably just as the cancel came in (an
	// active_timeout looks the same). The plan says retry.
	plan := lifecycle.Decide(lifecycle.Input{Status: store.StatusFailed, ErrorClass: "retriable", Attempt: 1,
		Levers: limits.Set{MaxRetry: 3, RetryBackoff: time.Second, RetryBackoffMax: time.Second}})
	require.True(t, plan.Retry)
	ended, err := st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: a, Plan: plan,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "active_timeout of 1s exceeded", ErrorClass: "retriable"}})
	require.NoError(t, err)
	assert.False(t, ended.Retried)
	assert.Equal(t, store.StatusCanceled, ended.Status)
	got, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceled, got.Status)
	assert.Equal(t, 1, got.Attempt, "no new attempt")
	assert.Contains(t, got.Error, "canceled by request")
	assert.Contains(t, got.Error, "active_timeout")
	again, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	assert.Empty(t, again, "a canceled job is never claimed again")
	assert.Equal(t, "canceled", kinds(t, st, j.ID)[len(kinds(t, st, j.ID))-1])
}

// An outcome whose Cleanup the agent runs itself writes the durable cleanups
// row in the same statement, claimed by that agent. The retry waits until it
// is done, and a lapsed claim is any worker's.
func TestEndWithCleanupWritesTheQueueRowAndGatesTheRetry(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	lv := limits.Set{MaxRetry: 1, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond}
	j := submitWith(t, st, lv)
	c := claimOne(t, st, a, j.ID)
	_, err := st.MarkRunning(ctx, j.ID, c.Lease, "")
	require.NoError(t, err)
	plan := lifecycle.Decide(lifecycle.Input{Status: store.StatusFailed, ErrorClass: "retriable", Attempt: 1, Levers: lv, PluginCalled: true, HasCleanup: true})
	require.True(t, plan.Retry && plan.Cleanup)
	ended, err := st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: a, Plan: plan,
		Outcome:   store.Outcome{Status: store.StatusFailed, Error: "throttled", ErrorClass: "retriable"},
		CleanupBy: a.Name, CleanupHold: time.Minute})
	require.NoError(t, err)
	assert.True(t, ended.Retried)
	assert.Nil(t, ended.RunAfter, "the retry waits for the Cleanup")
	require.True(t, ended.Cleanup.Held(), "the agent holds the first claim")
	assert.Equal(t, store.CleanupClaim{Worker: a.Name, Attempts: 1}, ended.Cleanup)

	list, err := st.ListCleanups(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, a.Name, list[0].ClaimedBy)
	got, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.True(t, got.WaitingForCleanup)
	none, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	assert.Empty(t, none, "attempt 2 never runs beside attempt 1's remote work")
	// A worker cannot take the row while the agent's claim holds.
	taken, err := st.ClaimCleanups(ctx, "other", []string{"noop"}, 10, time.Minute)
	require.NoError(t, err)
	assert.Empty(t, taken)

	require.NoError(t, st.CleanupDone(ctx, j.ID, ended.Cleanup, a.Generation, "cleanup_ok", ""))
	require.Eventually(t, func() bool {
		next, err := st.Claim(ctx, a, 5, []string{"c"})
		return err == nil && len(next) == 1 && next[0].Job.Attempt == 2
	}, 5*time.Second, 10*time.Millisecond, "attempt 2 runs once the Cleanup is done")
}

// A value PostgreSQL cannot store is a *DataError, which the
// agent turns into a permanent failure rather than retrying forever.
func TestEndRefusedForItsDataIsADataError(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j := submit(t, st, "c")
	c := claimOne(t, st, a, j.ID)
	_, err := st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: a,
		Outcome: store.Outcome{Status: store.StatusSucceeded, Result: json.RawMessage(`{"s":"\u0000"}`)}})
	var de *store.DataError
	require.ErrorAs(t, err, &de)
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: a,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "nul \x00 byte", ErrorClass: "permanent"}})
	require.ErrorAs(t, err, &de)
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: a,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "stored", ErrorClass: "permanent"}})
	require.NoError(t, err, "the fence still holds after refused writes")
}

// Found by the invariant test. A job canceled while queued (here a retry
// waiting for its Cleanup) then requeued must not start below its leases.
func TestCancelWhileQueuedThenRequeueKeepsLeasesMonotonic(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	lv := limits.Set{MaxRetry: 3, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond}
	j := submitWith(t, st, lv)
	c := claimOne(t, st, a, j.ID)
	_, err := st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: a,
		Plan:    lifecycle.Plan{Retry: true, Wait: time.Millisecond},
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "x", ErrorClass: "retriable"}})
	require.NoError(t, err)
	var queuedLease int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT lease FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&queuedLease))
	_, err = st.Cancel(ctx, j.ID, "stop")
	require.NoError(t, err)
	_, _, err = st.Requeue(ctx, store.RequeueParams{JobID: j.ID, Reason: "again"})
	require.NoError(t, err)
	next := claimOne(t, st, a, j.ID)
	assert.Greater(t, next.Lease, queuedLease, "the lease never goes back")
}

// The janitor's final ends carry the status it decided on as part of the
// fence (End.ExpectStatus). A job that moved on since writes nothing, in the
// one-row path (EndAttempt) as in a batch with ends that do land.
func TestFinalEndFencedByExpectedStatus(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j1, j2 := submitWith(t, st, limits.Set{}), submitWith(t, st, limits.Set{})
	c1, c2 := claimOne(t, st, a, j1.ID), claimOne(t, st, a, j2.ID) // both accepted
	end := func(c store.Claimed, expect jobstate.JobStatus) store.End {
		return store.End{JobID: c.Job.ID, Lease: c.Lease, ExpectStatus: expect, Actor: a,
			Outcome: store.Outcome{Status: store.StatusFailed, Error: "x"}}
	}

	_, err := st.EndAttempt(ctx, end(c1, store.StatusRunning))
	assert.ErrorIs(t, err, store.ErrLeaseLost, "expected running, the job is accepted")
	got, err := st.GetJob(ctx, j1.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusAccepted, got.Status, "nothing written")

	stored, err := st.EndFinalBatch(ctx, a, []store.End{end(c1, store.StatusRunning), end(c2, store.StatusAccepted)})
	require.NoError(t, err)
	assert.Equal(t, []bool{false, true}, stored)
	for id, want := range map[string]jobstate.JobStatus{j1.ID: store.StatusAccepted, j2.ID: store.StatusFailed} {
		got, err := st.GetJob(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, got.Status, id)
	}

	ended, err := st.EndAttempt(ctx, end(c1, store.StatusAccepted))
	require.NoError(t, err)
	assert.Equal(t, store.StatusFailed, ended.Status)
}

// TestPriorEndFindsTheHoldersOwnEarlierWrite checks that an end or release
// sent again after its answer was lost finds the fence gone. PriorEnd tells
// its own earlier write (final, retry with its Cleanup claim, release) from a
// lease someone else ended.
func TestPriorEndFindsTheHoldersOwnEarlierWrite(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, b := register(t, st, "a"), register(t, st, "b")

	// A final end.
	j := submit(t, st, "c")
	c := claimOne(t, st, a, j.ID)
	e := store.End{JobID: j.ID, Lease: c.Lease, Actor: a, Outcome: store.Outcome{Status: store.StatusSucceeded}}
	_, err := st.EndAttempt(ctx, e)
	require.NoError(t, err)
	_, err = st.EndAttempt(ctx, e) // the resend
	require.ErrorIs(t, err, store.ErrLeaseLost)
	kind, ended, found, err := st.PriorEnd(ctx, a, j.ID, c.Lease, "")
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, "succeeded", kind)
	assert.Equal(t, store.StatusSucceeded, ended.Status)
	_, _, found, err = st.PriorEnd(ctx, b, j.ID, c.Lease, "")
	require.NoError(t, err)
	assert.False(t, found, "another holder did not end it")

	// A release. A lease the janitor ended is not the holder's.
	j = submit(t, st, "rel")
	c = claimCmd(t, st, a, "rel")
	_, err = st.MarkRunning(ctx, j.ID, c.Lease, "")
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, a, j.ID, c.Lease, "handoff: test"))
	kind, _, found, err = st.PriorEnd(ctx, a, j.ID, c.Lease, "")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, "released", kind)

	j = submit(t, st, "jan")
	c = claimCmd(t, st, a, "jan")
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: c.Lease, Actor: b, EventLease: c.Lease + 1,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "awol", ErrorClass: "permanent"}})
	require.NoError(t, err)
	_, _, found, err = st.PriorEnd(ctx, a, j.ID, c.Lease, "")
	require.NoError(t, err)
	assert.False(t, found, "the janitor's end is a lost lease for the holder")
	// A retry whose Cleanup this agent runs itself. The claim comes back.
	j = submitWith(t, st, limits.Set{MaxRetry: 2})
	c = claimOne(t, st, a, j.ID)
	_, err = st.MarkRunning(ctx, j.ID, c.Lease, "")
	require.NoError(t, err)
	e = store.End{JobID: j.ID, Lease: c.Lease, Actor: a, Outcome: store.Outcome{Status: store.StatusFailed, Error: "x", ErrorClass: "retriable"},
		Plan: lifecycle.Plan{Retry: true, Cleanup: true}, CleanupBy: a.Name, CleanupHold: time.Minute}
	first, err := st.EndAttempt(ctx, e)
	require.NoError(t, err)
	require.True(t, first.Cleanup.Held())
	kind, ended, found, err = st.PriorEnd(ctx, a, j.ID, c.Lease, a.Name)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, "retry_scheduled", kind)
	assert.True(t, ended.Retried)
	assert.Equal(t, first.Cleanup, ended.Cleanup, "the Cleanup claim the first write gave")
	require.NoError(t, st.CleanupDone(ctx, j.ID, first.Cleanup, a.Generation, "cleanup_ok", "test"))
	_, ended, found, err = st.PriorEnd(ctx, a, j.ID, c.Lease, a.Name)
	require.NoError(t, err)
	require.True(t, found)
	assert.False(t, ended.Cleanup.Held(), "a Cleanup already done is not run again")

}

func claimCmd(t *testing.T, st *store.Store, h store.Holder, command string) store.Claimed {
	t.Helper()
	got, err := st.Claim(context.Background(), h, 1, []string{command})
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}
