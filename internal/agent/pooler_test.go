package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
)

func TestJudgeSession(t *testing.T) {
	str := func(s string) *string { return &s }
	port := func(p int32) *int32 { return &p }
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	for _, tc := range []struct {
		name     string
		s        session
		fatal    string // substring of the error; "" means none
		wantNote bool
	}{
		{"direct TCP", session{held: true, backendPID: 7, keyPID: 7, clientAddr: str("127.0.0.1"), clientPort: port(40000), local: local}, "", false},
		{"direct TCP, IPv6", session{held: true, backendPID: 7, keyPID: 7, clientAddr: str("::1"), clientPort: port(40000), local: &net.TCPAddr{IP: net.IPv6loopback, Port: 40000}}, "", false},
		{"Unix socket: only pg_locks and the pid apply", session{held: true, backendPID: 7, keyPID: 7, local: &net.UnixAddr{Name: "@", Net: "unix"}}, "", false},
		{"lock not granted to this backend", session{held: false, backendPID: 7, keyPID: 7, clientAddr: str("127.0.0.1"), clientPort: port(40000), local: local}, "not show it granted to this connection's backend (pid 7)", false},
		{"pooler: the announced pid is not the backend's", session{held: true, backendPID: 7, keyPID: 123456, clientAddr: str("127.0.0.1"), clientPort: port(51000), local: local}, "announced backend pid 123456 but the statements ran in pid 7", false},
		{"pooler over a Unix socket to the server", session{held: true, backendPID: 7, keyPID: 99, local: local}, "announced backend pid 99", false},
		{"NAT: other address, same session", session{held: true, backendPID: 7, keyPID: 7, clientAddr: str("10.0.0.5"), clientPort: port(61000), local: local}, "", true},
		{"same address, other port", session{held: true, backendPID: 7, keyPID: 7, clientAddr: str("127.0.0.1"), clientPort: port(40001), local: local}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			note, err := judgeSession(tc.s)
			if tc.fatal == "" {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.True(t, errors.Is(err, errNotDirect))
				assert.Contains(t, err.Error(), tc.fatal)
			}
			assert.Equal(t, tc.wantNote, note != "", "note: %q", note)
		})
	}
}

func lockFor(t *testing.T, cfg *config.Config, name string) *nameLock {
	t.Helper()
	dc, err := directConfig(cfg, "a")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := acquireNameLock(ctx, dc, name, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(l.close)
	return l
}

func TestSessionCheckPassesOnADirectConnection(t *testing.T) {
	cfg := config.Default()
	cfg.DatabaseURL = pgtest.URL(t) // TCP to 127.0.0.1
	l := lockFor(t, cfg, "direct")
	ctx := context.Background()

	s, err := inspectSession(ctx, l.conn, "direct")
	require.NoError(t, err)
	assert.True(t, s.held)
	assert.Equal(t, s.keyPID, s.backendPID)
	require.NotNil(t, s.clientAddr, "a TCP connection has a client address")
	assert.Equal(t, l.conn.PgConn().Conn().LocalAddr().(*net.TCPAddr).Port, int(*s.clientPort), "the server sees our own socket")
	note, err := judgeSession(s)
	require.NoError(t, err)
	assert.Empty(t, note)
	require.NoError(t, l.verifySession(ctx))
}

func TestSessionCheckPassesOverAUnixSocket(t *testing.T) {
	c, _ := pgtest.StartCluster(t) // ours, to reach its socket directory
	cfg := config.Default()
	cfg.DatabaseURL = fmt.Sprintf("host=%s port=%d user=postgres dbname=tether", c.DataDir(), c.Port())
	l := lockFor(t, cfg, "socket")
	ctx := context.Background()

	s, err := inspectSession(ctx, l.conn, "socket")
	require.NoError(t, err)
	assert.Nil(t, s.clientAddr, "no client address over a Unix socket")
	assert.IsType(t, &net.UnixAddr{}, s.local)
	assert.True(t, s.held)
	assert.Equal(t, s.keyPID, s.backendPID)
	require.NoError(t, l.verifySession(ctx))
}

func TestSessionCheckFailsThroughPgBouncer(t *testing.T) {
	direct := pgtest.URL(t)
	cfg := config.Default()
	cfg.DatabaseURL = pgtest.PgBouncer(t, direct, "transaction")
	l := lockFor(t, cfg, "pooled")
	ctx := context.Background()

	s, err := inspectSession(ctx, l.conn, "pooled")
	require.NoError(t, err)
	// A single client through a transaction pooler. The lock may well be on
	// "its" server connection, so pg_locks alone can pass by luck.
	assert.NotEqual(t, s.keyPID, s.backendPID, "PgBouncer hands out a backend key of its own")
	require.NotNil(t, s.clientPort)
	assert.NotEqual(t, l.conn.PgConn().Conn().LocalAddr().(*net.TCPAddr).Port, int(*s.clientPort), "the server's client is PgBouncer, not us")
	s.keyPID = s.backendPID
	note, err := judgeSession(s)
	require.NoError(t, err)
	assert.NotEmpty(t, note, "the address check sees the pooler too")

	err = l.verifySession(ctx)
	require.Error(t, err)
	assert.True(t, errors.Is(err, errNotDirect))
	for _, want := range []string{"database_direct_url", "database_url", "session-level advisory lock", "port 5432 instead of PgBouncer's 6432"} {
		assert.Contains(t, err.Error(), want)
	}

	// It gave the lock back. No pooled server connection keeps it.
	conn, err := pgx.Connect(ctx, direct)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var held bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND classid = hashtext('tether-agent-name')::oid AND objid = hashtext('pooled')::oid AND objsubid = 2 AND granted)`).Scan(&held))
	assert.False(t, held, "the name lock stayed with a pooled server connection")
}

func TestRunRefusesATransactionPoolerForTheNameLock(t *testing.T) {
	direct := pgtest.URL(t)
	// exec mode: PgBouncer 1.18 in transaction mode has no prepared statements.
	pooled := pgtest.WithQueryParam(t, pgtest.PgBouncer(t, direct, "transaction"), "default_query_exec_mode", "exec")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	cfg := testConfig(t, pooled, "behind-pooler")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Run(ctx, cfg, log, Options{Started: func(string) { t.Error("the agent started through a transaction pooler") }})
	require.Error(t, err)
	assert.True(t, errors.Is(err, errNotDirect), "%v", err)
	assert.Contains(t, err.Error(), "set database_direct_url to PostgreSQL itself")

	// The same pooled database_url with database_direct_url to PostgreSQL starts.
	cfg = testConfig(t, pooled, "behind-pooler")
	cfg.DatabaseDirectURL = direct
	require.NoError(t, cfg.Validate())
	runCtx, stop := context.WithCancel(ctx)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cfg, log, Options{Started: func(string) { close(started) }}) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("agent with database_direct_url did not start: %v", err)
	case <-ctx.Done():
		t.Fatal("agent with database_direct_url did not start in time")
	}
	stop()
	require.NoError(t, <-done)

	// database_direct_url itself through the pooler is refused too, naming it.
	cfg = testConfig(t, direct, "behind-pooler")
	cfg.DatabaseDirectURL = pooled
	require.NoError(t, cfg.Validate())
	err = Run(ctx, cfg, log, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "point database_direct_url at PostgreSQL itself")
}
