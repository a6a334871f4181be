package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// backlogRows is the size of the other command's queue in the backlog
// benchmarks.
var backlogRows = envInt("TETHER_BENCH_BACKLOG", 200000)

// loadQueued puts n queued jobs of command cmd (plugin p) in the database,
// due over the last 30 minutes (a backlog, not yet awol), with IDs
// prefix-00000001….
func loadQueued(b *testing.B, pool *pgxpool.Pool, prefix, cmd, p string, n int) {
	b.Helper()
	ctx := context.Background()
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{fmt.Sprintf("%s-%08d", prefix, i), cmd, p, "queued"}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "command", "plugin", "status"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO active_jobs (job_id, command, plugin, run_after)
		SELECT id, command, plugin, now() - random() * interval '30 minutes' FROM jobs WHERE command = $1`, cmd); err != nil {
		b.Fatal(err)
	}
}

func vacuum(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	for _, t := range []string{"jobs", "active_jobs", "agents"} {
		if _, err := pool.Exec(context.Background(), "VACUUM ANALYZE "+t); err != nil {
			b.Fatal(err)
		}
	}
}

// percentiles returns the p50 and p99 of ds in milliseconds.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q * float64(len(s)-1))
		return float64(s[i]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99)
}

// BenchmarkClaimLatency has one agent claim one job at a time of its command.
// In other, another command has a backlog of backlogRows claimable jobs,
// which the claim must not pay for. In own, the agent's own command has that
// backlog (the claim reads its oldest rows only).
func BenchmarkClaimLatency(b *testing.B) {
	b.Run("backlog=other", func(b *testing.B) { claimLatency(b, false) })
	b.Run("backlog=own", func(b *testing.B) { claimLatency(b, true) })
}

func claimLatency(b *testing.B, own bool) {
	const samples = 1000
	ctx := context.Background()
	pool := pgtest.DB(b)
	st := store.New(pool)
	if own {
		loadQueued(b, pool, "mine", "mine", "noop", backlogRows)
	} else {
		loadQueued(b, pool, "other", "other", "noop", backlogRows)
		loadQueued(b, pool, "mine", "mine", "noop", samples+50)
	}
	h := store.Holder{Name: "bench", Generation: "1"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 32, Commands: []string{"mine"}}); err != nil {
		b.Fatal(err)
	}
	vacuum(b, pool)
	for range 50 { // warm the pool, the statement cache and the plan
		if _, err := st.Claim(ctx, h, 1, []string{"mine"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds := make([]time.Duration, 0, samples)
		for range samples {
			start := time.Now()
			got, err := st.Claim(ctx, h, 1, []string{"mine"})
			ds = append(ds, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != 1 {
				b.Fatalf("claimed %d jobs, want 1", len(got))
			}
		}
		p50, p99 := percentiles(ds)
		b.ReportMetric(p50, "claim-p50-ms")
		b.ReportMetric(p99, "claim-p99-ms")
		where := "another command"
		if own {
			where = "its own command"
		}
		b.Logf("claim of 1 job with %d claimable rows of %s: p50=%.3fms p99=%.3fms (%d claims)", backlogRows, where, p50, p99, samples)
		if i+1 < b.N {
			b.StopTimer()
			if _, err := pool.Exec(ctx, `UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL WHERE command = 'mine'`); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `UPDATE jobs SET status = 'queued' WHERE command = 'mine'`); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
}

// noPlugins is a janitor's plugin manager with nothing loaded.
type noPlugins struct{}

func (noPlugins) Info(string) (plugin.Info, bool)                    { return plugin.Info{}, false }
func (noPlugins) Infos() map[string]plugin.Info                      { return nil }
func (noPlugins) Cleanup(context.Context, string, *plugin.Job) error { return nil }

// BenchmarkJanitorPass runs a janitor pass with backlogRows queued jobs of a
// served command and nothing to do. Its cost must not grow with the backlog.
func BenchmarkJanitorPass(b *testing.B) {
	const passes = 50
	ctx := context.Background()
	pool := pgtest.DB(b)
	st := store.New(pool)
	loadQueued(b, pool, "work", "work", "noop", backlogRows)
	h := store.Holder{Name: "bench", Generation: "1"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 32, Commands: []string{"work"},
		Plugins: []byte(`{"noop":{"version":"1","capabilities":["resume"]}}`)}); err != nil {
		b.Fatal(err)
	}
	vacuum(b, pool)
	svc := janitor.New(pool, noPlugins{}, janitor.Config{Holder: h, Logger: slog.New(slog.DiscardHandler)})
	for range 5 {
		if _, err := svc.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds := make([]time.Duration, 0, passes)
		for range passes {
			start := time.Now()
			n, err := svc.Pass(ctx)
			ds = append(ds, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if n != 0 {
				b.Fatalf("a pass with nothing to do applied %d actions", n)
			}
		}
		p50, p99 := percentiles(ds)
		b.ReportMetric(p50, "pass-p50-ms")
		b.ReportMetric(p99, "pass-p99-ms")
		b.Logf("janitor pass, %d queued jobs of a served command, nothing to do: p50=%.2fms p99=%.2fms (%d passes)", backlogRows, p50, p99, passes)
	}
}
