package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/queries"
)

// forceJIT makes every statement of the database at u a JIT candidate (jit
// on, jit_above_cost 0, and inlining and optimization off, which only cost
// time). It has auto_explain send the plan of every statement a session of it
// runs to the client as a NOTICE, in JSON. Its "JIT" section counts the
// functions PostgreSQL compiled, and is there only when it compiled some.
// They are database settings, so every new connection has them, as a server
// configured that way would. auto_explain's settings need a superuser (the
// test cluster's role is one).
func forceJIT(t *testing.T, u string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// Loaded here first so that the database's settings below are checked.
	_, err = conn.Exec(ctx, `LOAD 'auto_explain'`)
	require.NoError(t, err, "auto_explain ships with the PostgreSQL server (contrib); loading it needs a superuser")
	var db string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	for _, set := range []string{
		"jit = on", "jit_above_cost = 0", "jit_inline_above_cost = -1", "jit_optimize_above_cost = -1",
		"session_preload_libraries = 'auto_explain'", "auto_explain.log_min_duration = 0",
		"auto_explain.log_level = notice", "auto_explain.log_format = json",
	} {
		_, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s SET %s", pgx.Identifier{db}.Sanitize(), set))
		require.NoError(t, err, set)
	}
}

// plan is one executed statement as auto_explain reported it.
type plan struct {
	Query string `json:"Query Text"`
	JIT   *struct {
		Functions int `json:"Functions"`
	} `json:"JIT"`
}

// planLog collects the plans auto_explain sends on a pool's connections.
type planLog struct {
	mu    sync.Mutex
	plans []plan
	bad   []string // notices that were not a plan
}

func (l *planLog) onNotice(_ *pgconn.PgConn, n *pgconn.Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p plan
	i := strings.Index(n.Message, "{")
	if i < 0 || json.Unmarshal([]byte(n.Message[i:]), &p) != nil {
		l.bad = append(l.bad, n.Message)
		return
	}
	l.plans = append(l.plans, p)
}

// during returns the plans of the statements do ran (the test runs nothing
// else on the pool meanwhile).
func (l *planLog) during(t *testing.T, do func()) []plan {
	t.Helper()
	l.mu.Lock()
	l.plans = nil
	l.mu.Unlock()
	do()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.bad, "notices that are not auto_explain plans")
	return l.plans
}

// jitFunctions is how many functions PostgreSQL compiled for the statement
// sql among plans, and whether it ran at all.
func jitFunctions(plans []plan, sql string) (n int, ran bool) {
	for _, p := range plans {
		if p.Query != sql {
			continue
		}
		ran = true
		if p.JIT != nil {
			n += p.JIT.Functions
		}
	}
	return n, ran
}

type noPlugins struct{}

func (noPlugins) Info(string) (plugin.Info, bool)                    { return plugin.Info{}, false }
func (noPlugins) Infos() map[string]plugin.Info                      { return nil }
func (noPlugins) Cleanup(context.Context, string, *plugin.Job) error { return nil }

