package dbhistory

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// TestPositionsAcrossAFailoverThatLosesHistory, against real servers. An
// asynchronous standby stopped while the primary commits, the primary
// stopped, the standby promoted. A pool whose AfterConnect is the
// tracker's sees the new timeline on its first new connection and holds
// that connection back until the change is settled. A standby refuses to
// say where it is, and Read says what to fix.
func TestPositionsAcrossAFailoverThatLosesHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, standby, url := pgtest.StartReplicated(t, false)

	_, err := Read(ctx, mustConnect(t, ctx, standby.URL("tether")))
	require.ErrorContains(t, err, "target_session_attrs=read-write", "a standby cannot say where it is")

	events := make(chan Event, 4)
	tr := NewTracker()
	tr.OnChange = func(e Event) { events <- e }
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pc.AfterConnect = tr.AfterConnect(true)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE t (n int)`)
	require.NoError(t, err)
	before, ok := tr.Known()
	require.True(t, ok, "the first connection set the baseline")

	require.NoError(t, standby.StopServer(ctx))
	for i := range 200 {
		_, err := pool.Exec(ctx, `INSERT INTO t VALUES ($1)`, i)
		require.NoError(t, err)
	}
	last, err := Read(ctx, pool)
	require.NoError(t, err)
	tr.Observe(last) // as a heartbeat would
	require.NoError(t, primary.StopServerImmediate(ctx))
	require.NoError(t, standby.StartServer(ctx))
	require.NoError(t, standby.Promote(ctx))
	pool.Reset()

	got := make(chan error, 1)
	go func() { _, err := pool.Exec(ctx, `SELECT 1`); got <- err }()
	var e Event
	select {
	case e = <-events:
	case err := <-got:
		t.Fatalf("a statement ran on the new primary before the change was seen: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the new primary's timeline was never seen")
	}
	t.Logf("before %s, last %s, new primary %s", before, last, e.Seen)
	assert.Equal(t, Failover, e.Change)
	assert.Equal(t, last, e.Known)
	assert.Greater(t, e.Seen.Timeline, last.Timeline)
	select {
	case err := <-got:
		t.Fatalf("the statement ran before the change was settled: %v", err)
	case <-time.After(200 * time.Millisecond): // held back: nothing to wait for but the settle
	}
	tr.Settle(e.Episode)
	require.NoError(t, <-got)
}

func mustConnect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
