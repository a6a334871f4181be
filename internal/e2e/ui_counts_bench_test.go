package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// BenchmarkJobCounts measures the console's counts query
// (queries/job_counts.sql, as GET /api/v1/jobs/counts runs it) with
// 200,000 jobs in the database, 20,000 of them queued: the median and max
// of 15 rounds with no filter, a command filter and a one-hour since
// window. It is measured, not asserted.
//
//	go test ./internal/e2e -run '^$' -bench JobCounts -benchtime 1x
func BenchmarkJobCounts(b *testing.B) {
	const jobs, queuedEvery, rounds = 200_000, 10, 15
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := newHarness(b, pgtest.URL(b), fast())
	_, err := h.pool.Exec(ctx, seedJobs, jobs)
	require.NoError(b, err, "seeding jobs")
	_, err = h.pool.Exec(ctx, `WITH q AS (
		UPDATE jobs SET status = 'queued', started_at = NULL, finished_at = NULL, error = NULL, error_class = NULL
		WHERE ('x' || substr(md5(id), 1, 8))::bit(32)::int % $1 = 0 RETURNING id, command, plugin)
		INSERT INTO active_jobs (job_id, command, plugin) SELECT id, command, plugin FROM q`, queuedEvery)
	require.NoError(b, err, "queueing some")
	// As autovacuum leaves a table at rest: the visibility map set.
	_, err = h.pool.Exec(ctx, `VACUUM ANALYZE jobs`)
	require.NoError(b, err)
	_, err = h.pool.Exec(ctx, `VACUUM ANALYZE active_jobs`)
	require.NoError(b, err)

	var since time.Time
	require.NoError(b, h.pool.QueryRow(ctx, `SELECT max(created_at) - interval '1 hour' FROM jobs`).Scan(&since))
	for _, v := range []struct {
		name string
		p    store.ListParams
	}{{"nofilter", store.ListParams{}}, {"command", store.ListParams{Command: "report"}}, {"since1h", store.ListParams{Since: since}}} {
		var took []time.Duration
		var total int
		for range rounds {
			start := time.Now()
			counts, err := h.st.CountJobs(ctx, v.p, 10000)
			took = append(took, time.Since(start))
			require.NoError(b, err)
			total = 0
			for _, c := range counts {
				total += c.Count
			}
		}
		slices.Sort(took)
		b.Logf("%s: counted %d (capped at 10,000 per part): median %s, max %s", v.name, total,
			took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
	}
}
