package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// startStandbyT starts a standby of p, stopped and removed when the test ends.
func startStandbyT(t *testing.T, p *Cluster, so StandbyOptions) *Cluster {
	t.Helper()
	s, err := p.StartStandby(testCtx(t), so)
	require.NoError(t, err, "starting a standby (needs pg_basebackup: `apt-get install -y postgresql`)")
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func connT(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func setting(t *testing.T, ctx context.Context, url, name string) string {
	t.Helper()
	var v string
	require.NoError(t, queryRow(ctx, url, "SELECT current_setting($1)", []any{name}, &v))
	return v
}

func TestReplicationSettings(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true, Replication: true})
	u := c.URL("postgres")
	for name, want := range map[string]string{
		"wal_level": "replica", "fsync": "off", "synchronous_commit": "on",
		"max_wal_senders": "10", "hot_standby": "on",
	} {
		require.Equal(t, want, setting(t, ctx, u, name), name)
	}
	require.Equal(t, 1, count(t, ctx, u, `SELECT count(*) FROM pg_hba_file_rules
		WHERE 'replication' = ANY(database) AND address = '127.0.0.1' AND auth_method = 'trust'`))
}

func TestEnsureReplicationHBA(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pg_hba.conf")
	require.NoError(t, os.WriteFile(p, []byte("host all all 127.0.0.1/32 trust\n"), 0o600))
	require.NoError(t, ensureReplicationHBA(dir))
	require.NoError(t, ensureReplicationHBA(dir))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(b), hbaReplication), "added once:\n%s", b)
}

func TestStandbyErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startT(t, Options{Fast: true})
	_, err := c.StartStandby(ctx, StandbyOptions{})
	require.ErrorContains(t, err, "Options.Replication")

	_, err = binaries{postgres: filepath.Join(t.TempDir(), "postgres")}.tool("pg_basebackup")
	require.ErrorContains(t, err, "pg_basebackup not found")
	require.ErrorContains(t, err, "apt-get install -y postgresql")

	require.ErrorContains(t, c.WaitStreaming(ctx), "not a standby")
}

func TestLSN(t *testing.T) {
	l, err := ParseLSN("16/B374D848")
	require.NoError(t, err)
	require.Equal(t, LSN(0x16_B374D848), l)
	require.Equal(t, "16/B374D848", l.String())
	a, _ := ParseLSN("0/9")
	b, _ := ParseLSN("0/10")
	require.Less(t, a, b, "compared as numbers, unlike the text")
	_, err = ParseLSN("16B374D848")
	require.Error(t, err)
}

func TestMultiHostURL(t *testing.T) {
	a, b := &Cluster{port: 5001}, &Cluster{port: 5002}
	require.Equal(t,
		"postgres://postgres@127.0.0.1:5001,127.0.0.1:5002/tether?sslmode=disable&target_session_attrs=read-write",
		MultiHostURL("tether", a, b))
}

