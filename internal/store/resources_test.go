package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
)

// remoteEvents are the job's remote events, in order.
func remoteEvents(t *testing.T, st *store.Store, id string) []store.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	var out []store.Event
	for _, e := range evs {
		if e.Kind == store.EventRemote {
			out = append(out, e)
		}
	}
	return out
}

func TestRemoteEventOnlyOnChangeAndUnderTheLease(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, b := register(t, st, "a"), register(t, st, "b")
	j := submit(t, st, "c")
	first := claimOne(t, st, a, j.ID)
	_, err := st.MarkRunning(ctx, j.ID, first.Lease, "")
	require.NoError(t, err)
	checkpoint := func(h store.Holder, lease int64, attempt int, handle string, rs ...store.Resource) error {
		return st.CheckpointDescribed(ctx, store.LogBatch{JobID: j.ID, Lease: lease}, 1<<20, []byte(handle),
			&store.Described{Holder: h, Attempt: attempt, Resources: rs})
	}
	task := store.Resource{Kind: "ecs_task", Name: "arn:aws:ecs:eu-west-1:1:task/c/t1", Label: "ECS task 0", Command: "aws ecs describe-tasks"}
	pod := store.Resource{Kind: "kubernetes_pod", Name: "ns/driver"}

	require.NoError(t, checkpoint(a, first.Lease, 1, "h0"))
	assert.Empty(t, remoteEvents(t, st, j.ID), "an empty description records nothing")

	require.NoError(t, checkpoint(a, first.Lease, 1, "h1", task))
	evs := remoteEvents(t, st, j.ID)
	require.Len(t, evs, 1)
	assert.Equal(t, `{"attempt":1,"resources":[{"kind":"ecs_task","name":"arn:aws:ecs:eu-west-1:1:task/c/t1","label":"ECS task 0","command":"aws ecs describe-tasks"}]}`,
		evs[0].Message, "empty fields are left out")
	assert.Equal(t, []any{"a", "a-gen", first.Lease}, []any{evs[0].Agent, evs[0].Generation, evs[0].Lease}, "the event names who wrote it")

	require.NoError(t, checkpoint(a, first.Lease, 1, "h2", task))
	assert.Len(t, remoteEvents(t, st, j.ID), 1, "an identical description is not recorded again")
	require.NoError(t, checkpoint(a, first.Lease, 1, "h3", task, pod))
	assert.Len(t, remoteEvents(t, st, j.ID), 2, "a changed description is")
	require.NoError(t, checkpoint(a, first.Lease, 1, "h4", task))
	assert.Len(t, remoteEvents(t, st, j.ID), 3, "compared with the newest one only")

	// b takes the job over. a's late checkpoint writes neither handle nor
	// event.
	require.NoError(t, st.Release(ctx, a, j.ID, first.Lease, "draining"))
	second := claimOne(t, st, b, j.ID)
	require.True(t, second.Resume)
	require.Equal(t, []byte("h4"), second.Handle)
	assert.ErrorIs(t, checkpoint(a, first.Lease, 1, "stale", pod), store.ErrLeaseLost)
	assert.Len(t, remoteEvents(t, st, j.ID), 3, "a superseded lease records no event")
	require.NoError(t, checkpoint(b, second.Lease, 1, "h5", task))
	assert.Len(t, remoteEvents(t, st, j.ID), 3, "the new holder re-describing the same tasks adds nothing")

	// Attempt 2 reports its own resources. Each attempt's newest are listed.
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: second.Lease, Actor: b,
		Outcome: store.Outcome{Status: store.StatusFailed, Error: "boom", ErrorClass: "permanent"}})
	require.NoError(t, err)
	_, _, err = st.Requeue(ctx, store.RequeueParams{JobID: j.ID, Reason: "again", By: "op"})
	require.NoError(t, err)
	third := claimOne(t, st, b, j.ID)
	_, err = st.MarkRunning(ctx, j.ID, third.Lease, "")
	require.NoError(t, err)
	task2 := store.Resource{Kind: "ecs_task", Name: "arn:aws:ecs:eu-west-1:1:task/c/t2", URL: "https://console.example/t2"}
	require.NoError(t, checkpoint(b, third.Lease, 2, "h6", task2))

	// Another job's events are not this job's resources.
	other, _, err := st.Submit(ctx, store.SubmitParams{Command: "other", Plugin: "noop"})
	require.NoError(t, err)
	oc, err := st.Claim(ctx, a, 1, []string{"other"})
	require.NoError(t, err)
	require.Len(t, oc, 1)
	require.NoError(t, st.CheckpointDescribed(ctx, store.LogBatch{JobID: other.ID, Lease: oc[0].Lease}, 0, []byte("x"),
		&store.Described{Holder: a, Attempt: 1, Resources: []store.Resource{pod}}))

	got, err := st.JobResources(ctx, j.ID)
	require.NoError(t, err)
	want := task
	want.Attempt = 1
	want2 := task2
	want2.Attempt = 2
	assert.Equal(t, []store.Resource{want, want2}, got, "the newest description of each attempt, oldest attempt first")

	none, err := st.JobResources(ctx, submit(t, st, "c").ID)
	require.NoError(t, err)
	assert.Nil(t, none)
}
