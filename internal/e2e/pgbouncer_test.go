package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// Behind a real PgBouncer in transaction mode (Debian's pgbouncer). An agent
// whose name lock would go through it refuses to start, naming
// database_direct_url. With database_direct_url to PostgreSQL it runs jobs
// through the pooler, its lock is its own backend's, and kill -9 frees it.
func TestPgBouncerTransactionMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	direct := pgtest.URL(t)
	bouncer := pgtest.PgBouncer(t, direct, "transaction")
	h := newHarness(t, direct, fast())

	// PgBouncer before 1.21 keeps no prepared statements in transaction
	// mode. pgx must not rely on them, and either mode works.
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			pooled := pgtest.WithQueryParam(t, bouncer, "default_query_exec_mode", mode)

			refused := h.spawnAgent("pooled-only-"+mode, "DATABASE_URL="+pooled)
			code := h.waitExit(refused, 30*time.Second)
			out := refused.out.String()
			assert.NotEqual(t, 0, code, "an agent whose name lock goes through a transaction pooler must not run:\n%s", out)
			for _, want := range []string{"database_direct_url", "session-level advisory lock", "port 5432 instead of PgBouncer's 6432"} {
				assert.Contains(t, out, want)
			}
			assert.NotContains(t, out, "agent registered")

			name := "pooled-" + mode
			a := h.startAgent(ctx, name, "DATABASE_URL="+pooled, "TETHER_DATABASE_DIRECT_URL="+direct)
			ids := []string{h.submitShell(ctx, 0), h.submitResumable(ctx, 300*time.Millisecond)}
			h.waitTerminal(ctx, ids, 30*time.Second)
			for _, id := range ids {
				j := h.job(ctx, id)
				assert.Equal(t, store.StatusSucceeded, j.Status, "job %s: %s (%s)", id, j.Error, h.eventSummary(ctx, id))
				h.checkTimeline(ctx, id)
			}

			// The lock is held by a backend whose client is the agent process
			// itself, not one of PgBouncer's server connections.
			pid, port, ok := h.nameLockHolder(ctx, name)
			require.True(t, ok, "agent %s holds no name lock", name)
			assert.Contains(t, localTCPPorts(t, a.cmd.Process.Pid), port,
				"the name lock's backend (pid %d, client port %d) must serve one of the agent's own sockets", pid, port)

			h.kill9(a)
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, _, held := h.nameLockHolder(ctx, name); !held {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("kill -9 of agent %s did not free its name lock within 5s", name)
				}
				sleep(ctx, 20*time.Millisecond)
			}
		})
	}
}

// Migrations run in one transaction under a transaction-scoped advisory
// lock, so `tether migrate` works through PgBouncer in transaction mode
// without database_direct_url.
func TestPgBouncerMigrate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	empty := pgtest.EmptyURL(t)
	pooled := pgtest.WithQueryParam(t, pgtest.PgBouncer(t, empty, "transaction"), "default_query_exec_mode", "exec")
	for range 2 { // the second run finds nothing to do
		cmd := exec.CommandContext(ctx, bins.Tether, "migrate")
		cmd.Env = []string{"DATABASE_URL=" + pooled, "PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "tether migrate through PgBouncer:\n%s", out)
	}
	conn, err := pgx.Connect(ctx, empty)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var version int
	require.NoError(t, conn.QueryRow(ctx, `SELECT max(version) FROM tether_schema_migrations`).Scan(&version))
	assert.Positive(t, version)
	var agents bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('agents') IS NOT NULL`).Scan(&agents))
	assert.True(t, agents, "the schema was created")
}

// nameLockHolder is the backend holding agent name's lock and its client port.
func (h *harness) nameLockHolder(ctx context.Context, name string) (pid, port int, ok bool) {
	h.t.Helper()
	err := h.pool.QueryRow(ctx, `SELECT l.pid, coalesce(a.client_port, -1)
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = hashtext('tether-agent-name')::oid AND l.objid = hashtext($1)::oid`, name).Scan(&pid, &port)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false
	}
	require.NoError(h.t, err)
	return pid, port, true
}
