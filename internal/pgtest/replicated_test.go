package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// within polls check every 20 ms until it returns nil, failing the test with
// its last error after d.
func within(t *testing.T, d time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		<-tick.C
	}
}

type serverID struct {
	port       int
	inRecovery bool
}

func whoAnswers(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (serverID, error) {
	var id serverID
	err := q.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&id.port, &id.inRecovery)
	return id, err
}

// The multi-host URL reaches the primary, nothing while no server takes
// writes, and the promoted standby after a failover. The standby has the
// migrated schema.
func TestStartReplicatedFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, standby, url := StartReplicated(t, false)

	var migrations int
	conn, err := pgx.Connect(ctx, standby.URL("tether"))
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM tether_schema_migrations").Scan(&migrations))
	require.NoError(t, conn.Close(ctx))
	require.Positive(t, migrations, "the standby has the migrated schema")

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	id, err := whoAnswers(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, serverID{port: primary.Port()}, id, "the URL reaches the primary")
	_, err = pool.Exec(ctx, "INSERT INTO agents (name, generation, capacity) VALUES ('a', 'g', 1)")
	require.NoError(t, err)

	// A failover that loses nothing. The standby has replayed all the
	// primary wrote before it stops.
	_, lsn, err := primary.CurrentWAL(ctx)
	require.NoError(t, err)
	require.NoError(t, standby.WaitReplayed(ctx, lsn))
	require.NoError(t, primary.StopServer(ctx))

	// read-write skips the hot standby: no server for the URL now.
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	_, err = pgx.Connect(short, url)
	cancelShort()
	require.Error(t, err, "with the primary down only a read-only standby is left")

	require.NoError(t, standby.Promote(ctx))
	// The pool's connections to the old primary are dead. A query retried on
	// new ones reaches the promoted standby.
	within(t, 10*time.Second, "the pool reaching the new primary", func(ctx context.Context) error {
		id, err := whoAnswers(ctx, pool)
		if err == nil && id != (serverID{port: standby.Port()}) {
			t.Fatalf("after promotion the URL reached %+v, want the promoted standby on port %d", id, standby.Port())
		}
		return err
	})
	_, err = pool.Exec(ctx, "INSERT INTO agents (name, generation, capacity) VALUES ('b', 'g', 1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM agents").Scan(&n))
	require.Equal(t, 2, n, "the row written before the failover and the one after")

	fresh, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer fresh.Close(ctx)
	id, err = whoAnswers(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, serverID{port: standby.Port()}, id, "a new connection reaches the new primary")
}

func TestStartReplicatedSync(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, standby, _ := StartReplicated(t, true)
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var state string
	require.NoError(t, conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&state))
	require.Equal(t, "sync", state)
	var hasSchema bool
	sconn, err := pgx.Connect(ctx, standby.URL("tether"))
	require.NoError(t, err)
	defer sconn.Close(ctx)
	require.NoError(t, sconn.QueryRow(ctx, "SELECT to_regclass('jobs') IS NOT NULL").Scan(&hasSchema))
	require.True(t, hasSchema)
}
