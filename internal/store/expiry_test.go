package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
)

// TestExpiryStampedByTheEndingStatement checks that every way a job ends
// stamps expires_at = finished_at + the ttl of the status stored (none for a
// ttl of 0), and that a requeue clears it. That is the rule the schema's
// trigger applied before v11, now in the statements themselves.
func TestExpiryStampedByTheEndingStatement(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	ttl := limits.Set{TTLSucceeded: 7 * 24 * time.Hour, TTLFailed: 30 * 24 * time.Hour}
	newJob := func(l limits.Set) (store.Job, store.Claimed) {
		j, _, err := st.Submit(ctx, store.SubmitParams{Command: "c", Plugin: "noop", Context: json.RawMessage(`{}`), Limits: l})
		require.NoError(t, err)
		return j, claimOne(t, st, a, j.ID)
	}
	expiry := func(id string) (finished, expires *time.Time) {
		j, err := st.GetJob(ctx, id)
		require.NoError(t, err)
		return j.FinishedAt, j.ExpiresAt
	}
	check := func(name, id string, want time.Duration) {
		t.Helper()
		finished, expires := expiry(id)
		require.NotNil(t, finished, name)
		if want == 0 {
			assert.Nil(t, expires, "%s: kept forever", name)
			return
		}
		require.NotNil(t, expires, name)
		assert.Equal(t, want, expires.Sub(*finished), name)
	}

	// The agent's hot path, alone and batched.
	_, c := newJob(ttl)
	_, err := st.EndAttempt(ctx, store.End{JobID: c.Job.ID, Lease: c.Lease, Actor: a, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	require.NoError(t, err)
	check("succeeded", c.Job.ID, ttl.TTLSucceeded)
	_, c1 := newJob(ttl)
	_, c2 := newJob(limits.Set{TTLSucceeded: 0, TTLFailed: time.Hour})
	_, err = st.EndFinalBatch(ctx, a, []store.End{
		{JobID: c1.Job.ID, Lease: c1.Lease, Actor: a, Outcome: store.Outcome{Status: store.StatusFailed, Error: "x"}},
		{JobID: c2.Job.ID, Lease: c2.Lease, Actor: a, Outcome: store.Outcome{Status: store.StatusSucceeded}},
	})
	require.NoError(t, err)
	check("failed in a batch", c1.Job.ID, ttl.TTLFailed)
	check("succeeded with ttl_succeeded 0", c2.Job.ID, 0)

	// The full transition. It covers a final failure with a Cleanup, and a
	// retry of a job whose cancel was requested (stored canceled).
	_, c3 := newJob(ttl)
	_, err = st.EndAttempt(ctx, store.End{JobID: c3.Job.ID, Lease: c3.Lease, Actor: a,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "x"}, Plan: lifecycle.Plan{Cleanup: true}})
	require.NoError(t, err)
	check("failed with a Cleanup", c3.Job.ID, ttl.TTLFailed)
	_, c4 := newJob(ttl)
	_, err = st.Cancel(ctx, c4.Job.ID, "")
	require.NoError(t, err)
	ended, err := st.EndAttempt(ctx, store.End{JobID: c4.Job.ID, Lease: c4.Lease, Actor: a,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "x"}, Plan: lifecycle.Plan{Retry: true, Wait: time.Second}})
	require.NoError(t, err)
	require.Equal(t, store.StatusCanceled, ended.Status)
	check("canceled instead of retried", c4.Job.ID, ttl.TTLFailed)

	// A retry is not finished. A queued job canceled at once is.
	_, c5 := newJob(ttl)
	_, err = st.EndAttempt(ctx, store.End{JobID: c5.Job.ID, Lease: c5.Lease, Actor: a,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "x"}, Plan: lifecycle.Plan{Retry: true, Wait: time.Hour}})
	require.NoError(t, err)
	finished, expires := expiry(c5.Job.ID)
	assert.Nil(t, finished)
	assert.Nil(t, expires, "a retry has no expiry")
	q, _, err := st.Submit(ctx, store.SubmitParams{Command: "other", Plugin: "noop", Context: json.RawMessage(`{}`), Limits: ttl})
	require.NoError(t, err)
	_, err = st.Cancel(ctx, q.ID, "")
	require.NoError(t, err)
	check("queued job canceled", q.ID, ttl.TTLFailed)

	// A requeue brings the failed job back. It has no expiry until it ends
	// again.
	_, _, err = st.Requeue(ctx, store.RequeueParams{JobID: c1.Job.ID, Reason: "again"})
	require.NoError(t, err)
	finished, expires = expiry(c1.Job.ID)
	assert.Nil(t, finished)
	assert.Nil(t, expires, "requeued: kept until it ends again")
}
