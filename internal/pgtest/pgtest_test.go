package pgtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func currentDB(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) string {
	var name string
	require.NoError(t, q.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	return name
}

func TestEachTestGetsItsOwnMigratedDatabase(t *testing.T) {
	ctx := context.Background()
	a, b := DB(t), DB(t)
	require.NotEqual(t, currentDB(t, a), currentDB(t, b))

	// Migrated. The schema is there.
	var n int
	require.NoError(t, a.QueryRow(ctx, "SELECT count(*) FROM tether_schema_migrations").Scan(&n))
	require.Positive(t, n)
	require.NoError(t, a.QueryRow(ctx, "SELECT count(*) FROM jobs").Scan(&n))
	require.Zero(t, n)

	// Isolated. A table made in one is absent in the other.
	_, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int)")
	require.NoError(t, err)
	var exists bool
	require.NoError(t, b.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&exists))
	require.False(t, exists)
	require.NoError(t, a.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&exists))
	require.True(t, exists)
}

func TestDatabaseDroppedAtCleanup(t *testing.T) {
	ctx := context.Background()
	var name string
	t.Run("inner", func(t *testing.T) {
		name = currentDB(t, DB(t))
	})
	var exists bool
	require.NoError(t, shared.admin.QueryRow(ctx,
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "database %s should be dropped after its test", name)
}

func TestEmptyURLHasNoSchema(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, EmptyURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass('jobs') IS NOT NULL").Scan(&exists))
	require.False(t, exists)
}

func TestParallelDatabases(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := 0; i < 8; i++ {
		t.Run("db", func(t *testing.T) {
			t.Parallel()
			name := currentDB(t, DB(t))
			mu.Lock()
			defer mu.Unlock()
			require.False(t, seen[name], "database %s handed out twice", name)
			seen[name] = true
		})
	}
}

func TestSharedClusterExposed(t *testing.T) {
	c := Cluster(t)
	// Without DATABASE_URL the helper runs its own cluster and says so.
	if c == nil {
		require.NotEmpty(t, shared.baseURL)
		return
	}
	require.True(t, c.Running())
	require.Contains(t, URL(t), fmt.Sprintf("127.0.0.1:%d/", c.Port()))
}

func TestStartClusterSurvivesOutage(t *testing.T) {
	ctx := context.Background()
	c, url := StartCluster(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO agents (name, generation, capacity) VALUES ('a', 'g', 1)")
	require.NoError(t, err)
	conn.Close(ctx)

	require.NoError(t, c.StopServer(ctx))
	require.NoError(t, c.StartServer(ctx))
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM agents").Scan(&n))
	require.Equal(t, 1, n)
}

// BenchmarkURL measures the per-test cost of a database: CREATE DATABASE
// from the template (the drops run at the end, outside the timing).
func BenchmarkURL(b *testing.B) {
	URL(b) // start the cluster and build the template outside the loop
	for b.Loop() {
		URL(b)
	}
}
