package migrate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store/migrate"
	"github.com/tetherjobs/tether/queries"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// emptyPool is a pool on a database without tether's schema.
func emptyPool(t *testing.T) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), pgtest.EmptyURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func allVersions(t *testing.T) []int {
	ms, err := queries.Migrations()
	require.NoError(t, err)
	var vs []int
	for _, m := range ms {
		vs = append(vs, m.Version)
	}
	require.NotEmpty(t, vs)
	return vs
}

func tableExists(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) bool {
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok))
	return ok
}

func TestFreshApplyThenNoop(t *testing.T) {
	ctx := ctxT(t)
	pool := emptyPool(t)
	want := allVersions(t)

	cur, pending, err := migrate.Status(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, cur)
	require.Equal(t, want, pending)
	require.False(t, tableExists(t, ctx, pool, "tether_schema_migrations"), "Status changes nothing")

	applied, err := migrate.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, want, applied)
	for _, table := range []string{"jobs", "active_jobs", "agents", "job_events", "job_logs", "tether_schema_migrations"} {
		require.True(t, tableExists(t, ctx, pool, table), "table %s", table)
	}

	cur, pending, err = migrate.Status(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, want[len(want)-1], cur)
	require.Empty(t, pending)

	applied, err = migrate.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Empty(t, applied, "second run applies nothing")

	require.Equal(t, len(want), recorded(ctx, t, pool))
}

// recorded counts the migrations the database records, in both tables.
func recorded(ctx context.Context, t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT (SELECT count(*) FROM tether_schema_migrations)
		+ (SELECT count(*) FROM tether_schema_compatible_migrations)`).Scan(&n))
	return n
}

func TestConcurrentMigrators(t *testing.T) {
	ctx := ctxT(t)
	url := pgtest.EmptyURL(t)
	want := allVersions(t)

	// Three agents starting at once, each with its own pool.
	const agents = 3
	results := make([][]int, agents)
	errs := make([]error, agents)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range agents {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		wg.Go(func() {
			<-start
			results[i], errs[i] = migrate.Migrate(ctx, pool, nil)
		})
	}
	close(start)
	wg.Wait()

	var appliedBy int
	for i := range agents {
		require.NoError(t, errs[i], "migrator %d", i)
		if len(results[i]) > 0 {
			appliedBy++
			require.Equal(t, want, results[i])
		}
	}
	require.Equal(t, 1, appliedBy, "exactly one migrator applies the schema: %v", results)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, len(want), recorded(ctx, t, conn))
}

// A database ahead of this binary only by compatible migrations (a newer
// agent's, during a rolling upgrade) is run on as it is; the compatible
// migrations are recorded apart, where an older agent does not read them.
func TestRunsOnNewerCompatibleMigrations(t *testing.T) {
	ctx := ctxT(t)
	pool := pgtest.DB(t)
	known, err := queries.Migrations()
	require.NoError(t, err)
	for _, m := range known {
		var table string
		require.NoError(t, pool.QueryRow(ctx, `SELECT CASE
			WHEN EXISTS (SELECT FROM tether_schema_migrations WHERE version = $1) THEN 'breaking'
			WHEN EXISTS (SELECT FROM tether_schema_compatible_migrations WHERE version = $1) THEN 'compatible' END`, m.Version).Scan(&table))
		assert.Equal(t, map[bool]string{true: "compatible", false: "breaking"}[m.Compatible], table, m.Name)
	}
	_, err = pool.Exec(ctx, "INSERT INTO tether_schema_compatible_migrations (version, name) VALUES ($1, 'from_the_future')", len(known)+1)
	require.NoError(t, err)

	applied, err := migrate.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	assert.Empty(t, applied)
	cur, pending, err := migrate.Status(ctx, pool)
	require.NoError(t, err)
	assert.Equal(t, len(known)+1, cur)
	assert.Empty(t, pending)
}

func TestRefusesNewerDatabase(t *testing.T) {
	ctx := ctxT(t)
	pool := pgtest.DB(t) // migrated from the template
	known := len(allVersions(t))
	_, err := pool.Exec(ctx, "INSERT INTO tether_schema_migrations (version, name) VALUES ($1, 'from_the_future')", known+1)
	require.NoError(t, err)

	_, err = migrate.Migrate(ctx, pool, nil)
	require.Error(t, err)
	require.True(t, migrate.IsTooNew(err))
	require.Contains(t, err.Error(), "upgrade tether")
	require.Contains(t, err.Error(), "version")

	cur, _, err := migrate.Status(ctx, pool)
	require.True(t, migrate.IsTooNew(err))
	require.Equal(t, known+1, cur)
}

func TestFailedMigrationRollsBack(t *testing.T) {
	ctx := ctxT(t)
	pool := emptyPool(t)
	// A table the first migration wants to create already exists. The
	// migration fails and leaves no version recorded.
	_, err := pool.Exec(ctx, "CREATE TABLE jobs (x int)")
	require.NoError(t, err)
	_, err = migrate.Migrate(ctx, pool, nil)
	require.ErrorContains(t, err, "applying migration 0001")
	require.False(t, tableExists(t, ctx, pool, "tether_schema_migrations"), "the whole run rolled back")
}
