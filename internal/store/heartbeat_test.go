package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
)

// TestHeartbeatWritesOneRow checks that, however many leases are held, a
// heartbeat rewrites the agents row only (no active_jobs row gets a new
// version). It still answers which leases are held and which the process did
// not list.
func TestHeartbeatWritesOneRow(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	for range 50 {
		submit(t, st, "c")
	}
	got, err := st.Claim(ctx, a, 50, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 50)
	var leases []store.Lease
	for _, c := range got[:48] { // two the process "does not know"
		leases = append(leases, store.Lease{JobID: c.Job.ID, Lease: c.Lease})
	}
	versions := func(table, key string) string {
		var v string
		require.NoError(t, st.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT string_agg(xmin::text, ',' ORDER BY %s) FROM %s`, key, table)).Scan(&v))
		return v
	}
	jobsBefore, agentBefore := versions("active_jobs", "job_id"), versions("agents", "name")

	res, err := st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	assert.True(t, res.Registered)
	assert.Len(t, res.Held, 48)
	for _, h := range res.Held {
		assert.Equal(t, store.StatusAccepted, h.Status)
	}
	want := []store.Lease{{JobID: got[48].Job.ID, Lease: got[48].Lease}, {JobID: got[49].Job.ID, Lease: got[49].Lease}}
	assert.ElementsMatch(t, want, res.Orphans)
	assert.Equal(t, jobsBefore, versions("active_jobs", "job_id"), "no lease row was rewritten")
	assert.NotEqual(t, agentBefore, versions("agents", "name"), "the agents row was renewed")

	// Detaching is fenced by holder and lease. A detached lease is neither
	// held nor an orphan any more.
	other := store.Holder{Name: "a", Generation: "other"}
	ok, err := st.Detach(ctx, other, want[0])
	require.NoError(t, err)
	assert.False(t, ok, "another generation cannot detach it")
	ok, err = st.Detach(ctx, a, store.Lease{JobID: want[0].JobID, Lease: want[0].Lease + 1})
	require.NoError(t, err)
	assert.False(t, ok, "another lease cannot be detached")
	ok, err = st.Detach(ctx, a, want[0])
	require.NoError(t, err)
	assert.True(t, ok)
	res, err = st.Heartbeat(ctx, a, append(leases, want[0]))
	require.NoError(t, err)
	assert.Len(t, res.Held, 48, "a detached lease listed by the process is lost")
	assert.Equal(t, want[1:], res.Orphans)

	// A claim covers the lease again (a new lease, not detached).
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL, lease = lease + 1 WHERE job_id = $1`, want[0].JobID)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE jobs SET status = 'queued' WHERE id = $1`, want[0].JobID)
	require.NoError(t, err)
	again, err := st.Claim(ctx, a, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, want[0].JobID, again[0].Job.ID)
	var detached bool
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT detached FROM active_jobs WHERE job_id = $1`, want[0].JobID).Scan(&detached))
	assert.False(t, detached)
}
