package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// logShape is one log ingest workload: jobs jobs printing perJob bytes each
// at once, as the agent's flusher hands them to the store: one statement per
// flush carrying every job's records, records of chunk bytes (the plugin
// SDK's chunk).
type logShape struct {
	name          string
	jobs          int
	perJob, chunk int
	flushBytes    int // what one flush carries, all jobs together
}

var logShapes = []logShape{
	{name: "1x100MB", jobs: 1, perJob: 100 << 20, chunk: 32 << 10, flushBytes: 1 << 20},
	{name: "10x10MB", jobs: 10, perJob: 10 << 20, chunk: 32 << 10, flushBytes: 1 << 20},
	{name: "100x1MB", jobs: 100, perJob: 1 << 20, chunk: 32 << 10, flushBytes: 1 << 20},
}

// BenchmarkLogIngest stores the same log rows two ways on the same server,
// into the same table, interleaved round by round: tether's log path
// (store.AppendLogs, fenced by lease and generation, one statement per
// flush) and a plain COPY of the rows with no fence, the floor. It prints
// MB/s of each, medians over TETHER_BENCH_ROUNDS rounds, and their ratio.
// TETHER_BENCH_LOG_MB scales the bytes of every shape (default 100).
func BenchmarkLogIngest(b *testing.B) {
	rounds := envInt("TETHER_BENCH_ROUNDS", 5)
	scale := float64(envInt("TETHER_BENCH_LOG_MB", 100)) / 100
	for _, sh := range logShapes {
		sh.perJob = int(float64(sh.perJob) * scale)
		b.Run(sh.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				logIngest(b, sh, rounds)
			}
		})
	}
}

func logIngest(b *testing.B, sh logShape, rounds int) {
	ctx := context.Background()
	pool := pgtest.DB(b)
	ids, leases := leasedJobs(b, pool, sh.jobs)
	flushes := logFlushes(sh, ids, leases)
	var tether, floor []float64
	for r := 0; r < rounds; r++ {
		truncateLogs(b, pool)
		tether = append(tether, mbps(sh, timeIt(b, func() error { return appendAll(ctx, pool, flushes) })))
		truncateLogs(b, pool)
		floor = append(floor, mbps(sh, timeIt(b, func() error { return copyAll(ctx, pool, flushes) })))
	}
	t, c := median(tether), median(floor)
	b.ReportMetric(t, "tether-MB/s")
	b.ReportMetric(c, "copy-MB/s")
	b.ReportMetric(t/c, "tether/copy")
	b.Logf("%s: tether %.1f MB/s (%s), COPY %.1f MB/s (%s), tether/COPY %.2f", sh.name, t, floats(tether), c, floats(floor), t/c)
}

// leasedJobs makes n running jobs held under lease 1 by generation "g".
func leasedJobs(b *testing.B, pool *pgxpool.Pool, n int) ([]string, []int64) {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	leases := make([]int64, n)
	rows := make([][]any, n)
	for i := range ids {
		ids[i], leases[i] = fmt.Sprintf("log-%05d", i), 1
		rows[i] = []any{ids[i], "chatty", "shell", "running"}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "command", "plugin", "status"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO active_jobs (job_id, command, agent_name, agent_generation, lease)
		SELECT id, command, 'bench', 'g', 1 FROM jobs`); err != nil {
		b.Fatal(err)
	}
	return ids, leases
}

// logFlushes cuts every job's output into records of sh.chunk bytes and
// deals them into flushes of sh.flushBytes, jobs interleaved as a flusher
// draining all of them at once would.
func logFlushes(sh logShape, ids []string, leases []int64) [][]store.LogBatch {
	chunk := logText(sh.chunk)
	perFlush := max(1, sh.flushBytes/(sh.chunk*sh.jobs)) // records per job per flush
	seq := make([]int64, sh.jobs)
	at := time.Now()
	var out [][]store.LogBatch
	for left := sh.perJob; left > 0; left -= perFlush * sh.chunk {
		flush := make([]store.LogBatch, len(ids))
		for j := range ids {
			flush[j] = store.LogBatch{JobID: ids[j], Lease: leases[j], Generation: "g"}
			for k := 0; k < perFlush && k*sh.chunk < left; k++ {
				seq[j]++
				n := min(sh.chunk, left-k*sh.chunk)
				flush[j].Records = append(flush[j].Records, store.LogRecord{Seq: seq[j], Stream: "stdout", At: at, Data: chunk[:n]})
			}
		}
		out = append(out, flush)
	}
	return out
}

// logText is n bytes of lines of 100 pseudo-random letters: text that
// compresses about as well as real output, not to nothing.
func logText(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]byte, n)
	for i := range out {
		if i%100 == 99 {
			out[i] = '\n'
			continue
		}
		out[i] = byte('a' + r.IntN(26))
	}
	return out
}

func appendAll(ctx context.Context, pool *pgxpool.Pool, flushes [][]store.LogBatch) error {
	st := store.New(pool)
	for _, f := range flushes {
		held, err := st.AppendLogs(ctx, f, 1<<30)
		if err != nil {
			return err
		}
		if len(held) != len(f) {
			return fmt.Errorf("%d of %d leases held", len(held), len(f))
		}
	}
	return nil
}

// copyAll stores the same rows with one COPY per flush: no fence, no
// identity, no cap, no notification. It is the floor.
func copyAll(ctx context.Context, pool *pgxpool.Pool, flushes [][]store.LogBatch) error {
	cols := []string{"job_id", "stream", "at", "attempt", "data"}
	for _, f := range flushes {
		var rows [][]any
		for _, lb := range f {
			for _, r := range lb.Records {
				rows = append(rows, []any{lb.JobID, r.Stream, r.At, int32(1), r.Data})
			}
		}
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{"job_logs"}, cols, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
	}
	return nil
}

func truncateLogs(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `TRUNCATE job_logs`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE active_jobs SET log_lease = NULL, log_seq = 0, stdout_bytes = 0, stderr_bytes = 0`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		b.Fatal(err)
	}
}

func timeIt(b *testing.B, fn func() error) time.Duration {
	b.Helper()
	start := time.Now()
	if err := fn(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func mbps(sh logShape, d time.Duration) float64 {
	return float64(sh.jobs*sh.perJob) / 1e6 / d.Seconds()
}

func floats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, " ")
}
