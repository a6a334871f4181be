package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// BenchmarkECSResumeStorm is the resume storm: agent "victim" holds
// TETHER_BENCH_STORM_JOBS running ECS jobs (one synthetic task each,
// printing a line a second) on the hostile emulator with its account-wide
// rate limits on; agent "rescuer" is idle. The victim gets kill -9 (its
// plugin process is left to notice on its own, as after a real crash).
// It prints, from the kill: when the rescuer resumed each job (its
// `resumed` event), when each job's stored stdout caught up with every
// line its task had printed by the kill, and the AWS calls per second per
// action against the emulator's limits (over the storm and the busiest
// 10 s). It asserts that every job was resumed by the rescuer, caught up,
// and launched once, and that no action was throttled by more than the
// limits allow. When it runs fewer than 1,000 jobs it prints the
// arithmetic for 1,000.
//
//	make bench-ecs
//	go test -count=1 -run '^$' -bench '^BenchmarkECSResumeStorm$' -benchtime 1x -timeout 40m ./internal/e2e/
//
// Sizes come from the environment (defaults in brackets):
// TETHER_BENCH_STORM_JOBS [1000], TETHER_BENCH_STORM_TIMEOUT [20m],
// TETHER_BENCH_STORM_SEED [from the clock; printed].
func BenchmarkECSResumeStorm(b *testing.B) {
	runOnce(b, func() oneRun { return &stormBench{benchRun: benchRun{b: b}, cfg: stormFromEnv(b)} })
}

type stormConfig struct {
	jobs    int
	timeout time.Duration
	seed    int64
}

func stormFromEnv(b *testing.B) stormConfig {
	c := stormConfig{jobs: 1000, timeout: 20 * time.Minute, seed: time.Now().UnixNano()%1_000_000 + 1}
	benchEnvInt(b, "TETHER_BENCH_STORM_JOBS", &c.jobs)
	benchEnvDur(b, "TETHER_BENCH_STORM_TIMEOUT", &c.timeout)
	var seed int
	benchEnvInt(b, "TETHER_BENCH_STORM_SEED", &seed)
	if seed > 0 {
		c.seed = int64(seed)
	}
	return c
}

// stormLines is how long each task prints, a line a second: it outlives
// the storm.
const stormLines = 3600

type stormBench struct {
	benchRun
	cfg stormConfig
	em  *emulator.Emulator

	victim, rescuer *agentProc
	killedAt        time.Time // the database's clock, as the events'
	killWall        time.Time // this process's, as the emulator's
	launched        time.Duration
	printed         map[string]int // job → lines its task had printed by the kill
	resumed         map[string]time.Duration
	caughtUp        map[string]time.Duration
	samples         []stormSample
}

// stormSample is the emulator's call counters at one moment.
type stormSample struct {
	at               time.Time
	calls, throttled map[string]int
}

func (r *stormBench) setUp() {
	b, cfg := r.b, r.cfg
	r.startContext(cfg.timeout)
	capacity := cfg.jobs + 10
	maxConns := benchMaxConns(2, capacity)
	dbURL := startBenchCluster(b, maxConns)
	opts := emulator.HostileOptions() // rate limits on, at the default figures
	opts.InfraStopRate = 0            // a relaunch is not what this measures
	opts.StopTimeout = 2 * time.Second
	opts.Seed = cfg.seed
	r.em = emulator.New(opts)
	emURL, err := r.em.Start("127.0.0.1:0")
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.em.Close() })
	r.h = newECSBenchHarness(b, dbURL, benchTimings(capacity), emURL, ecsBenchConfig{interval: time.Second})
	b.Logf("ECS resume storm: %d jobs on the victim, capacity %d per agent, api_rates: plugin defaults %v; emulator hostile (no infrastructure stops), seed %d; PostgreSQL max_connections %d",
		cfg.jobs, capacity, ecs.DefaultAPIRates, cfg.seed, maxConns)
}