// A synchronous standby has every commit the primary acknowledged, and
// without it the primary's commits wait.
func TestSynchronousStandby(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := startT(t, Options{Fast: true, Replication: true})
	exec1(t, ctx, p.URL("postgres"), "CREATE TABLE t (x int)")
	s := startStandbyT(t, p, StandbyOptions{Synchronous: true, Name: "sync_one"})
	require.Equal(t, `FIRST 1 ("sync_one")`, setting(t, ctx, p.URL("postgres"), "synchronous_standby_names"))
	require.Equal(t, "sync", syncState(t, ctx, p, "sync_one"))

	// Acknowledged means flushed on the standby. Right after the commit
	// returns, the standby has received WAL past the INSERT's.
	primary := connT(t, ctx, p.URL("postgres"))
	var insertLSN string
	require.NoError(t, primary.QueryRow(ctx, "INSERT INTO t VALUES (1) RETURNING pg_current_wal_insert_lsn()::text").Scan(&insertLSN))
	var received bool
	require.NoError(t, queryRow(ctx, s.URL("postgres"), "SELECT pg_last_wal_receive_lsn() >= $1::pg_lsn",
		[]any{insertLSN}, &received))
	require.True(t, received, "the standby had not flushed WAL to %s when the primary acknowledged the commit", insertLSN)
	waitFor(t, ctx, 10*time.Second, "row 1 never replayed on the standby", func(ctx context.Context) bool {
		var n int
		return queryRow(ctx, s.URL("postgres"), "SELECT count(*) FROM t WHERE x = 1", nil, &n) == nil && n == 1
	})
	// A hot standby reads but refuses writes.
	_, err := connT(t, ctx, s.URL("postgres")).Exec(ctx, "INSERT INTO t VALUES (99)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code, "read_only_sql_transaction: %v", err)

	// Standby down. The next commit waits for it (wait event SyncRep), and
	// nobody else sees its row meanwhile.
	require.NoError(t, s.StopServer(ctx))
	blockedCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	blocked := connT(t, ctx, p.URL("postgres"))
	done := make(chan error, 1)
	go func() {
		_, err := blocked.Exec(blockedCtx, "INSERT INTO t VALUES (2)")
		done <- err
	}()
	waitFor(t, ctx, 10*time.Second, "no backend waits for the stopped synchronous standby", func(ctx context.Context) bool {
		var n int
		return primary.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&n) == nil && n == 1
	})
	select {
	case err := <-done:
		t.Fatalf("a commit returned while the synchronous standby was stopped: %v", err)
	default:
	}
	require.Equal(t, 0, count(t, ctx, p.URL("postgres"), "SELECT count(*) FROM t WHERE x = 2"))
	giveUp()
	select {
	case err := <-done:
		require.Error(t, err)
		require.True(t, pgconn.Timeout(err) || errors.Is(err, context.Canceled), "giving up: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked commit did not return within 10 s of its context's end")
	}
	// pgx's cancel request ends the wait, and PostgreSQL then finishes the
	// commit locally ("The transaction has already committed locally, but
	// might not have been replicated to the standby", syncrep.c).
	waitFor(t, ctx, 10*time.Second, "the canceled commit never became visible on the primary", func(ctx context.Context) bool {
		var n int
		return primary.QueryRow(ctx, "SELECT count(*) FROM t WHERE x = 2").Scan(&n) == nil && n == 1
	})

	// Standby back. It catches up and is synchronous again.
	require.NoError(t, s.StartServer(ctx))
	require.NoError(t, s.WaitStreaming(ctx))
	commitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = primary.Exec(commitCtx, "INSERT INTO t VALUES (3)")
	require.NoError(t, err)

	// The primary crashes. The standby, promoted, has every row the
	// primary committed, including the one it had acknowledged last.
	require.NoError(t, p.StopServerImmediate(ctx))
	require.NoError(t, s.Promote(ctx))
	require.Equal(t, 3, count(t, ctx, s.URL("postgres"), "SELECT count(*) FROM t WHERE x IN (1, 2, 3)"))
	// It names no synchronous standby of its own, so its commits do not wait.
	require.Equal(t, "", setting(t, ctx, s.URL("postgres"), "synchronous_standby_names"))
	_, err = connT(t, ctx, s.URL("postgres")).Exec(commitCtx, "INSERT INTO t VALUES (4)")
	require.NoError(t, err)
}

func syncState(t *testing.T, ctx context.Context, p *Cluster, name string) string {
	t.Helper()
	var st string
	require.NoError(t, queryRow(ctx, p.URL("postgres"),
		"SELECT coalesce(string_agg(sync_state, ','), 'absent') FROM pg_stat_replication WHERE application_name = $1",
		[]any{name}, &st))
	return st
}

