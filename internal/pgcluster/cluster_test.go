package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func startT(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c, err := Start(testCtx(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func exec1(t *testing.T, ctx context.Context, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

func count(t *testing.T, ctx context.Context, url, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}

// A directory the postgres user can reach even when tests run as root
// (t.TempDir is 0700 under a 0700 parent).
func reachableDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func TestStartConnectStop(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true})
	require.True(t, c.Running())
	require.NotZero(t, c.Port())
	require.Equal(t, 1, count(t, ctx, c.URL("postgres"), "SELECT 1"))
	require.Equal(t, 300, count(t, ctx, c.URL("postgres"), "SELECT current_setting('max_connections')::int"))
	require.Equal(t, 0, count(t, ctx, c.URL("postgres"), "SELECT (current_setting('fsync') = 'on')::int"))
	// Without Options.Replication, Fast keeps no WAL for standbys and does not wait for a flush.
	require.Equal(t, 1, count(t, ctx, c.URL("postgres"),
		"SELECT (current_setting('wal_level') = 'minimal' AND current_setting('synchronous_commit') = 'off')::int"))
	// The only TCP listener is loopback.
	require.Equal(t, 1, count(t, ctx, c.URL("postgres"), "SELECT (current_setting('listen_addresses') = '127.0.0.1')::int"))

	dir := c.DataDir()
	require.FileExists(t, filepath.Join(dir, "PG_VERSION"))
	require.NoError(t, c.Stop(ctx))
	require.False(t, c.Running())
	_, err := os.Stat(dir)
	require.True(t, errors.Is(err, os.ErrNotExist), "data directory should be removed, stat: %v", err)
	_, err = pgx.Connect(ctx, c.URL("postgres"))
	require.Error(t, err, "server should be down")
}

func TestStopStartServerKeepsDataAndPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true})
	url, port := c.URL("postgres"), c.Port()
	exec1(t, ctx, url, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1), (2)")

	require.NoError(t, c.StopServer(ctx))
	_, err := pgx.Connect(ctx, url)
	require.Error(t, err, "server should be down during the outage")
	require.DirExists(t, c.DataDir())

	require.NoError(t, c.StartServer(ctx))
	require.Equal(t, port, c.Port())
	require.Equal(t, 2, count(t, ctx, url, "SELECT count(*) FROM kept"))

	require.NoError(t, c.Restart(ctx))
	require.Equal(t, 2, count(t, ctx, url, "SELECT count(*) FROM kept"))

	// A crash-like stop recovers on the next start.
	require.NoError(t, c.StopServerImmediate(ctx))
	require.NoError(t, c.StartServer(ctx))
	require.Equal(t, port, c.Port())
	require.Equal(t, 1, count(t, ctx, url, "SELECT 1"))
}

func TestPersistentReuse(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := filepath.Join(reachableDir(t), "project", ".tether", "pgdata")

	c := startT(t, Options{DataDir: dir, Persistent: true})
	require.Equal(t, 1, count(t, ctx, c.URL("postgres"), "SELECT (current_setting('fsync') = 'on')::int"),
		"a persistent cluster keeps fsync on")
	exec1(t, ctx, c.URL("postgres"), "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")

	// A second Start on the same directory while the server runs (a
	// `tether dev` left running) adopts it.
	adopted, err := Start(ctx, Options{DataDir: dir, Persistent: true})
	require.NoError(t, err)
	require.Equal(t, c.Port(), adopted.Port())
	require.Equal(t, 42, count(t, ctx, adopted.URL("postgres"), "SELECT x FROM kept"))
	require.NoError(t, adopted.Stop(ctx))
	require.NoError(t, c.Stop(ctx))
	require.FileExists(t, filepath.Join(dir, "PG_VERSION"), "persistent data survives Stop")

	// Started again from the stopped directory: same data.
	again := startT(t, Options{DataDir: dir, Persistent: true})
	require.Equal(t, 42, count(t, ctx, again.URL("postgres"), "SELECT x FROM kept"))
	require.NoError(t, again.Stop(ctx))
	require.FileExists(t, filepath.Join(dir, "PG_VERSION"))
}

func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	_, err := Start(ctx, Options{BinDir: t.TempDir()})
	require.ErrorIs(t, err, ErrNotInstalled)
	require.Contains(t, err.Error(), "apt-get install -y postgresql")
	require.Contains(t, err.Error(), "DATABASE_URL")

	_, err = Start(ctx, Options{Persistent: true})
	require.ErrorContains(t, err, "needs a DataDir")

	full := reachableDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(full, "precious"), []byte("x"), 0o644))
	_, err = Start(ctx, Options{DataDir: full})
	require.ErrorContains(t, err, "non-empty")
	require.FileExists(t, filepath.Join(full, "precious"), "a refused directory is left alone")
}

// As root the server runs as the postgres user, which cannot enter a
// private (0700) root-owned directory. Start says so instead of failing
// obscurely in initdb.
func TestUnreachableDataDir(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	private := t.TempDir() // 0700
	require.NoError(t, os.Chmod(private, 0o700))
	dir := filepath.Join(private, "pgdata")
	c, err := Start(ctx, Options{DataDir: dir, Persistent: true, Fast: true})
	if os.Geteuid() == 0 {
		require.Error(t, err)
		require.Contains(t, err.Error(), "postgres user")
		require.Contains(t, err.Error(), "chmod o+x")
		return
	}
	// Not root. The server runs as us and the directory is fine.
	require.NoError(t, err)
	require.NoError(t, c.Stop(ctx))
}

func TestSweepStale(t *testing.T) {
	base, err := os.MkdirTemp("", tmpPrefix+"sweeptest-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	lock, err := lockTmpBase(base)
	require.NoError(t, err)

	require.Error(t, sweepOne(base), "a held lock means the owner is alive")
	require.DirExists(t, base)

	require.NoError(t, lock.Close()) // owner died
	require.NoError(t, sweepOne(base))
	_, err = os.Stat(base)
	require.True(t, errors.Is(err, os.ErrNotExist))
}

func TestLogTail(t *testing.T) {
	l := newLogTail(nil)
	l.logger = discard()
	for i := 0; i < tailLines+5; i++ {
		_, _ = l.Write([]byte("line\n"))
	}
	_, _ = l.Write([]byte("FATAL: could not "))
	_, _ = l.Write([]byte("bind\npartial"))
	s := l.String()
	require.Contains(t, s, "FATAL: could not bind\npartial")
	require.Equal(t, tailLines+1, strings.Count(s, "\n")+1)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestLibraryInstalled(t *testing.T) {
	// The Debian server package ships pg_stat_statements (the bench loads
	// it). No installation has a library of this name.
	require.True(t, LibraryInstalled("", "pg_stat_statements"), "pg_stat_statements.so next to the server: install the PostgreSQL server package (contrib is part of it)")
	require.False(t, LibraryInstalled("", "tether_no_such_library"))
}