func (r *stormBench) run() {
	b, ctx, cfg := r.b, r.ctx, r.cfg
	r.victim = r.h.startAgent(ctx, "storm-victim")
	start := time.Now()
	for range cfg.jobs {
		r.ids = append(r.ids, r.h.submitSynthetic(ctx, stormLines))
	}
	r.waitAllFollowed(start.Add(cfg.timeout))
	r.launched = time.Since(start)
	fmt.Fprintf(os.Stderr, "ecs storm: %d jobs running with their task ARN checkpointed after %s\n", cfg.jobs, r.launched.Round(time.Second))
	r.rescuer = r.h.startAgent(ctx, "storm-rescuer")
	r.agents = append(r.agents, r.rescuer)

	r.startClock()
	r.killedAt, r.killWall = r.h.dbNow(ctx), time.Now()
	r.h.kill9(r.victim)
	r.printed = map[string]int{}
	for _, t := range r.em.Tasks() {
		if !t.StartedAt.IsZero() {
			r.printed[t.StartedBy] = min(stormLines, int(r.killWall.Sub(t.StartedAt)/time.Second)+1)
		}
	}
	r.em.ResetCalls()
	r.sample()
	r.resumed, r.caughtUp = map[string]time.Duration{}, map[string]time.Duration{}
	deadline := time.Now().Add(cfg.timeout)
	last := time.Now()
	for (len(r.resumed) < len(r.ids) || len(r.caughtUp) < len(r.ids)) && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, time.Second)
		r.sample()
		r.look()
		if time.Since(last) >= 30*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "ecs storm: %s after the kill: %d/%d resumed, %d/%d caught up\n",
				time.Since(r.killWall).Round(time.Second), len(r.resumed), len(r.ids), len(r.caughtUp), len(r.ids))
		}
	}
	r.timeout = len(r.caughtUp) < len(r.ids)
	b.StopTimer()
	r.ended = time.Now()
	r.finish("ecs storm")
}

// waitAllFollowed waits until every job runs with its task's ARN in its
// handle: the victim follows them all.
func (r *stormBench) waitAllFollowed(deadline time.Time) {
	for {
		var n int
		require.NoError(r.b, r.h.pool.QueryRow(r.ctx, `SELECT count(*) FROM active_jobs a JOIN jobs j ON j.id = a.job_id
			WHERE a.job_id = ANY($1) AND j.status = 'running' AND position('"id":"'::bytea in a.handle) > 0`, r.ids).Scan(&n))
		if n == len(r.ids) {
			return
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			r.b.Fatalf("%d of %d jobs running with a task ARN in their handle", n, len(r.ids))
		}
		sleep(r.ctx, time.Second)
	}
}

func (r *stormBench) sample() {
	calls, throttled := r.em.Calls()
	r.samples = append(r.samples, stormSample{at: time.Now(), calls: calls, throttled: throttled})
}

// look records, for the jobs not done yet, their first resumed event and
// when their stored stdout's last line reached what the task had printed
// by the kill.
func (r *stormBench) look() {
	ctx := r.ctx
	rows, err := r.h.pool.Query(ctx, `SELECT job_id, min(at) FROM job_timeline WHERE job_id = ANY($1) AND kind = 'resumed' GROUP BY job_id`, r.ids)
	require.NoError(r.b, err)
	for rows.Next() {
		var id string
		var at time.Time
		require.NoError(r.b, rows.Scan(&id, &at))
		if _, ok := r.resumed[id]; !ok {
			r.resumed[id] = at.Sub(r.killedAt)
		}
	}
	require.NoError(r.b, rows.Err())
	rows, err = r.h.pool.Query(ctx, `SELECT DISTINCT ON (job_id) job_id, data FROM job_logs
		WHERE job_id = ANY($1) AND stream = 'stdout' ORDER BY job_id, id DESC`, r.ids)
	require.NoError(r.b, err)
	defer rows.Close()
	now := time.Since(r.killWall)
	for rows.Next() {
		var id string
		var data []byte
		require.NoError(r.b, rows.Scan(&id, &data))
		if _, done := r.caughtUp[id]; done {
			continue
		}
		if lastLineNumber(data) >= r.printed[ecs.StartedBy(id, 0)] {
			r.caughtUp[id] = now
		}
	}
	require.NoError(r.b, rows.Err())
}

// lastLineNumber is n of the last "line <n> of <N> task <id>" in data, or 0.
func lastLineNumber(data []byte) int {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var n, of int
	var task string
	if _, err := fmt.Sscanf(lines[len(lines)-1], "line %d of %d task %s", &n, &of, &task); err != nil {
		return 0
	}
	return n
}

