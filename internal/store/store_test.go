package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(pgtest.DB(t))
}

func submit(t *testing.T, st *store.Store, command string) store.Job {
	t.Helper()
	j, created, err := st.Submit(context.Background(), store.SubmitParams{Command: command, Plugin: "noop", Context: json.RawMessage(`{"a":1}`)})
	require.NoError(t, err)
	require.True(t, created)
	return j
}

func register(t *testing.T, st *store.Store, name string) store.Holder {
	t.Helper()
	h := store.Holder{Name: name, Generation: name + "-gen"}
	_, err := st.RegisterAgent(context.Background(), store.Registration{Holder: h, Capacity: 10, Commands: []string{"c"}})
	require.NoError(t, err)
	return h
}

func kinds(t *testing.T, st *store.Store, id string) []string {
	t.Helper()
	evs, err := st.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func TestSubmitIdempotency(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	p := store.SubmitParams{Command: "c", Plugin: "noop", Context: json.RawMessage(`{"x":1,"y":2}`), IdempotencyKey: "k1"}
	first, created, err := st.Submit(ctx, p)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, store.StatusQueued, first.Status)

	// Same body, keys in another order, gives the same job.
	p.Context = json.RawMessage(`{"y":2,"x":1}`)
	again, created, err := st.Submit(ctx, p)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, first.ID, again.ID)

	p.Context = json.RawMessage(`{"x":2}`)
	_, _, err = st.Submit(ctx, p)
	assert.ErrorIs(t, err, store.ErrIdempotencyConflict)
}

func TestClaimFencesAndFinishes(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j := submit(t, st, "c")

	got, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	c := got[0]
	assert.Equal(t, j.ID, c.Job.ID)
	assert.Equal(t, int64(1), c.Lease)
	assert.False(t, c.Resume)
	assert.Equal(t, store.StatusAccepted, c.Job.Status)

	// Nothing else to claim, and other commands are not ours.
	more, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	assert.Empty(t, more)

	status, err := st.MarkRunning(ctx, j.ID, c.Lease, "go")
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, status)

	// A stale lease writes nothing.
	_, err = st.MarkRunning(ctx, j.ID, c.Lease-1, "old")
	assert.ErrorIs(t, err, store.ErrLeaseLost)
	assert.ErrorIs(t, st.Checkpoint(ctx, j.ID, c.Lease+1, []byte("h")), store.ErrLeaseLost)
	assert.ErrorIs(t, st.Finish(ctx, a, j.ID, c.Lease+1, store.Outcome{Status: store.StatusSucceeded}), store.ErrLeaseLost)

	require.NoError(t, st.Checkpoint(ctx, j.ID, c.Lease, []byte("handle-1")))
	require.NoError(t, st.Finish(ctx, a, j.ID, c.Lease, store.Outcome{Status: store.StatusSucceeded, Result: json.RawMessage(`{"ok":true}`)}))
	// Exactly once. The second final write finds no lease.
	assert.ErrorIs(t, st.Finish(ctx, a, j.ID, c.Lease, store.Outcome{Status: store.StatusFailed, Error: "late"}), store.ErrLeaseLost)

	done, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusSucceeded, done.Status)
	assert.JSONEq(t, `{"ok":true}`, string(done.Result))
	assert.NotNil(t, done.FinishedAt)
	assert.Empty(t, done.Agent)
	assert.Equal(t, []string{"submitted", "claimed", "running", "succeeded"}, kinds(t, st, j.ID))
}

