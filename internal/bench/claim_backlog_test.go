package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/queries"
)

// Sizes of BenchmarkClaimBacklog: the backlogs (TETHER_BENCH_CLAIM_BACKLOGS,
// comma-separated), the interleaved rounds and the claims of each kind per
// round and backlog.
var (
	claimBacklogs      = envInts("TETHER_BENCH_CLAIM_BACKLOGS", []int{1000, 100000, 1000000})
	claimBacklogRounds = envInt("TETHER_BENCH_CLAIM_ROUNDS", 3)
	claimBacklogClaims = envInt("TETHER_BENCH_CLAIM_SAMPLES", 200)
)

// gaugeSamples is how many queue gauge reads a round times per backlog.
const gaugeSamples = 5

func envInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return def
		}
		out = append(out, n)
	}
	return out
}

// submitMany queues $4 jobs of command $1 (plugin $2) as job_submit.sql does
// one. It writes the jobs row (queued, context, request hash, the levers
// $5..$11 stamped), its claimable active row and its submitted event. They
// are submitted 1 ms apart, the last now, with UUIDv7-shaped ids that sort by
// that time (sequence numbers $3 …, unique per database).
const submitMany = `
WITH x AS (
    SELECT i, at, lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || lpad(to_hex(i), 18, '0') AS h
    FROM (SELECT i, now() - ($3::bigint + $4::bigint - 1 - i) * interval '1 millisecond' AS at
          FROM generate_series($3::bigint, $3::bigint + $4::bigint - 1) i) g
), j AS (
    INSERT INTO jobs (id, command, plugin, status, context, submitter, request_hash,
                      max_retry, retry_backoff, retry_backoff_max, pending_timeout, active_timeout,
                      ttl_succeeded, ttl_failed, created_at, updated_at)
    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(h, 13, 3) || '-8' || substr(h, 16, 3) || '-' || substr(h, 19, 12),
           $1, $2, 'queued', jsonb_build_object('n', i), '', md5(i::text) || md5(h),
           $5, $6::float8 * interval '1 second', $7::float8 * interval '1 second',
           $8::float8 * interval '1 second', $9::float8 * interval '1 second',
           $10::float8 * interval '1 second', $11::float8 * interval '1 second', at, at
    FROM x
    RETURNING id, command, plugin, pending_timeout, created_at
), a AS (
    INSERT INTO active_jobs (job_id, command, plugin, pending_timeout, run_after)
    SELECT id, command, plugin, pending_timeout, created_at FROM j
)
INSERT INTO job_events (job_id, at, kind, message)
SELECT id, created_at, 'submitted', '' FROM j`

// backlogDB is one database holding a backlog of one command, kept at its
// size. Every claim's jobs are submitted again at the tail, untimed.
type backlogDB struct {
	size   int
	admin  *pgxpool.Pool // loading, topping up, statistics
	st     *store.Store  // the claim as agents run it: JIT off
	jitOn  *pgxpool.Pool // the claim as it ran before issue 25, on connections of its own
	next   int64         // the next job's sequence number
	levers limits.Set
	stats  bool // pg_stat_statements is there: JIT-compiled functions are counted
}

const backlogCommand = "work"

var backlogHolder = store.Holder{Name: "bench", Generation: "1"}

func newBacklogDB(b *testing.B, size int) *backlogDB {
	b.Helper()
	ctx := context.Background()
	d := &backlogDB{size: size, admin: pgtest.DB(b), levers: limits.Defaults()}
	start := time.Now()
	// In slices of 100,000: one statement's pending trigger events and
	// RETURNING rows stay small.
	for left := size; left > 0; left -= 100000 {
		d.submit(b, min(left, 100000))
	}
	vacuum(b, d.admin)
	b.Logf("backlog of %d queued jobs loaded in %s", size, time.Since(start).Round(time.Millisecond))
	// The view of pg_stat_statements, when the server preloads it (TestMain).
	if _, err := d.admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
		_, err = d.admin.Exec(ctx, `SELECT FROM pg_stat_statements LIMIT 1`)
		d.stats = err == nil
	}
	d.st = store.New(d.pool(b))
	d.jitOn = d.pool(b)
	if _, err := d.st.RegisterAgent(ctx, store.Registration{Holder: backlogHolder, Capacity: 32, Commands: []string{backlogCommand}}); err != nil {
		b.Fatal(err)
	}
	return d
}

// pool opens another pool on d's database, closed when the benchmark ends.
func (d *backlogDB) pool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), d.admin.Config().Copy())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// submit queues n more jobs at the tail of the backlog.
func (d *backlogDB) submit(b *testing.B, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	l := d.levers
	secs := func(t time.Duration) float64 { return t.Seconds() }
	if _, err := d.admin.Exec(context.Background(), submitMany, backlogCommand, "noop", d.next, n,
		l.MaxRetry, secs(l.RetryBackoff), secs(l.RetryBackoffMax), secs(l.PendingTimeout),
		secs(l.ActiveTimeout), secs(l.TTLSucceeded), secs(l.TTLFailed)); err != nil {
		b.Fatalf("queueing %d jobs: %v", n, err)
	}
	d.next += int64(n)
}

