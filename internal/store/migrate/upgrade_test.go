package migrate_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/internal/store/migrate"
	"github.com/tetherjobs/tether/queries"
)

// A database at schema v11 with a finished job and one still running is
// upgraded to the current schema. The timelines read the same (event rows
// from before v13 stay rows, nothing is shown twice). The running job can
// still be ended by its holder, and the status lists find both.
func TestUpgradeFromV11KeepsTimelinesAndLeases(t *testing.T) {
	ctx := ctxT(t)
	pool := emptyPool(t)
	ms, err := queries.Migrations()
	require.NoError(t, err)
	_, err = pool.Exec(ctx, queries.Get("migrate_create_table"))
	require.NoError(t, err)
	for _, m := range ms[:11] {
		_, err := pool.Exec(ctx, m.SQL)
		require.NoError(t, err, m.Name)
		_, err = pool.Exec(ctx, queries.Get("migrate_record"), m.Version, m.Name)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `
		INSERT INTO jobs (id, command, plugin, status, started_at, finished_at) VALUES
		    ('done', 'c', 'noop', 'succeeded', now(), now()),
		    ('live', 'c', 'noop', 'running', now(), NULL);
		INSERT INTO active_jobs (job_id, command, agent_name, agent_generation, lease, claimed_at, last_heartbeat)
		    VALUES ('live', 'c', 'a', 'g', 1, now(), now());
		INSERT INTO job_events (job_id, kind, agent, generation, lease, message) VALUES
		    ('done', 'submitted', NULL, NULL, NULL, ''),
		    ('live', 'submitted', NULL, NULL, NULL, ''),
		    ('done', 'claimed', 'a', 'g', 1, 'attempt 1'),
		    ('live', 'claimed', 'a', 'g', 1, 'attempt 1'),
		    ('done', 'running', 'a', 'g', 1, 'attempt 1 on a'),
		    ('live', 'running', 'a', 'g', 1, 'attempt 1 on a'),
		    ('done', 'succeeded', 'a', 'g', 1, '');
		INSERT INTO job_logs (job_id, stream, data, attempt) VALUES ('done', 'stdout', 'hi', 1);`)
	require.NoError(t, err)

	st := store.New(pool)
	before := map[string][]store.Event{}
	for _, id := range []string{"done", "live"} {
		rows, err := pool.Query(ctx, `SELECT id, job_id, at, kind, coalesce(agent, ''), coalesce(generation, ''), coalesce(lease, 0), message FROM job_events WHERE job_id = $1 ORDER BY id`, id)
		require.NoError(t, err)
		for rows.Next() {
			var e store.Event
			require.NoError(t, rows.Scan(&e.ID, &e.JobID, &e.At, &e.Kind, &e.Agent, &e.Generation, &e.Lease, &e.Message))
			before[id] = append(before[id], e)
		}
		require.NoError(t, rows.Err())
	}

	applied, err := migrate.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, allVersions(t)[11:], applied)

	for id, want := range before {
		got, err := st.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		assert.Equal(t, want, got, "timeline of %s after the upgrade", id)
	}
	live, err := st.GetJob(ctx, "live")
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, live.Status)
	list, _, err := st.ListJobs(ctx, store.ListParams{Status: store.StatusRunning})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "live", list[0].ID)
	list, _, err = st.ListJobs(ctx, store.ListParams{Status: store.StatusSucceeded})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "done", list[0].ID)

	// The holder of the running job ends it under its lease.
	require.NoError(t, st.Finish(ctx, store.Holder{Name: "a", Generation: "g"}, "live", 1, store.Outcome{Status: store.StatusSucceeded}))
	got, err := st.Events(ctx, "live", 0, 0)
	require.NoError(t, err)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []string{"submitted", "claimed", "running", "succeeded"}, kinds)
	var logs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_logs WHERE job_id = 'done'`).Scan(&logs))
	assert.Equal(t, 1, logs, "log chunks kept across the new key")
}