func TestClaimUnderContentionTakesEachJobOnce(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	const jobs, agents = 300, 4
	for i := 0; i < jobs; i++ {
		submit(t, st, "c")
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for i := 0; i < agents; i++ {
		h := register(t, st, fmt.Sprintf("agent-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := st.Claim(ctx, h, 7, []string{"c"})
				if !assert.NoError(t, err) || len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					if prev, dup := seen[c.Job.ID]; dup {
						t.Errorf("job %s claimed by %s and %s", c.Job.ID, prev, h.Name)
					}
					seen[c.Job.ID] = h.Name
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Len(t, seen, jobs)
}

func TestHeartbeatReportsLostLeasesAndCancel(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j1, j2 := submit(t, st, "c"), submit(t, st, "c")
	got, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	leases := []store.Lease{{JobID: got[0].Job.ID, Lease: got[0].Lease}, {JobID: got[1].Job.ID, Lease: got[1].Lease}}

	res, err := st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	assert.True(t, res.Registered)
	assert.Len(t, res.Held, 2)

	// Someone bumps j1's lease (as the janitor does). j2 gets a cancel
	// request.
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET lease = lease + 1, agent_name = NULL WHERE job_id = $1`, j1.ID)
	require.NoError(t, err)
	_, err = st.Cancel(ctx, j2.ID, "")
	require.NoError(t, err)

	res, err = st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	require.Len(t, res.Held, 1)
	assert.Equal(t, j2.ID, res.Held[0].JobID)
	assert.Equal(t, store.StatusCanceling, res.Held[0].Status)

	// Another process registering under the name supersedes this one.
	_, err = st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "a", Generation: "new"}, Capacity: 1})
	require.NoError(t, err)
	res, err = st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	assert.False(t, res.Registered)
	assert.Empty(t, res.Held)
}

func TestCancel(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")

	queued := submit(t, st, "c")
	j, err := st.Cancel(ctx, queued.ID, "")
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceled, j.Status)
	// A canceled queued job can no longer be claimed.
	got, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = st.Cancel(ctx, queued.ID, "")
	var te *store.TransitionError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, store.StatusCanceled, te.Status)

	_, err = st.Cancel(ctx, "no-such-job", "")
	assert.ErrorIs(t, err, store.ErrNotFound)

	running := submit(t, st, "c")
	got, err = st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	j, err = st.Cancel(ctx, running.ID, "stop it")
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceling, j.Status)
	// A cancel that arrived before the plugin was called stops MarkRunning.
	status, err := st.MarkRunning(ctx, running.ID, got[0].Lease, "")
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceling, status)
}

func TestAppendLogsFencedAndCapped(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j1, j2 := submit(t, st, "c"), submit(t, st, "c")
	got, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	lease := map[string]int64{got[0].Job.ID: got[0].Lease, got[1].Job.ID: got[1].Lease}

	held, err := st.AppendLogs(ctx, []store.LogBatch{
		{JobID: j1.ID, Lease: lease[j1.ID], Stdout: []byte("hello "), Stderr: []byte("warn\n")},
		{JobID: j2.ID, Lease: lease[j2.ID] + 5, Stdout: []byte("from a fenced-out writer")},
	}, 10)
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{j1.ID: true}, held)

	_, err = st.AppendLogs(ctx, []store.LogBatch{{JobID: j1.ID, Lease: lease[j1.ID], Stdout: []byte("world, and more")}}, 10)
	require.NoError(t, err)
	_, err = st.AppendLogs(ctx, []store.LogBatch{{JobID: j1.ID, Lease: lease[j1.ID], Stdout: []byte("dropped")}}, 10)
	require.NoError(t, err)

	out := readStream(t, st, j1.ID, "stdout")
	assert.True(t, strings.HasPrefix(out, "hello worl\n[tether: stdout truncated at 10 bytes"), out)
	assert.Equal(t, 1, strings.Count(out, "truncated"))
	assert.NotContains(t, out, "dropped")
	assert.Equal(t, "warn\n", readStream(t, st, j1.ID, "stderr"))
	assert.Empty(t, readStream(t, st, j2.ID, ""))
}

func readStream(t *testing.T, st *store.Store, id, stream string) string {
	t.Helper()
	chunks, err := st.Logs(context.Background(), id, stream, 0, 0)
	require.NoError(t, err)
	var b strings.Builder
	for _, c := range chunks {
		b.Write(c.Data)
	}
	return b.String()
}

func TestGetAndListJobs(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, submit(t, st, "c").ID)
	}
	submit(t, st, "other")
	_, err := st.GetJob(ctx, "missing")
	assert.True(t, errors.Is(err, store.ErrNotFound))

	page1, next, err := st.ListJobs(ctx, store.ListParams{Command: "c", Limit: 3})
	require.NoError(t, err)
	require.Len(t, page1, 3)
	assert.Equal(t, ids[4], page1[0].ID, "newest first")
	page2, next2, err := st.ListJobs(ctx, store.ListParams{Command: "c", Limit: 3, After: next})
	require.NoError(t, err)
	assert.Len(t, page2, 2)
	assert.Empty(t, next2)
	assert.Equal(t, ids[0], page2[1].ID)
}

func TestReleaseKeepsRunningAndFencesTheOldHolder(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, b := register(t, st, "a"), register(t, st, "b")
	j := submit(t, st, "c")
	got, err := st.Claim(ctx, a, 1, []string{"c"})
	require.NoError(t, err)
	_, err = st.MarkRunning(ctx, j.ID, got[0].Lease, "")
	require.NoError(t, err)
	require.NoError(t, st.Checkpoint(ctx, j.ID, got[0].Lease, []byte("h1")))

	require.NoError(t, st.Release(ctx, a, j.ID, got[0].Lease, "handoff: test"))
	assert.ErrorIs(t, st.Release(ctx, a, j.ID, got[0].Lease, "again"), store.ErrLeaseLost)
	assert.ErrorIs(t, st.Finish(ctx, a, j.ID, got[0].Lease, store.Outcome{Status: store.StatusSucceeded}), store.ErrLeaseLost)

	again, err := st.Claim(ctx, b, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, again, 1)
	assert.True(t, again[0].Resume, "a released running job is resumed, not started again")
	assert.Equal(t, []byte("h1"), again[0].Handle)
	assert.Equal(t, got[0].Lease+2, again[0].Lease)
	assert.Equal(t, []string{"submitted", "claimed", "running", "released", "claimed"}, kinds(t, st, j.ID))
}

func TestClaimSkipsUnownedCancelingJobs(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	j := submit(t, st, "c")
	got, err := st.Claim(ctx, a, 1, []string{"c"})
	require.NoError(t, err)
	_, err = st.MarkRunning(ctx, j.ID, got[0].Lease, "")
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, a, j.ID, got[0].Lease, "test"))
	_, err = st.Cancel(ctx, j.ID, "")
	require.NoError(t, err)

	again, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	assert.Empty(t, again, "an unowned canceling job is the janitor's, not a claim's")
	after, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceling, after.Status)
	assert.Empty(t, after.Agent)
}
