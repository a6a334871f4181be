package store_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// No index of jobs may name its status column. A job's claim and running
// write change only status (among indexed values, indexed_status stays NULL),
// and PostgreSQL makes an update HOT only when no indexed column changed. An
// index added on status would silently triple the index writes of every job.
func TestNoIndexOfJobsNamesStatus(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.DB(t)
	rows, err := pool.Query(ctx, `SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'jobs'::regclass`)
	require.NoError(t, err)
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		defs[name] = def
	}
	require.NoError(t, rows.Err())
	require.Contains(t, defs, "jobs_indexed_status_id", "the status lookups' index")
	bare := regexp.MustCompile(`(^|[^_a-z])status\b`)
	for name, def := range defs {
		assert.False(t, bare.MatchString(def), "index %s names jobs.status: %s", name, def)
	}
}

// The claim and the running write of a job are HOT updates of its jobs row
// (no new index entries). The end, which sets indexed_status and expires_at,
// is not. Read from PostgreSQL's own counters.
func TestClaimAndRunningAreHOTUpdates(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.DB(t)
	st := store.New(pool)
	h := register(t, st, "hot")
	const n = 4 // few enough that every version fits on the jobs page (HOT needs the room)
	for i := 0; i < n; i++ {
		submit(t, st, "c")
	}
	claimed, err := st.Claim(ctx, h, n, []string{"c"})
	require.NoError(t, err)
	require.Len(t, claimed, n)
	rs := make([]store.Running, n)
	for i, c := range claimed {
		rs[i] = store.Running{JobID: c.Job.ID, Lease: c.Lease, Message: "m"}
	}
	statuses, err := st.MarkRunningBatch(ctx, rs)
	require.NoError(t, err)
	for _, s := range statuses {
		require.Equal(t, store.StatusRunning, s)
	}
	for _, c := range claimed {
		require.NoError(t, st.Finish(ctx, h, c.Job.ID, c.Lease, store.Outcome{Status: store.StatusSucceeded}))
	}

	// Other sessions' counters reach the statistics within about a second.
	var upd, hot int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_stat_clear_snapshot()::text`).Scan(new(string)))
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass`).Scan(&upd, &hot))
		if upd >= 3*n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.EqualValues(t, 3*n, upd, "claim, running and end: one update each per job")
	assert.EqualValues(t, 2*n, hot, "the claim and the running write are HOT, the end is not")
}

// The live statuses are listed through active_jobs, the others through jobs'
// own index. Each filter finds exactly its jobs, newest first, in pages.
func TestListJobsByEveryStatus(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	h := register(t, st, "lister")
	var ids []string
	for i := 0; i < 7; i++ {
		ids = append(ids, submit(t, st, "c").ID)
	}
	// Oldest first. ids[0..1] succeed, ids[2] fails, ids[3] runs, ids[4] is
	// accepted, ids[5] is canceling, ids[6] stays queued.
	claimed, err := st.Claim(ctx, h, 6, []string{"c"})
	require.NoError(t, err)
	require.Len(t, claimed, 6)
	lease := map[string]int64{}
	for _, c := range claimed {
		lease[c.Job.ID] = c.Lease
	}
	for _, id := range ids[:4] {
		_, err := st.MarkRunning(ctx, id, lease[id], "m")
		require.NoError(t, err)
	}
	require.NoError(t, st.Finish(ctx, h, ids[0], lease[ids[0]], store.Outcome{Status: store.StatusSucceeded}))
	require.NoError(t, st.Finish(ctx, h, ids[1], lease[ids[1]], store.Outcome{Status: store.StatusSucceeded}))
	require.NoError(t, st.Finish(ctx, h, ids[2], lease[ids[2]], store.Outcome{Status: store.StatusFailed, Error: "x"}))
	_, err = st.Cancel(ctx, ids[5], "stop")
	require.NoError(t, err)

	want := map[jobstate.JobStatus][]string{
		store.StatusSucceeded: {ids[1], ids[0]},
		store.StatusFailed:    {ids[2]},
		store.StatusRunning:   {ids[3]},
		store.StatusAccepted:  {ids[4]},
		store.StatusCanceling: {ids[5]},
		store.StatusQueued:    {ids[6]},
		store.StatusCanceled:  nil,
		"":                    {ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]},
	}
	for status, wantIDs := range want {
		var got []string
		after := ""
		for {
			page, next, err := st.ListJobs(ctx, store.ListParams{Status: status, Limit: 1, After: after})
			require.NoError(t, err, status)
			for _, j := range page {
				got = append(got, j.ID)
				if status != "" {
					assert.Equal(t, status, j.Status)
				}
			}
			if next == "" {
				break
			}
			after = next
		}
		assert.Equal(t, wantIDs, got, "status %q", status)
	}
	// The live list honours the other filters too.
	page, _, err := st.ListJobs(ctx, store.ListParams{Status: store.StatusQueued, Command: "other"})
	require.NoError(t, err)
	assert.Empty(t, page)
}