// TestHotStatementsRunWithoutJIT checks that the statements agents run all
// the time compile nothing, even on a database that makes every statement a
// JIT candidate. Those are the claim, the running and final batches, the
// heartbeat, the liveness check's read of pg_locks and agents, and the queue
// gauges. At a backlog of ~600,000 jobs of one command the claim's estimate
// passes the default jit_above_cost and PostgreSQL compiled ~66 functions per
// claim (34 of its 35 ms at 1,000,000 queued, issue 25). The evidence is
// PostgreSQL's own count of compiled functions for each real statement
// (auto_explain), and the same count is above zero for the gauges' statement
// run bare, so the test sees JIT where there is some.
func TestHotStatementsRunWithoutJIT(t *testing.T) {
	ctx := context.Background()
	u := pgtest.URL(t)
	forceJIT(t, u)
	var log planLog
	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	cfg.ConnConfig.OnNotice = log.onNotice
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var available bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available))
	require.True(t, available, "JIT is not available on this PostgreSQL server (pg_jit_available() is false), "+
		"so this test cannot tell JIT on from off. On Debian and Ubuntu the server package postgresql-NN ships it "+
		"(lib/llvmjit.so, with libllvm as a dependency: apt-get install -y postgresql); with the PGDG RPMs install "+
		"postgresqlNN-llvmjit; a server built from source needs configure --with-llvm")

	st := store.New(pool)
	h := store.Holder{Name: "jit", Generation: "jit-gen"}
	_, err = st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 10, Commands: []string{"c"}})
	require.NoError(t, err)
	for range 3 {
		submit(t, st, "c")
	}
	gauges := queries.Named("queue_stats")
	gaugeArgs := map[string]any{"commands": []string{"c"}, "live_s": 60.0, "cap": janitor.QueueCountCap}

	// The control is the gauges' statement run bare, as before this change.
	plans := log.during(t, func() {
		rows, err := pool.Query(ctx, gauges.SQL, gauges.Args(gaugeArgs)...)
		require.NoError(t, err)
		rows.Close()
		require.NoError(t, rows.Err())
	})
	n, ran := jitFunctions(plans, gauges.SQL)
	require.True(t, ran, "auto_explain reported no plan of the bare statement: %+v", plans)
	require.Positive(t, n, "the bare statement compiled no function: the database does not force JIT, the test proves nothing")

	var claimed []store.Claimed
	for _, tc := range []struct {
		statement string
		run       func(t *testing.T)
	}{
		{"claim", func(t *testing.T) {
			claimed, err = st.Claim(ctx, h, 3, []string{"c"})
			require.NoError(t, err)
			require.Len(t, claimed, 3)
		}},
		{"job_mark_running_batch", func(t *testing.T) {
			rs := make([]store.Running, len(claimed))
			for i, c := range claimed {
				rs[i] = store.Running{JobID: c.Job.ID, Lease: c.Lease, Message: "m"}
			}
			statuses, err := st.MarkRunningBatch(ctx, rs)
			require.NoError(t, err)
			assert.Equal(t, []jobstate.JobStatus{store.StatusRunning, store.StatusRunning, store.StatusRunning}, statuses)
		}},
		{"heartbeat", func(t *testing.T) {
			res, err := st.Heartbeat(ctx, h, []store.Lease{{JobID: claimed[0].Job.ID, Lease: claimed[0].Lease}})
			require.NoError(t, err)
			assert.True(t, res.Registered)
			assert.Len(t, res.Held, 1)
			assert.Len(t, res.Orphans, 2)
		}},
		{"attempt_end_final_batch", func(t *testing.T) {
			ends := make([]store.End, len(claimed))
			for i, c := range claimed {
				ends[i] = store.End{JobID: c.Job.ID, Lease: c.Lease, Actor: h, Outcome: store.Outcome{Status: store.StatusSucceeded}}
			}
			stored, err := st.EndFinalBatch(ctx, h, ends)
			require.NoError(t, err)
			assert.Equal(t, []bool{true, true, true}, stored)
		}},
		{"queue_stats", func(t *testing.T) {
			submit(t, st, "c")
			stats, err := janitor.QueueStats(ctx, pool, []string{"c"}, fleet.Timings{StaleJob: time.Minute})
			require.NoError(t, err)
			require.Len(t, stats, 1)
			assert.Equal(t, 1, stats[0].Jobs)
		}},
		{"agents_lock_free", func(t *testing.T) {
			jan := janitor.New(pool, noPlugins{}, janitor.Config{Holder: store.Holder{Name: "checker", Generation: "g"},
				Logger: slog.New(slog.DiscardHandler)})
			_, err := janitor.NewLiveness(jan, janitor.LivenessConfig{}).Check(ctx)
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.statement, func(t *testing.T) {
			sql := queries.Named(tc.statement).SQL
			plans := log.during(t, func() { tc.run(t) })
			n, ran := jitFunctions(plans, sql)
			require.True(t, ran, "auto_explain reported no plan of %s", tc.statement)
			assert.Zero(t, n, "%s compiled %d functions with JIT: it must run with jit off", tc.statement, n)
		})
	}
}