// oldGenericPlan is the first statement of the claim's pipeline before
// issue 25: the generic plan, JIT left to the server's jit_above_cost.
const oldGenericPlan = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"

// claimJITOn claims as the agent did before issue 25 and returns how many
// jobs it took.
func (d *backlogDB) claimJITOn(ctx context.Context, limit int) (int, error) {
	st := queries.Named("claim")
	var batch pgx.Batch
	batch.Queue(oldGenericPlan)
	batch.Queue(st.SQL, st.Args(map[string]any{
		"agent": backlogHolder.Name, "generation": backlogHolder.Generation, "limit": limit,
		"commands": []string{backlogCommand}, "any_plugin": true, "resumable": []string{},
	})...)
	br := d.jitOn.SendBatch(ctx, &batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return n, br.Close()
}

// claim runs one claim of limit jobs, JIT off (the store) or on (the old
// pipeline), and returns how long it took and how many jobs it took.
func (d *backlogDB) claim(ctx context.Context, limit int, jit bool) (time.Duration, int, error) {
	start := time.Now()
	if jit {
		n, err := d.claimJITOn(ctx, limit)
		return time.Since(start), n, err
	}
	got, err := d.st.Claim(ctx, backlogHolder, limit, []string{backlogCommand})
	return time.Since(start), len(got), err
}

// jitCounts is the claim statement's calls and JIT-compiled functions so far
// in d's database (pg_stat_statements). They are zero when it is not loaded.
func (d *backlogDB) jitCounts(b *testing.B, ctx context.Context) jitCount {
	b.Helper()
	var c jitCount
	if !d.stats {
		return c
	}
	err := d.admin.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(jit_functions), 0)::float8
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query LIKE '-- Claim up to @limit claimable jobs%'`).Scan(&c.calls, &c.functions)
	if err != nil {
		b.Fatalf("reading the claim's statistics: %v", err)
	}
	return c
}

// jitCount is a statement's calls and the functions JIT compiled for them.
type jitCount struct{ calls, functions float64 }

func (c jitCount) sub(o jitCount) jitCount {
	return jitCount{c.calls - o.calls, c.functions - o.functions}
}
func (c jitCount) add(o jitCount) jitCount {
	return jitCount{c.calls + o.calls, c.functions + o.functions}
}

// perCall is the functions compiled per call, -1 when nothing was counted.
func (c jitCount) perCall() float64 {
	if c.calls == 0 {
		return -1
	}
	return c.functions / c.calls
}

// claimKind is one column of BenchmarkClaimBacklog. It is a claim's limit,
// with JIT off (as agents claim) or on (before issue 25).
type claimKind struct {
	limit int
	jit   bool
}

func (k claimKind) String() string {
	if k.jit {
		return fmt.Sprintf("claim(%d) JIT on", k.limit)
	}
	return fmt.Sprintf("claim(%d)", k.limit)
}

var claimKinds = []claimKind{{1, false}, {10, false}, {1, true}, {10, true}}

// backlogFigures are one backlog's per-round figures.
type backlogFigures struct {
	p50, p99     map[claimKind][]float64 // ms, one per round
	jit          map[claimKind]jitCount  // over all rounds
	gauge, count []float64               // ms: the queue gauge (QueueStats), and a count(*) of the whole range
}

// BenchmarkClaimBacklog (issue 25) measures the claim latency of claim(1) and
// claim(10) against 1,000, 100,000 and 1,000,000 queued jobs of the claiming
// command. The backlogs run side by side in one run (interleaved rounds, with
// every backlog and kind once per round), each backlog kept at its size. Each
// kind is measured as agents claim (JIT off) and as they claimed before (the
// generic plan with JIT left to the server), on connections of their own so
// neither reuses the other's cached plan. It also times the queue gauge
// (QueueStats, counting up to janitor.QueueCountCap) beside a count(*) of the
// whole due range, what the gauge read before. It prints a line per backlog
// (medians over the rounds of each round's p50 and p99) and the ratios
// `backlog 1M/1k claim p50: X.XX`.
func BenchmarkClaimBacklog(b *testing.B) {
	ctx := context.Background()
	dbs := make([]*backlogDB, len(claimBacklogs))
	figs := make([]*backlogFigures, len(claimBacklogs))
	for i, n := range claimBacklogs {
		dbs[i] = newBacklogDB(b, n)
		figs[i] = &backlogFigures{p50: map[claimKind][]float64{}, p99: map[claimKind][]float64{}, jit: map[claimKind]jitCount{}}
	}
	for _, d := range dbs { // warm the pools, their statement caches and plans
		for _, k := range claimKinds {
			for range 20 {
				d.claimAndRefill(b, ctx, k)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		for r := range claimBacklogRounds {
			for i, d := range dbs {
				d.round(b, ctx, figs[i])
			}
			b.Logf("round %d of %d done", r+1, claimBacklogRounds)
		}
	}
	b.StopTimer()
	report(b, dbs, figs)
}

// claimAndRefill runs one claim of kind k and submits as many jobs again,
// and returns the claim's time.
func (d *backlogDB) claimAndRefill(b *testing.B, ctx context.Context, k claimKind) time.Duration {
	b.Helper()
	took, n, err := d.claim(ctx, k.limit, k.jit)
	if err != nil {
		b.Fatalf("%s with %d queued: %v", k, d.size, err)
	}
	if n != min(k.limit, d.size) {
		b.Fatalf("%s with %d queued took %d jobs", k, d.size, n)
	}
	d.submit(b, n)
	return took
}

// round measures every kind once on d, then the gauges, into f.
func (d *backlogDB) round(b *testing.B, ctx context.Context, f *backlogFigures) {
	b.Helper()
	for _, k := range claimKinds {
		before := d.jitCounts(b, ctx)
		ds := make([]time.Duration, claimBacklogClaims)
		for i := range ds {
			ds[i] = d.claimAndRefill(b, ctx, k)
		}
		p50, p99 := percentiles(ds)
		f.p50[k] = append(f.p50[k], p50)
		f.p99[k] = append(f.p99[k], p99)
		f.jit[k] = f.jit[k].add(d.jitCounts(b, ctx).sub(before))
	}
	for range gaugeSamples {
		start := time.Now()
		stats, err := janitor.QueueStats(ctx, d.st.Pool(), []string{backlogCommand}, fleet.Timings{StaleJob: time.Minute})
		f.gauge = append(f.gauge, ms(time.Since(start)))
		if err != nil {
			b.Fatal(err)
		}
		if want := min(d.size, janitor.QueueCountCap); len(stats) != 1 || stats[0].Jobs != want {
			b.Fatalf("queue gauge with %d queued: %+v, want %d jobs", d.size, stats, want)
		}
		start = time.Now()
		var n int
		err = d.admin.QueryRow(ctx, `SELECT count(*) FROM active_jobs a
			WHERE a.agent_name IS NULL AND a.command = $1 AND a.run_after <= now()`, backlogCommand).Scan(&n)
		f.count = append(f.count, ms(time.Since(start)))
		if err != nil {
			b.Fatal(err)
		}
		if n != d.size {
			b.Fatalf("count of the backlog: %d, want %d", n, d.size)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sizeLabel is n as the ratio lines name it: 1k, 100k, 1M.
func sizeLabel(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

func report(b *testing.B, dbs []*backlogDB, figs []*backlogFigures) {
	b.Helper()
	fmt.Printf("claim against a backlog of one command (issue 25): %d interleaved rounds of %d claims per backlog and kind; medians over the rounds of each round's p50 / p99, ms; JIT fn: JIT-compiled functions per claim (pg_stat_statements, -1: not loaded)\n",
		claimBacklogRounds, claimBacklogClaims)
	fmt.Printf("%-8s", "backlog")
	for _, k := range claimKinds {
		fmt.Printf(" %28s", k.String()+" p50/p99/JIT fn")
	}
	fmt.Printf(" %16s %16s\n", "gauge p50 ms", "count(*) p50 ms")
	for i, d := range dbs {
		f := figs[i]
		fmt.Printf("%-8s", sizeLabel(d.size))
		for _, k := range claimKinds {
			fmt.Printf(" %9.3f / %7.3f / %6.1f", median(f.p50[k]), median(f.p99[k]), f.jit[k].perCall())
		}
		fmt.Printf(" %16.2f %16.2f\n", median(f.gauge), median(f.count))
		for _, k := range claimKinds {
			fmt.Printf("         rounds %s p50: %s\n", k, msList(f.p50[k]))
		}
	}
	first, last := figs[0], figs[len(figs)-1]
	for _, k := range claimKinds {
		label := "claim"
		if k.limit != 1 {
			label = fmt.Sprintf("claim(%d)", k.limit)
		}
		if k.jit {
			label += " JIT on"
		}
		ratio := median(last.p50[k]) / median(first.p50[k])
		fmt.Printf("backlog %s/%s %s p50: %.2f\n", sizeLabel(dbs[len(dbs)-1].size), sizeLabel(dbs[0].size), label, ratio)
		if !k.jit {
			b.ReportMetric(ratio, fmt.Sprintf("claim%d-p50-ratio", k.limit))
		}
	}
}

func msList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(parts, " ")
}
