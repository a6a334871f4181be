// Package bench measures tether end to end. It runs no-op jobs through real
// plugin processes (go-plugin over gRPC) with 1, 2 and 4 agents on one
// PostgreSQL. Run with `make bench`. Figures go in docs/benchmarks.md.
package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
)

var pluginDir string

func TestMain(m *testing.M) {
	dir, cleanup, err := bintest.TempPlugins(context.Background(), map[string]string{"noop": bintest.Noop})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginDir = dir
	var settings []string
	if pgcluster.LibraryInstalled("", "pg_stat_statements") {
		settings = pgStatSettings
	} else {
		fmt.Fprintln(os.Stderr, "bench: pg_stat_statements is not installed with the PostgreSQL server: the statement figures print -1 (it ships with Debian's server package)")
	}
	code := pgtest.RunWith(m, settings...)
	cleanup()
	os.Exit(code)
}

// jobsPerRun is large enough that start-up costs vanish into the rate.
var jobsPerRun = envInt("TETHER_BENCH_JOBS", 20000)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func BenchmarkEndToEnd(b *testing.B) {
	for _, agents := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runOnce(b, agents, jobsPerRun)
			}
		})
	}
}

// runOnce runs one round and reports it (BenchmarkEndToEnd's figures).
func runOnce(b *testing.B, agents, jobs int) {
	b.Helper()
	r := runRound(b, agents, jobs)
	b.ReportMetric(r.rate, "jobs/s")
	b.ReportMetric(r.p50, "claim-to-running-p50-ms")
	b.ReportMetric(r.p99, "claim-to-running-p99-ms")
	b.ReportMetric(float64(r.conns.open), "conns/agent")
	b.ReportMetric(float64(r.conns.busy), "busy-conns/agent")
	b.Logf("agents=%d jobs=%d elapsed=%s rate=%.0f jobs/s claim->running p50=%.2fms p99=%.2fms backends per agent: open %d busy %d (most seen)", agents, jobs, r.elapsed.Round(time.Millisecond), r.rate, r.p50, r.p99, r.conns.open, r.conns.busy)
}

// monitorEvery is how often a round counts the jobs left. The count scans
// active_jobs. Every 5 ms it cost the database about 12 % of a round's
// throughput (issue 18). A round lasts seconds, so 100 ms ends it late by 50
// ms on average. TETHER_BENCH_MONITOR_MS changes it, to measure that cost.
var monitorEvery = time.Duration(envInt("TETHER_BENCH_MONITOR_MS", 100)) * time.Millisecond

// round is what one runRound measured.
type round struct {
	elapsed   time.Duration
	rate      float64 // jobs/s
	p50, p99  float64 // claim → running, ms
	walBytes  float64 // the server's WAL during the run
	db        dbCost  // what PostgreSQL spent on the run
	clientCPU float64 // the agents' process and its plugin processes, s
	conns     connPeak
}

// progressQuery is how a round counts the jobs left. It is not counted as the
// agents' work.
const progressQuery = `SELECT count(*) FROM active_jobs`

