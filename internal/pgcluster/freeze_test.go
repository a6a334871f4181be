package pgcluster

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// serverStates returns the /proc state of the postmaster and each process
// below it.
func serverStates(t *testing.T, c *Cluster) map[int]byte {
	t.Helper()
	c.mu.Lock()
	root := c.srv.pid
	c.mu.Unlock()
	kids, err := descendants(root)
	require.NoError(t, err)
	states := map[int]byte{}
	for _, pid := range append([]int{root}, kids...) {
		if st, err := readStat(pid); err == nil {
			states[pid] = st.state
		}
	}
	return states
}

// waitFor polls check every 20 ms until it holds, failing the test with msg
// after within.
func waitFor(t *testing.T, ctx context.Context, within time.Duration, msg string, check func(context.Context) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	err := poll(ctx, 20*time.Millisecond, func(ctx context.Context) (bool, error) { return check(ctx), nil })
	require.NoError(t, err, msg)
}

func TestFreezeThaw(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true})
	url := c.URL("postgres")
	exec1(t, ctx, url, "CREATE TABLE t (x int)")

	// The client whose INSERT is in flight when the server hangs. pgx
	// answers its context timeout by closing the connection after a cancel
	// request on a second connection, which would race the thawed backend
	// (see Freeze). Refusing that second dial leaves only what this test is
	// about: a statement in the server's socket buffer.
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	var dials atomic.Int32
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) > 1 {
			return nil, errors.New("test: no cancel requests")
		}
		return dial(ctx, network, addr)
	}
	inflight, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = inflight.Close(context.Background()) })
	established, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = established.Close(context.Background()) })

	require.NoError(t, c.Freeze(ctx))
	t.Cleanup(func() { _ = c.Thaw(context.Background()) }) // if an assertion fails while frozen
	states := serverStates(t, c)
	require.GreaterOrEqual(t, len(states), 5, "postmaster, checkpointer, walwriter, ... and two backends: %v", states)
	for pid, st := range states {
		require.Truef(t, isStopped(st), "pid %d is in state %c after Freeze", pid, st)
	}
	require.NoError(t, c.Freeze(ctx), "freezing a frozen server is a no-op")

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = inflight.Exec(short, "INSERT INTO t VALUES (1)")
	cancel()
	require.Error(t, err)
	require.True(t, pgconn.Timeout(err), "the hung server does not answer, the client gives up: %v", err)

	// The kernel completes a TCP handshake into the backlog. PostgreSQL's
	// own handshake waits for the thaw.
	raw, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())), 5*time.Second)
	require.NoError(t, err, "TCP connect to a frozen server")
	_ = raw.Close()
	connected := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		connected <- err
	}()
	// A bounded look, not a synchronisation. The attempt must not finish
	// while frozen.
	select {
	case err := <-connected:
		t.Fatalf("a connection attempt completed on a frozen server (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}

	require.NoError(t, c.Thaw(ctx))
	select {
	case err := <-connected:
		require.NoError(t, err, "the connection attempt made during the freeze")
	case <-time.After(10 * time.Second):
		t.Fatal("the connection attempt made during the freeze did not complete within 10 s of Thaw")
	}
	for pid, st := range serverStates(t, c) {
		require.Falsef(t, st == 'T' || st == 't', "pid %d still stopped after Thaw", pid)
	}
	// The INSERT its client gave up on was in the backend's socket. It
	// commits once the backend runs again.
	waitFor(t, ctx, 10*time.Second, "the in-flight INSERT never committed after Thaw", func(ctx context.Context) bool {
		var n int
		return established.QueryRow(ctx, "SELECT count(*) FROM t WHERE x = 1").Scan(&n) == nil && n == 1
	})
	// Healthy. The connection that sat idle through the freeze writes, and
	// new ones are served.
	_, err = established.Exec(ctx, "INSERT INTO t VALUES (2)")
	require.NoError(t, err)
	require.Equal(t, 2, count(t, ctx, url, "SELECT count(*) FROM t"))
	require.NoError(t, c.Thaw(ctx), "thawing a server that is not frozen is a no-op")
}

// Stop works on a frozen server, without waiting for the kill timeout.
func TestStopFrozen(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true})
	require.NoError(t, c.Freeze(ctx))
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, c.StopServer(stopCtx))
	require.False(t, c.Running())
	require.NoError(t, c.StartServer(ctx))
	require.Equal(t, 1, count(t, ctx, c.URL("postgres"), "SELECT 1"))
}

func TestFreezeNotRunning(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true})
	require.NoError(t, c.StopServer(ctx))
	require.ErrorContains(t, c.Freeze(ctx), "not running")
}
