package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// BenchmarkRetention measures how fast one agent's janitor deletes expired
// jobs, each with the three events and one log chunk a no-op job leaves:
// 50,000 of them, deleted by Retention passes (as the janitor runs them
// every clean_interval) until none is left. Run with
// `go test -run '^$' -bench '^BenchmarkRetention$' -benchtime 1x ./internal/bench/`.
func BenchmarkRetention(b *testing.B) {
	const jobs = 50000
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		pool := pgtest.DB(b)
		if _, err := pool.Exec(ctx, `
INSERT INTO jobs (id, command, plugin, status, finished_at, ttl_succeeded, expires_at)
SELECT 'r-' || lpad(g::text, 8, '0'), 'noop', 'noop', 'succeeded', now() - interval '2 days', interval '1 day', now() - interval '1 day'
FROM generate_series(1, $1) g`, jobs); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
INSERT INTO job_events (job_id, kind, message) SELECT id, k, '' FROM jobs, unnest(ARRAY['submitted', 'claimed', 'succeeded']) k;
INSERT INTO job_logs (job_id, stream, data) SELECT id, 'stdout', convert_to('done' || chr(10), 'UTF8') FROM jobs`); err != nil {
			b.Fatal(err)
		}
		vacuum(b, pool)
		svc := janitor.New(pool, noPlugins{}, janitor.Config{Holder: store.Holder{Name: "r", Generation: "r-1"}, Logger: slog.New(slog.DiscardHandler)})
		b.ResetTimer()
		start := time.Now()
		passes, deleted := 0, 0
		for deleted < jobs {
			n, err := svc.Retention(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				b.Fatalf("retention stopped after %d of %d jobs", deleted, jobs)
			}
			deleted += n
			passes++
		}
		elapsed := time.Since(start)
		b.StopTimer()
		rate := float64(jobs) / elapsed.Seconds()
		b.ReportMetric(rate, "jobs/s")
		b.Logf("retention deleted %d expired jobs (3 events and 1 log chunk each) in %s over %d passes: %.0f jobs/s; a pass runs every clean_interval (10s) for at most half of it",
			jobs, elapsed.Round(time.Millisecond), passes, rate)
	}
}