func (r *stormBench) check() {
	b, ctx := r.b, r.ctx
	var resumed, caught []time.Duration
	var byRescuer, launchedTwice []string
	for _, id := range r.ids {
		if d, ok := r.resumed[id]; ok {
			resumed = append(resumed, d)
		}
		if d, ok := r.caughtUp[id]; ok {
			caught = append(caught, d)
		}
		if n := r.em.Launches(ecs.StartedBy(id, 0)); n != 1 {
			launchedTwice = append(launchedTwice, fmt.Sprintf("job %s: %d launches", id, n))
		}
	}
	for _, id := range r.ids[:min(20, len(r.ids))] {
		for _, e := range r.h.events(ctx, id) {
			if e.Kind == "resumed" && e.Generation != r.rescuer.gen {
				byRescuer = append(byRescuer, fmt.Sprintf("job %s resumed by generation %s, not the rescuer's", id, e.Generation))
			}
		}
	}
	storm := r.ended.Sub(r.killWall)
	var rep strings.Builder
	fmt.Fprintf(&rep, "\n==== ECS resume storm: %d jobs, kill -9 of their agent, one idle agent ====\n", len(r.ids))
	fmt.Fprintf(&rep, "launch: %d jobs running with their task ARN checkpointed %s after the first submit (RunTask at the plugin's %g/s)\n",
		len(r.ids), r.launched.Round(time.Second), ecs.DefaultAPIRates["run_task"])
	fmt.Fprintf(&rep, "kill → resumed by the rescuer: %d/%d jobs, %s\n", len(resumed), len(r.ids), benchPcts(resumed))
	fmt.Fprintf(&rep, "kill → stdout caught up with every line printed by the kill: %d/%d jobs, %s\n", len(caught), len(r.ids), benchPcts(caught))
	fmt.Fprintf(&rep, "storm (kill → last job caught up or the timeout): %s\n", storm.Round(time.Second))
	peaks := r.peaks(10 * time.Second)
	limits := emulator.EffectiveRateLimits(nil)
	calls, throttled := r.em.Calls()
	fmt.Fprintf(&rep, "AWS calls from the kill, per action: calls, calls/s over the storm, busiest 10 s, throttled, the emulator's account limit\n")
	for _, op := range slices.Sorted(maps.Keys(calls)) {
		fmt.Fprintf(&rep, "  %-24s %6d %7.2f/s %7.2f/s %5d  %s\n", op, calls[op], float64(calls[op])/storm.Seconds(), peaks[op], throttled[op], limits[op])
	}
	r.arithmetic(&rep, caught)
	fmt.Print(rep.String())
	b.ReportMetric(benchPct(resumed, 1).Seconds(), "resumed-max-s")
	b.ReportMetric(benchPct(caught, 0.99).Seconds(), "caught-up-p99-s")
	b.ReportMetric(benchPct(caught, 1).Seconds(), "caught-up-max-s")

	if len(resumed) < len(r.ids) || len(caught) < len(r.ids) {
		b.Errorf("%d/%d jobs resumed, %d/%d caught up within %s", len(resumed), len(r.ids), len(caught), len(r.ids), r.cfg.timeout)
	}
	if len(launchedTwice) > 0 {
		b.Errorf("jobs launched again in the storm:\n%s", strings.Join(benchFirstN(launchedTwice, 10), "\n"))
	}
	if len(byRescuer) > 0 {
		b.Errorf("%s", strings.Join(byRescuer, "\n"))
	}
	// Calls the emulator received, throttled ones included: a client that
	// keeps to its budgets never sends more than the bucket lets through.
	for op, p := range peaks {
		l, ok := limits[op]
		if !ok {
			continue
		}
		if burst := cmp.Or(l.Burst, max(1, l.Rate)); p > l.Rate+burst/10 {
			b.Errorf("%s at %.2f/s over the busiest 10 s: above the account's %s", op, p, l)
		}
	}
}

// peaks is each action's highest calls/s over any window of at least w
// between samples.
func (r *stormBench) peaks(w time.Duration) map[string]float64 {
	out := map[string]float64{}
	j := 0
	for i := range r.samples {
		for j < len(r.samples) && r.samples[j].at.Sub(r.samples[i].at) < w {
			j++
		}
		if j == len(r.samples) {
			break
		}
		d := r.samples[j].at.Sub(r.samples[i].at).Seconds()
		for op, n := range r.samples[j].calls {
			out[op] = max(out[op], float64(n-r.samples[i].calls[op])/d)
		}
	}
	return out
}

// arithmetic says what bounds the storm and what 1,000 jobs would take.
// Catching up needs at least one GetLogEvents per job (a read returns up
// to 10,000 lines), and the rescuer reads at most get_log_events a second;
// resuming needs the claims and a DescribeTasks round (100 tasks a call).
func (r *stormBench) arithmetic(w *strings.Builder, caught []time.Duration) {
	logRate := ecs.DefaultAPIRates["get_log_events"]
	descRate := ecs.DefaultAPIRates["describe_tasks"]
	n := float64(len(r.ids))
	fmt.Fprintf(w, "bound: catching up needs ≥ 1 GetLogEvents per job at the rescuer's %g/s: ≥ %.0f s for %d jobs (measured max %s); one DescribeTasks round is ⌈%d/100⌉ = %.0f calls at %g/s\n",
		logRate, n/logRate, len(r.ids), benchPct(caught, 1).Round(time.Second), len(r.ids), float64((len(r.ids)+99)/100), descRate)
	if len(r.ids) < 1000 {
		fmt.Fprintf(w, "for 1,000 jobs: ≥ %.0f s of GetLogEvents (1,000 / %g/s), 10 DescribeTasks per round (2.5 s at %g/s), and the victim's launch at %g RunTask/s takes %.0f s\n",
			1000/logRate, logRate, descRate, ecs.DefaultAPIRates["run_task"], 1000/ecs.DefaultAPIRates["run_task"])
	}
}