// runRound puts a backlog of jobs no-op jobs in a fresh database, runs them
// on agents agents and returns what it measured, without reporting it.
func runRound(b *testing.B, agents, jobs int) round {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.DB(b)
	st := store.New(pool)
	// A backlog submitted up front, so the run measures claiming and running,
	// not the submit API.
	rows := make([][]any, jobs)
	for i := range rows {
		rows[i] = []any{fmt.Sprintf("job-%08d", i), "noop", "noop", "queued"}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "command", "plugin", "status"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO active_jobs (job_id, command) SELECT id, command FROM jobs`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE active_jobs`); err != nil {
		b.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var done []chan error
	var managers []*pluginhost.Manager
	for i := 0; i < agents; i++ {
		m, err := pluginhost.New(pluginhost.Config{Dir: pluginDir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		managers = append(managers, m)
		h := store.Holder{Name: fmt.Sprintf("bench-%d", i), Generation: strconv.Itoa(i)}
		if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 32, Commands: []string{"noop"}}); err != nil {
			b.Fatal(err)
		}
		// The pools an agent opens (internal/agent), named as it names them.
		work := agentPool(b, pool, h.Name, "work", defaults.DatabaseMaxConns)
		heartbeat := agentPool(b, pool, h.Name, "heartbeat", defaults.HeartbeatConns)
		listen := agentPool(b, pool, h.Name, "listen", 1)
		svc := claim.New(store.New(work), m, claim.Config{
			Holder: h, Capacity: 32,
			Commands: map[string]claim.Command{"noop": {Plugin: "noop"}},
			Logger:   slog.New(slog.DiscardHandler),
			Liveness: store.New(heartbeat),
			ListenConnect: func(ctx context.Context) (*pgx.Conn, error) {
				c, err := listen.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				return c.Hijack(), nil
			},
		})
		ch := make(chan error, 1)
		done = append(done, ch)
		go func() { ch <- svc.Run(runCtx) }()
	}

	var walBefore string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walBefore); err != nil {
		b.Fatal(err)
	}
	meter := startDBMeter(ctx, b, pool)
	self0, children0 := cpuNow()
	b.ResetTimer()
	start := time.Now()
	tick := time.NewTicker(monitorEvery)
	var conns connPeak
	for {
		var left int
		if err := pool.QueryRow(ctx, progressQuery).Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			break
		}
		conns.sample(ctx, b, pool)
		<-tick.C
	}
	elapsed := time.Since(start)
	tick.Stop()
	b.StopTimer()
	db := meter.stop(ctx, b)
	self1, _ := cpuNow()
	var walBytes float64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - $1::text::pg_lsn`, walBefore).Scan(&walBytes); err != nil {
		b.Fatal(err)
	}
	stop()
	for _, ch := range done {
		if err := <-ch; err != nil {
			b.Fatal(err)
		}
	}
	for _, m := range managers {
		m.Close()
	}
	_, children1 := cpuNow() // the plugin processes, waited for by Close

	var ok int
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`).Scan(&ok); err != nil {
		b.Fatal(err)
	}
	if ok != jobs {
		b.Fatalf("%d of %d jobs succeeded", ok, jobs)
	}
	err := pool.QueryRow(ctx, `
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.99) WITHIN GROUP (ORDER BY d)
		FROM (SELECT extract(epoch FROM r.at - c.at) * 1000 AS d
		      FROM job_timeline c JOIN job_timeline r ON r.job_id = c.job_id
		      WHERE c.kind = 'claimed' AND r.kind = 'running') x`).Scan(&p50, &p99)
	if err != nil {
		b.Fatal(err)
	}
	return round{elapsed: elapsed, rate: float64(jobs) / elapsed.Seconds(), p50: p50, p99: p99, walBytes: walBytes,
		db: db, clientCPU: self1 - self0 + children1 - children0, conns: conns}
}

// agentPool opens a pool on db's database of maxConns connections named
// tether/<agent>/<pool> with the agent's pool settings, closed when the
// benchmark ends.
func agentPool(b *testing.B, db *pgxpool.Pool, agent, pool string, maxConns int32) *pgxpool.Pool {
	b.Helper()
	pc := db.Config().Copy()
	pc.MaxConns = maxConns
	pc.MinConns = 0
	pc.MaxConnIdleTime = defaults.ConnMaxIdleTime
	pc.ConnConfig.RuntimeParams["application_name"] = "tether/" + agent + "/" + pool
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// connPeak is the most backends one agent held, open and busy (not idle), in
// the samples of pg_stat_activity a round took.
type connPeak struct{ open, busy int }

func (c *connPeak) sample(ctx context.Context, b *testing.B, db *pgxpool.Pool) {
	b.Helper()
	var open, busy int
	err := db.QueryRow(ctx, `
		SELECT coalesce(max(n), 0), coalesce(max(busy), 0) FROM (
			SELECT split_part(application_name, '/', 2) AS agent, count(*) AS n,
			       count(*) FILTER (WHERE state <> 'idle') AS busy
			FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'tether/%'
			GROUP BY 1) x`).Scan(&open, &busy)
	if err != nil {
		b.Fatal(err)
	}
	c.open, c.busy = max(c.open, open), max(c.busy, busy)
}