// An asynchronous standby that was stopped while the primary committed, then
// promoted after the primary died, has lost those commits. History is lost,
// and the new primary's timeline forks at the end of what it had.
func TestAsyncFailoverLosesHistory(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := startT(t, Options{Fast: true, Replication: true})
	exec1(t, ctx, p.URL("postgres"), "CREATE TABLE t (x int)")
	s := startStandbyT(t, p, StandbyOptions{})
	require.Equal(t, "async", syncState(t, ctx, p, "standby1"))
	// Row 0 reaches the standby by streaming, not in the base backup.
	exec1(t, ctx, p.URL("postgres"), "INSERT INTO t VALUES (0)")
	_, lsn, err := p.CurrentWAL(ctx)
	require.NoError(t, err)
	require.NoError(t, s.WaitReplayed(ctx, lsn))
	require.Equal(t, 1, count(t, ctx, s.URL("postgres"), "SELECT count(*) FROM t"))
	_, _, err = s.CurrentWAL(ctx)
	require.ErrorContains(t, err, "recovery", "CurrentWAL is for primaries")

	// The standby stops. The primary goes on committing, waiting for nobody.
	require.NoError(t, s.StopServer(ctx))
	primary := connT(t, ctx, p.URL("postgres"))
	const lost = 300
	start := time.Now()
	for i := 1; i <= lost; i++ {
		commitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := primary.Exec(commitCtx, fmt.Sprintf("INSERT INTO t VALUES (%d)", i))
		cancel()
		require.NoError(t, err, "commit %d with the asynchronous standby stopped", i)
	}
	t.Logf("%d commits with the standby stopped in %v", lost, time.Since(start))
	require.Equal(t, "absent", syncState(t, ctx, p, "standby1"))
	oldTL, oldLSN, err := p.CurrentWAL(ctx)
	require.NoError(t, err)
	require.NoError(t, p.StopServerImmediate(ctx))

	// The standby comes back with no primary to stream from, and is promoted.
	require.NoError(t, s.StartServer(ctx))
	var inRecovery bool
	require.NoError(t, queryRow(ctx, s.URL("postgres"), "SELECT pg_is_in_recovery()", nil, &inRecovery))
	require.True(t, inRecovery, "a restarted standby stays a standby until promoted")
	require.NoError(t, s.Promote(ctx))
	newTL, newLSN, err := s.CurrentWAL(ctx)
	require.NoError(t, err)
	var history string
	require.NoError(t, queryRow(ctx, s.URL("postgres"), "SELECT pg_read_file(format('pg_wal/%s.history', lpad(upper(to_hex($1::int)), 8, '0')))",
		[]any{int(newTL)}, &history))
	t.Logf("old primary: timeline %d, last LSN %s; new primary: timeline %d, LSN %s; %08X.history: %q",
		oldTL, oldLSN, newTL, newLSN, newTL, history)

	require.Equal(t, 1, count(t, ctx, s.URL("postgres"), "SELECT count(*) FROM t WHERE x = 0"), "what the standby had")
	require.Equal(t, 0, count(t, ctx, s.URL("postgres"), "SELECT count(*) FROM t WHERE x > 0"),
		"the commits made while the standby was stopped are lost")
	require.Equal(t, oldTL+1, newTL, "promotion starts the next timeline")
	// The history file records where timeline 1 ended for the new primary.
	// Before the lost commits, and the new primary's WAL goes on from there,
	// so its LSN is behind the old primary's last one.
	fields := strings.Fields(history)
	require.GreaterOrEqual(t, len(fields), 2, "history file %q", history)
	forkLSN, err := ParseLSN(fields[1])
	require.NoError(t, err)
	require.Less(t, forkLSN, oldLSN, "the fork point is before the old primary's last WAL")
	require.LessOrEqual(t, forkLSN, newLSN)
	require.Less(t, newLSN, oldLSN, "the new primary's LSN is behind the old primary's last")

	// The new primary takes writes. Positions the old primary used for
	// other rows now hold these.
	_, err = connT(t, ctx, s.URL("postgres")).Exec(ctx, "INSERT INTO t VALUES (-1)")
	require.NoError(t, err)
}
