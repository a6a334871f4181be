package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

// TestMarkRunningBatchFencesEachJob checks one statement that carries three
// jobs. A job whose lease still holds is marked running. One whose lease was
// taken is refused (""). One whose cancel was requested answers canceling.
// Each answers as it would alone.
func TestMarkRunningBatchFencesEachJob(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	for range 3 {
		submit(t, st, "c")
	}
	got, err := st.Claim(ctx, a, 3, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 3)
	ok, lost, canceling := got[0], got[1], got[2]
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET lease = lease + 1, agent_name = NULL WHERE job_id = $1`, lost.Job.ID)
	require.NoError(t, err)
	_, err = st.Cancel(ctx, canceling.Job.ID, "")
	require.NoError(t, err)

	statuses, err := st.MarkRunningBatch(ctx, []store.Running{
		{JobID: ok.Job.ID, Lease: ok.Lease, Message: "m0"},
		{JobID: lost.Job.ID, Lease: lost.Lease, Message: "m1"},
		{JobID: canceling.Job.ID, Lease: canceling.Lease, Message: "m2"},
	})
	require.NoError(t, err)
	assert.Equal(t, []jobstate.JobStatus{store.StatusRunning, "", store.StatusCanceling}, statuses)
	assert.Equal(t, []string{"submitted", "claimed", "running"}, kinds(t, st, ok.Job.ID))
	assert.Equal(t, []string{"submitted", "claimed"}, kinds(t, st, lost.Job.ID), "a refused row writes nothing")
	j, err := st.GetJob(ctx, ok.Job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, j.Status)
	assert.NotNil(t, j.AttemptStartedAt)
}

// TestEndFinalBatchFencesEachJob checks that a batch of final ends stores
// each whose lease holds and nothing for one whose lease was taken. A value
// the database refuses fails the whole statement as a DataError, storing
// nothing.
func TestEndFinalBatchFencesEachJob(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	for range 3 {
		submit(t, st, "c")
	}
	got, err := st.Claim(ctx, a, 3, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, c := range got {
		_, err := st.MarkRunning(ctx, c.Job.ID, c.Lease, "")
		require.NoError(t, err)
	}
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET lease = lease + 1, agent_name = NULL WHERE job_id = $1`, got[1].Job.ID)
	require.NoError(t, err)
	end := func(c store.Claimed, o store.Outcome) store.End {
		return store.End{JobID: c.Job.ID, Lease: c.Lease, Actor: a, Outcome: o}
	}

	bad := []store.End{
		end(got[0], store.Outcome{Status: store.StatusSucceeded}),
		end(got[2], store.Outcome{Status: store.StatusSucceeded, Result: json.RawMessage(`{"not json`)}),
	}
	_, err = st.EndFinalBatch(ctx, a, bad)
	var de *store.DataError
	require.True(t, errors.As(err, &de), "a refused value is a DataError: %v", err)
	j, err := st.GetJob(ctx, got[0].Job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, j.Status, "a refused batch stores nothing")

	stored, err := st.EndFinalBatch(ctx, a, []store.End{
		end(got[0], store.Outcome{Status: store.StatusSucceeded, Result: json.RawMessage(`{"n":1}`), Message: "done"}),
		end(got[1], store.Outcome{Status: store.StatusSucceeded}),
		end(got[2], store.Outcome{Status: store.StatusFailed, Error: "boom", ErrorClass: "permanent"}),
	})
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, true}, stored)

	j, err = st.GetJob(ctx, got[0].Job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusSucceeded, j.Status)
	assert.JSONEq(t, `{"n":1}`, string(j.Result))
	assert.Empty(t, j.Agent, "the active row is gone")
	j, err = st.GetJob(ctx, got[2].Job.ID)
	require.NoError(t, err)
	assert.Equal(t, []any{store.StatusFailed, "boom", jobstate.Permanent}, []any{j.Status, j.Error, j.ErrorClass})
	j, err = st.GetJob(ctx, got[1].Job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, j.Status, "the superseded lease wrote nothing")

	evs, err := st.Events(ctx, got[0].Job.ID, 0, 0)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	assert.Equal(t, []any{"succeeded", "a", a.Generation, got[0].Lease, "done"}, []any{last.Kind, last.Agent, last.Generation, last.Lease, last.Message})
	evs, err = st.Events(ctx, got[2].Job.ID, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, "boom", evs[len(evs)-1].Message, "the error is the message when none is given")

	// A requeue after the batch starts above every lease handed out.
	var lastLease int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT last_lease FROM jobs WHERE id = $1`, got[0].Job.ID).Scan(&lastLease))
	assert.Equal(t, got[0].Lease+1, lastLease)

	_, err = st.EndFinalBatch(ctx, a, []store.End{{JobID: "x", Lease: 1, Actor: store.Holder{Name: "b"}, Outcome: store.Outcome{Status: store.StatusSucceeded}}})
	assert.ErrorContains(t, err, "not a holder's final end")
}
