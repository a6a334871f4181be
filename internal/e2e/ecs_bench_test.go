package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/migrate"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// BenchmarkECS1000 runs 1,000 ECS jobs at once on 2 agents against the
// hostile emulator (in this process) with its account-wide rate limits on,
// and checks what a user of the plugin at that scale relies on:
//
//   - every job succeeds;
//   - each job's task was launched once, plus one relaunch per
//     infrastructure stop its result reports (the hostile profile stops
//     about 2% of tasks as Spot or host loss);
//   - each job's stdout holds every line of its final task exactly once, in
//     order; lines of its earlier, infrastructure-stopped tasks may be there
//     (counted apart), nothing else, nothing twice;
//   - DescribeTasks and GetLogEvents stay under the emulator's account
//     limits (20/s and 10/s), over the run and over any 10 s window.
//
// It prints the call rates (and throttled calls), task stop → job terminal
// latency (the emulator's stoppedAt against the job's finished_at, both this
// machine's wall clock), and the agents' and their plugins' RSS and CPU.
// Synthetic tasks (image tether.local/synthetic) run no process: each prints
// "line <n> of <N> task <id>" once a SYNTH_INTERVAL, N from 60 to 120 spread
// by job index, so a task lasts 60–120 s.
//
//	make bench-ecs
//	go test -run '^$' -bench '^BenchmarkECS1000$' -benchtime 1x -timeout 30m ./internal/e2e/
//
// Sizes come from the environment (defaults in brackets):
// TETHER_BENCH_ECS_JOBS [1000], TETHER_BENCH_ECS_AGENTS [2],
// TETHER_BENCH_ECS_CAPACITY [600 per agent], TETHER_BENCH_ECS_LINES [60-120],
// TETHER_BENCH_ECS_INTERVAL [1s], TETHER_BENCH_ECS_POLL [the plugin's
// poll_interval default, 6s], TETHER_BENCH_ECS_DRAIN_TIMEOUT [the plugin's
// log_drain_timeout default, 5m], TETHER_BENCH_ECS_TIMEOUT [20m],
// TETHER_BENCH_ECS_SEED [from the clock; printed].
func BenchmarkECS1000(b *testing.B) {
	if b.N > 1 {
		b.Fatalf("BenchmarkECS1000 is one long run: use -benchtime 1x (b.N = %d)", b.N)
	}
	b.StopTimer()
	cfg := ecsBenchFromEnv(b)
	r := &ecsBench{b: b, cfg: cfg}
	r.setUp()
	r.run()
	r.check()
}

// ecsBenchConfig holds the benchmark's sizes.
type ecsBenchConfig struct {
	jobs, agents, capacity int
	minLines, maxLines     int
	interval               time.Duration
	poll                   string // plugin poll_interval; "" = its default
	drainTimeout           string // plugin log_drain_timeout; "" = its default (5m)
	timeout                time.Duration
	seed                   int64
}

func ecsBenchFromEnv(b *testing.B) ecsBenchConfig {
	c := ecsBenchConfig{jobs: 1000, agents: 2, capacity: 600, minLines: 60, maxLines: 120,
		interval: time.Second, timeout: 20 * time.Minute, seed: time.Now().UnixNano() % 1_000_000}
	atoi := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				b.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*dst = n
		}
	}
	dur := func(name string, dst *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				b.Fatalf("%s=%q: want a positive Go duration", name, v)
			}
			*dst = d
		}
	}
	atoi("TETHER_BENCH_ECS_JOBS", &c.jobs)
	atoi("TETHER_BENCH_ECS_AGENTS", &c.agents)
	atoi("TETHER_BENCH_ECS_CAPACITY", &c.capacity)
	dur("TETHER_BENCH_ECS_INTERVAL", &c.interval)
	dur("TETHER_BENCH_ECS_TIMEOUT", &c.timeout)
	if v := os.Getenv("TETHER_BENCH_ECS_LINES"); v != "" {
		lo, hi, _ := strings.Cut(v, "-")
		if hi == "" {
			hi = lo
		}
		var err1, err2 error
		c.minLines, err1 = strconv.Atoi(lo)
		c.maxLines, err2 = strconv.Atoi(hi)
		if err1 != nil || err2 != nil || c.minLines < 1 || c.maxLines < c.minLines {
			b.Fatalf("TETHER_BENCH_ECS_LINES=%q: want <min>-<max>, e.g. 60-120", v)
		}
	}
	if v := os.Getenv("TETHER_BENCH_ECS_POLL"); v != "" {
		if _, err := time.ParseDuration(v); err != nil {
			b.Fatalf("TETHER_BENCH_ECS_POLL=%q: want a Go duration", v)
		}
		c.poll = v
	}
	if v := os.Getenv("TETHER_BENCH_ECS_DRAIN_TIMEOUT"); v != "" {
		if _, err := time.ParseDuration(v); err != nil {
			b.Fatalf("TETHER_BENCH_ECS_DRAIN_TIMEOUT=%q: want a Go duration", v)
		}
		c.drainTimeout = v
	}
	if v := os.Getenv("TETHER_BENCH_ECS_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n == 0 {
			b.Fatalf("TETHER_BENCH_ECS_SEED=%q: want a non-zero integer", v)
		}
		c.seed = n
	}
	return c
}

// lines is how many lines job i's task prints: spread over [min, max] by a
// stride coprime with most widths, so neighbours differ.
func (c ecsBenchConfig) lines(i int) int {
	w := c.maxLines - c.minLines + 1
	return c.minLines + (i*37)%w
}

// The emulator's account limits the run is checked against (its defaults).
const (
	benchDescribeLimit = 20.0
	benchLogsLimit     = 10.0
)

type ecsBench struct {
	b   *testing.B
	cfg ecsBenchConfig
	ctx context.Context

	em     *emulator.Emulator
	h      *harness
	agents []*agentProc

	ids     []string
	lines   map[string]int // job ID → lines its task prints
	began   time.Time      // just before the first submit
	ended   time.Time      // when the last job was seen terminal
	timeout bool           // some job never ended

	rec      *callRecorder
	samples  []callSample
	cpuStart machineCPU
	cpuEnd   machineCPU
	selfCPU0 time.Duration
	pgCPU0   time.Duration
	procs    []procFigures // agents and their plugins, at the end
}

// callSample is the run's state at one moment, for the rates and the timeline.
type callSample struct {
	at                time.Time
	describe, getLogs int
	stopped, ended    int // tasks STOPPED in the emulator; jobs terminal
	conns             int // connections to PostgreSQL
}

func (r *ecsBench) setUp() {
	b, cfg := r.b, r.cfg
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout+5*time.Minute)
	b.Cleanup(cancel)
	r.ctx = ctx

	// Each agent's pool grows to capacity + 8, its heartbeat pool to 2; the
	// harness and this benchmark hold a few more.
	maxConns := cfg.agents*(cfg.capacity+8+2) + 40
	dbURL := startBenchCluster(b, maxConns)

	opts := emulator.HostileOptions() // rate limits on, at the default figures
	opts.StopTimeout = 2 * time.Second
	opts.Seed = cfg.seed
	r.em = emulator.New(opts)
	b.Cleanup(func() { _ = r.em.Close() })
	// Served here, through a recorder of the DescribeTasks and GetLogEvents
	// calls, so the report can say where a job's time after its task's
	// stop goes.
	r.rec = &callRecorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	srv := &http.Server{Handler: r.rec.wrap(r.em.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	emURL := "http://" + ln.Addr().String()

	tm := timings{
		Capacity:      cfg.capacity,
		PollInterval:  time.Second,
		Keepalive:     2 * time.Second,
		StaleJob:      30 * time.Second,
		OfflineAfter:  6 * time.Second,
		CleanInterval: 5 * time.Second,
		AWOLTimeout:   120 * time.Second,
		KillGrace:     time.Second,
	}
	r.h = newECSBenchHarness(b, dbURL, tm, emURL, cfg)
	for i := range cfg.agents {
		r.agents = append(r.agents, r.h.startAgent(ctx, fmt.Sprintf("ecs-bench-%d", i+1)))
	}
	eff := emulator.EffectiveRateLimits(nil)
	b.Logf("ECS bench: %d jobs, %d agents × capacity %d, lines %d–%d every %s, poll_interval %s, log_settle 3s, log_drain_timeout %s, api_rates: plugin defaults (DescribeTasks %g/s, GetLogEvents %g/s per agent); emulator hostile, seed %d, limits DescribeTasks %s GetLogEvents %s; PostgreSQL max_connections %d",
		cfg.jobs, cfg.agents, cfg.capacity, cfg.minLines, cfg.maxLines, cfg.interval, benchOr(cfg.poll, "6s (default)"), benchOr(cfg.drainTimeout, "5m (default)"),
		ecs.DefaultAPIRates["describe_tasks"], ecs.DefaultAPIRates["get_log_events"], cfg.seed,
		eff["DescribeTasks"], eff["GetLogEvents"], maxConns)
}

func benchOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// startBenchCluster starts a PostgreSQL cluster of the benchmark's own with
// max_connections maxConns (the shared test cluster has 300) and returns
// the URL of a migrated database on it.
func startBenchCluster(b *testing.B, maxConns int) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, MaxConnections: maxConns})
	require.NoError(b, err)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			b.Errorf("stopping the benchmark's cluster: %v", err)
		}
	})
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(b, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE tether")
	_ = admin.Close(ctx)
	require.NoError(b, err)
	conn, err := pgx.Connect(ctx, c.URL("tether"))
	require.NoError(b, err)
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = migrate.Migrate(ctx, conn, nil)
	require.NoError(b, err)
	return c.URL("tether")
}

// newECSBenchHarness is newECSHarness with the benchmark's command "ecs":
// one synthetic awslogs container, the plugin's default poll_interval and
// api_rates, log_settle 3 s (above the emulator's 1.5 s log lag).
func newECSBenchHarness(b *testing.B, dbURL string, tm timings, emURL string, cfg ecsBenchConfig) *harness {
	b.Helper()
	env, err := json.Marshal(map[string]string{
		"AWS_ENDPOINT_URL":            emURL,
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_REGION":                  "us-east-1",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	})
	require.NoError(b, err)
	defaults := map[string]any{
		"log_settle": "3s",
		"task_definition_template": map[string]any{
			"family": "tether-bench",
			"containerDefinitions": []any{map[string]any{
				"name":        ecsContainer,
				"image":       emulator.SyntheticImage,
				"environment": []any{map[string]string{"name": "SYNTH_INTERVAL", "value": cfg.interval.String()}},
				"logConfiguration": map[string]any{
					"logDriver": "awslogs",
					"options": map[string]string{
						"awslogs-group":         "/tether/bench",
						"awslogs-stream-prefix": "job",
						"awslogs-region":        "us-east-1",
					},
				},
			}},
		},
	}
	if cfg.poll != "" {
		defaults["poll_interval"] = cfg.poll
	}
	if cfg.drainTimeout != "" {
		defaults["log_drain_timeout"] = cfg.drainTimeout
	}
	ctxJSON, err := json.Marshal(defaults)
	require.NoError(b, err)
	plugins := fmt.Sprintf("  ecs:\n    pass_env: [\"AWS_*\"]\n    env: %s\n    config: {cluster: default}\n", env)
	commands := fmt.Sprintf("  ecs:\n    plugin: ecs\n    context: %s\n", ctxJSON)
	return newHarnessWith(b, dbURL, tm, plugins, commands)
}

// run submits every job at once and waits for all of them to end.
func (r *ecsBench) run() {
	b, cfg, ctx := r.b, r.cfg, r.ctx
	r.lines = map[string]int{}
	contexts := make([]json.RawMessage, cfg.jobs)
	for i := range contexts {
		c, err := json.Marshal(map[string]any{"container_overrides": []any{map[string]any{
			"name": ecsContainer, "environment": map[string]string{"SYNTH_LINES": strconv.Itoa(cfg.lines(i))},
		}}})
		require.NoError(b, err)
		contexts[i] = c
	}
	r.em.ResetCalls()
	r.cpuStart = readMachineCPU()
	r.selfCPU0 = selfCPU()
	r.pgCPU0 = postgresCPU()
	r.began = time.Now()
	b.StartTimer()
	for i, c := range contexts {
		j, _, err := r.h.st.Submit(ctx, store.SubmitParams{Command: "ecs", Plugin: "ecs", Context: c, Submitter: "bench"})
		require.NoError(b, err)
		r.ids = append(r.ids, j.ID)
		r.lines[j.ID] = cfg.lines(i)
	}
	submitted := time.Since(r.began)
	r.sample(0)
	fmt.Fprintf(os.Stderr, "ecs bench: %d jobs submitted in %s\n", cfg.jobs, submitted.Round(time.Millisecond))

	deadline := r.began.Add(cfg.timeout)
	lastReport := time.Now()
	for {
		sleep(ctx, time.Second)
		counts := r.statusCounts()
		open, ended := 0, 0
		for k, n := range counts {
			if store.Terminal(k) {
				ended += n
			} else {
				open += n
			}
		}
		r.sample(ended)
		if open == 0 {
			break
		}
		if time.Since(lastReport) >= 30*time.Second {
			lastReport = time.Now()
			s := r.samples[len(r.samples)-1]
			fmt.Fprintf(os.Stderr, "ecs bench: %s: jobs %v; tasks stopped %d; DescribeTasks %d, GetLogEvents %d calls so far\n",
				time.Since(r.began).Round(time.Second), counts, s.stopped, s.describe, s.getLogs)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.timeout = true
			break
		}
	}
	b.StopTimer()
	r.ended = time.Now()
	r.cpuEnd = readMachineCPU()
	for _, a := range r.agents {
		r.procs = append(r.procs, procTree(a.cmd.Process.Pid, a.name)...)
	}
	fmt.Fprintf(os.Stderr, "ecs bench: done after %s\n", r.ended.Sub(r.began).Round(time.Second))
}

func (r *ecsBench) sample(ended int) {
	calls, _ := r.em.Calls()
	stopped := 0
	for _, t := range r.em.Tasks() {
		if t.LastStatus == "STOPPED" {
			stopped++
		}
	}
	var conns int
	_ = r.h.pool.QueryRow(r.ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&conns)
	r.samples = append(r.samples, callSample{at: time.Now(), describe: calls["DescribeTasks"], getLogs: calls["GetLogEvents"],
		stopped: stopped, ended: ended, conns: conns})
}

func (r *ecsBench) statusCounts() map[string]int {
	rows, err := r.h.pool.Query(r.ctx, `SELECT status, count(*) FROM jobs WHERE id = ANY($1) GROUP BY status`, r.ids)
	require.NoError(r.b, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(r.b, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(r.b, rows.Err())
	return out
}

// check reads every job, the emulator's tasks and counters, and reports.
func (r *ecsBench) check() {
	b, ctx := r.b, r.ctx
	elapsed := r.ended.Sub(r.began)

	// The emulator's tasks by startedBy, launch order.
	byStartedBy := map[string][]emulator.TaskInfo{}
	var firstLaunch, lastLaunch, lastFirstLaunch time.Time
	infraStops := 0
	for _, t := range r.em.Tasks() {
		if len(byStartedBy[t.StartedBy]) == 0 && t.CreatedAt.After(lastFirstLaunch) {
			lastFirstLaunch = t.CreatedAt
		}
		byStartedBy[t.StartedBy] = append(byStartedBy[t.StartedBy], t)
		if firstLaunch.IsZero() || t.CreatedAt.Before(firstLaunch) {
			firstLaunch = t.CreatedAt
		}
		if t.CreatedAt.After(lastLaunch) {
			lastLaunch = t.CreatedAt
		}
		switch t.StopCode {
		case "SpotInterruption", "TerminationNotice", "InfrastructureHealth":
			infraStops++
		}
	}

	var (
		succeeded, failed, open  int
		failures, lineProblems   []string
		launchProblems           []string
		relaunches, earlierLines int
		lost, dup, foreign       int
		latencies                []time.Duration
		firstEnd, lastEnd        time.Time
		ph                       drainPhases
		notes                    = stderrNotes{}
	)
	for _, id := range r.ids {
		j := r.h.job(ctx, id)
		if !store.Terminal(j.Status) {
			open++
			if open <= 10 {
				failures = append(failures, r.describeJob(id, j))
			}
			continue
		}
		if j.FinishedAt != nil {
			if firstEnd.IsZero() || j.FinishedAt.Before(firstEnd) {
				firstEnd = *j.FinishedAt
			}
			if j.FinishedAt.After(lastEnd) {
				lastEnd = *j.FinishedAt
			}
		}
		if j.Status != store.StatusSucceeded {
			failed++
			if failed <= 10 {
				failures = append(failures, r.describeJob(id, j))
			}
			continue
		}
		succeeded++
		var out ecs.Output
		if err := json.Unmarshal(j.Result, &out); err != nil || len(out.Tasks) != 1 {
			failures = append(failures, fmt.Sprintf("job %s: result %s: want one task (%v)", id, j.Result, err))
			continue
		}
		final := out.Tasks[0]
		relaunches += final.Relaunch
		sb := ecs.StartedBy(id, 0)
		tasks := byStartedBy[sb]
		if n := r.em.Launches(sb); n != 1+final.Relaunch || n != len(tasks) {
			launchProblems = append(launchProblems, fmt.Sprintf("job %s: %d launches (%d tasks in the emulator), result says %d infrastructure relaunches",
				id, n, len(tasks), final.Relaunch))
		}
		finalID := final.TaskARN[strings.LastIndex(final.TaskARN, "/")+1:]
		earlier := map[string]bool{}
		for _, t := range tasks {
			if t.ID != finalID {
				earlier[t.ID] = true
			}
		}
		notes.add(id, r.stream(id, "stderr"))
		lc := checkSynthLines(r.h.stdout(ctx, id), finalID, r.lines[id], earlier)
		lost += lc.lost
		dup += lc.dup
		foreign += lc.foreign
		earlierLines += lc.earlier
		if lc.lost+lc.dup+lc.foreign+lc.disorder > 0 {
			lineProblems = append(lineProblems, fmt.Sprintf("job %s (task %s, %d lines, %d earlier tasks): %s", id, finalID, r.lines[id], len(earlier), lc))
		}
		if ti, ok := r.em.Task(final.TaskARN); ok && !ti.StoppedAt.IsZero() && j.FinishedAt != nil {
			latencies = append(latencies, j.FinishedAt.Sub(ti.StoppedAt))
			ph.add(r.rec, ti, "job/"+ecsContainer+"/"+finalID, *j.FinishedAt)
			for id := range earlier {
				ph.earlierReads += len(r.rec.readsOf("job/" + ecsContainer + "/" + id))
			}
		} else {
			failures = append(failures, fmt.Sprintf("job %s: final task %s unknown to the emulator or not stopped (%+v)", id, final.TaskARN, ti))
		}
	}

	// Rates over the run, and the busiest 10 s.
	calls, throttled := r.em.Calls()
	secs := elapsed.Seconds()
	descRate := float64(calls["DescribeTasks"]) / secs
	logRate := float64(calls["GetLogEvents"]) / secs
	descPeak, logPeak := peakRates(r.samples, 10*time.Second)

	p50, p99, pmax := benchPct(latencies, 0.50), benchPct(latencies, 0.99), benchPct(latencies, 1)
	cpu := r.cpuEnd.sub(r.cpuStart)
	selfCPU := selfCPU() - r.selfCPU0
	pgCPU := postgresCPU() - r.pgCPU0

	var rep strings.Builder
	fmt.Fprintf(&rep, "\n==== ECS at %d jobs, %d agents ====\n", r.cfg.jobs, r.cfg.agents)
	peakConns := 0
	for _, c := range r.samples {
		peakConns = max(peakConns, c.conns)
	}
	fmt.Fprintf(&rep, "elapsed (submit → last job terminal): %s; launches from %s to %s after submit (each job's first: until %s); job ends from %s to %s\n",
		elapsed.Round(time.Second), benchSince(r.began, firstLaunch), benchSince(r.began, lastLaunch), benchSince(r.began, lastFirstLaunch), benchSince(r.began, firstEnd), benchSince(r.began, lastEnd))
	fmt.Fprintf(&rep, "PostgreSQL client connections: at most %d seen (samples every second)\n", peakConns)
	fmt.Fprintf(&rep, "jobs: %d succeeded, %d failed, %d not terminal (of %d)\n", succeeded, failed, open, len(r.ids))
	fmt.Fprintf(&rep, "jobs ended per agent: %s\n", r.endsPerAgent())
	fmt.Fprintf(&rep, "tasks launched: %d; infrastructure stops: %d; infrastructure relaunches in results: %d; launch count mismatches: %d\n",
		len(r.em.Tasks()), infraStops, relaunches, len(launchProblems))
	fmt.Fprintf(&rep, "log lines: lost %d, duplicated %d, foreign %d, jobs with problems %d; lines of earlier (infrastructure-stopped) tasks copied: %d\n",
		lost, dup, foreign, len(lineProblems), earlierLines)
	fmt.Fprintf(&rep, "DescribeTasks: %d calls, %.2f/s over the run, busiest 10 s %.2f/s, throttled %d (account limit %.0f/s)\n",
		calls["DescribeTasks"], descRate, descPeak, throttled["DescribeTasks"], benchDescribeLimit)
	fmt.Fprintf(&rep, "GetLogEvents: %d calls, %.2f/s over the run, busiest 10 s %.2f/s, throttled %d (account limit %.0f/s)\n",
		calls["GetLogEvents"], logRate, logPeak, throttled["GetLogEvents"], benchLogsLimit)
	fmt.Fprintf(&rep, "other calls: %s\n", otherCalls(calls, throttled))
	notes.report(&rep)
	fmt.Fprintf(&rep, "task stop → job terminal: p50 %s, p99 %s, max %s (%d jobs)\n",
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), pmax.Round(time.Millisecond), len(latencies))
	ph.report(&rep, calls["GetLogEvents"])
	benchTimeline(&rep, r.samples, r.began, 30*time.Second)
	var aggRSS, aggHWM int64
	var aggCPU time.Duration
	byKind := map[string]*procFigures{}
	for _, p := range r.procs {
		fmt.Fprintf(&rep, "process %-12s %-24s pid %-7d RSS %6.1f MiB, peak %6.1f MiB, CPU %7.1f s (%.0f%% of a core)\n",
			p.agent, p.comm, p.pid, benchMiB(p.rssKB), benchMiB(p.hwmKB), p.cpu.Seconds(), 100*p.cpu.Seconds()/secs)
		aggRSS += p.rssKB
		aggHWM += p.hwmKB
		aggCPU += p.cpu
		k := byKind[p.comm]
		if k == nil {
			k = &procFigures{comm: p.comm}
			byKind[p.comm] = k
		}
		k.pid++ // a count here
		k.rssKB, k.hwmKB, k.cpu = k.rssKB+p.rssKB, k.hwmKB+p.hwmKB, k.cpu+p.cpu
	}
	for _, name := range slices.Sorted(maps.Keys(byKind)) {
		k := byKind[name]
		fmt.Fprintf(&rep, "  %d × %-24s RSS %6.1f MiB, sum of peaks %6.1f MiB, CPU %7.1f s\n", k.pid, name, benchMiB(k.rssKB), benchMiB(k.hwmKB), k.cpu.Seconds())
	}
	fmt.Fprintf(&rep, "agents + plugins: RSS %.1f MiB, sum of peaks %.1f MiB, CPU %.1f s (%.0f%% of a core over the run)\n",
		benchMiB(aggRSS), benchMiB(aggHWM), aggCPU.Seconds(), 100*aggCPU.Seconds()/secs)
	if k := byKind["tether"]; k != nil {
		b.ReportMetric(benchMiB(k.hwmKB)/float64(k.pid), "agent-peak-MiB")
		b.ReportMetric(k.cpu.Seconds()/float64(k.pid), "agent-cpu-s")
	}
	if k := byKind["tether-plugin-ecs"]; k != nil {
		b.ReportMetric(benchMiB(k.hwmKB)/float64(k.pid), "ecs-plugin-peak-MiB")
		b.ReportMetric(k.cpu.Seconds()/float64(k.pid), "ecs-plugin-cpu-s")
	}
	fmt.Fprintf(&rep, "this process (emulator + checker): CPU %.1f s; PostgreSQL: CPU %.1f s; machine: %d CPUs %.0f%% busy during the run\n",
		selfCPU.Seconds(), pgCPU.Seconds(), cpu.cpus, 100*cpu.busyFraction())
	// To stdout: the testing package keeps only 10 lines of a benchmark's log.
	fmt.Print(rep.String())
	b.Logf("%d/%d jobs succeeded in %s; lines lost %d, duplicated %d; DescribeTasks %.2f/s, GetLogEvents %.2f/s; stop → terminal p50 %s p99 %s (full report above)",
		succeeded, len(r.ids), elapsed.Round(time.Second), lost, dup, descRate, logRate, p50.Round(time.Millisecond), p99.Round(time.Millisecond))

	b.ReportMetric(elapsed.Seconds(), "elapsed-s")
	b.ReportMetric(float64(succeeded), "succeeded")
	b.ReportMetric(float64(relaunches), "infra-relaunches")
	b.ReportMetric(float64(lost), "lines-lost")
	b.ReportMetric(float64(dup), "lines-dup")
	b.ReportMetric(descRate, "describe/s")
	b.ReportMetric(logRate, "getlogs/s")
	b.ReportMetric(float64(throttled["DescribeTasks"]+throttled["GetLogEvents"]), "throttled")
	b.ReportMetric(p50.Seconds(), "stop-to-end-p50-s")
	b.ReportMetric(p99.Seconds(), "stop-to-end-p99-s")

	// The musts.
	if r.timeout {
		b.Errorf("%d of %d jobs not terminal after %s", open, len(r.ids), r.cfg.timeout)
	}
	if succeeded != len(r.ids) {
		b.Errorf("%d of %d jobs succeeded (%d failed, %d open); first ones:\n%s", succeeded, len(r.ids), failed, open, strings.Join(failures, "\n"))
	} else if len(failures) > 0 {
		b.Errorf("%d problems:\n%s", len(failures), strings.Join(benchFirstN(failures, 10), "\n"))
	}
	if len(launchProblems) > 0 {
		b.Errorf("%d jobs with launches ≠ 1 + infrastructure relaunches:\n%s", len(launchProblems), strings.Join(benchFirstN(launchProblems, 10), "\n"))
	}
	if len(lineProblems) > 0 {
		b.Errorf("%d jobs with lost, duplicated, foreign or disordered lines:\n%s", len(lineProblems), strings.Join(benchFirstN(lineProblems, 10), "\n"))
	}
	if descRate >= benchDescribeLimit || descPeak >= benchDescribeLimit {
		b.Errorf("DescribeTasks at %.2f/s over the run, %.2f/s at peak: not under the account limit %.0f/s", descRate, descPeak, benchDescribeLimit)
	}
	if logRate >= benchLogsLimit || logPeak >= benchLogsLimit {
		b.Errorf("GetLogEvents at %.2f/s over the run, %.2f/s at peak: not under the account limit %.0f/s", logRate, logPeak, benchLogsLimit)
	}
	// On failure the harness's cleanup logs the end of each agent's output.
}

// endsPerAgent says which agent wrote each job's final event: the claim
// split, which decides the run's length (each agent has its own budgets).
func (r *ecsBench) endsPerAgent() string {
	rows, err := r.h.pool.Query(r.ctx, `SELECT coalesce(agent, '-'), count(*) FROM job_events
		WHERE job_id = ANY($1) AND kind IN ('succeeded', 'failed', 'canceled') GROUP BY 1 ORDER BY 1`, r.ids)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var agent string
		var n int
		if err := rows.Scan(&agent, &n); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("%s %d", agent, n))
	}
	return strings.Join(parts, ", ")
}

// stderrNotes counts what the plugin told succeeded jobs on stderr, by
// kind of line (plugins/ecs/ecs: launch.go, logs.go, run.go), with an
// example job of each.
type stderrNotes map[string]*stderrNote

type stderrNote struct {
	jobs, lines int
	example     string
}

var stderrKinds = []struct{ kind, substr string }{
	{"drain gave up (\"its last lines may be missing\")", "its last lines may be missing"},
	{"log read error", ": reading log stream "},
	{"no log stream", ": no log stream "},
	{"launch refused, tried again", "; trying again in "},
	{"infrastructure stop, relaunched", "was stopped by the infrastructure ("},
	{"log position expired", "the log position in "},
}

func (n stderrNotes) add(jobID, stderr string) {
	for _, k := range stderrKinds {
		c := strings.Count(stderr, k.substr)
		if c == 0 {
			continue
		}
		e := n[k.kind]
		if e == nil {
			e = &stderrNote{}
			n[k.kind] = e
		}
		e.jobs++
		e.lines += c
		if e.example == "" {
			for _, line := range strings.Split(stderr, "\n") {
				if strings.Contains(line, k.substr) {
					e.example = "job " + jobID + ": " + line
					break
				}
			}
		}
	}
}

func (n stderrNotes) report(w io.Writer) {
	fmt.Fprintf(w, "plugin notes on succeeded jobs' stderr:")
	if len(n) == 0 {
		fmt.Fprintf(w, " none of the kinds counted\n")
		return
	}
	fmt.Fprintln(w)
	for _, k := range stderrKinds {
		if e := n[k.kind]; e != nil {
			fmt.Fprintf(w, "  %-40s %4d jobs, %4d lines; e.g. %s\n", k.kind, e.jobs, e.lines, benchTruncate(e.example, 300))
		}
	}
}

func benchTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// callRecorder keeps, for the report, when each task was described and
// each log stream read: the request bodies of DescribeTasks and
// GetLogEvents and their answers' status.
type callRecorder struct {
	mu        sync.Mutex
	described map[string][]time.Time // task ID → successful DescribeTasks naming it
	reads     map[string][]logRead   // stream → GetLogEvents calls
}

type logRead struct {
	at     time.Time
	status int
	events int
}

func (c *callRecorder) wrap(next http.Handler) http.Handler {
	c.described, c.reads = map[string][]time.Time{}, map[string][]logRead{}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		target := req.Header.Get("X-Amz-Target")
		op := target[strings.LastIndexByte(target, '.')+1:]
		if op != "DescribeTasks" && op != "GetLogEvents" {
			next.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		at := time.Now()
		rw := &recordingWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rw, req)
		var in struct {
			Tasks         []string `json:"tasks"`
			LogStreamName string   `json:"logStreamName"`
		}
		_ = json.Unmarshal(body, &in)
		c.mu.Lock()
		defer c.mu.Unlock()
		if op == "DescribeTasks" {
			if rw.status == http.StatusOK {
				for _, t := range in.Tasks {
					id := t[strings.LastIndexByte(t, '/')+1:]
					c.described[id] = append(c.described[id], at)
				}
			}
			return
		}
		var out struct {
			Events []json.RawMessage `json:"events"`
		}
		_ = json.Unmarshal(rw.body.Bytes(), &out)
		c.reads[in.LogStreamName] = append(c.reads[in.LogStreamName], logRead{at: at, status: rw.status, events: len(out.Events)})
	})
}

func (c *callRecorder) readsOf(stream string) []logRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reads[stream])
}

// seenStopped is the first successful DescribeTasks naming arn that came
// after t (the task's stop): when the poller learnt of it.
func (c *callRecorder) seenStopped(arn string, t time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range c.described[arn[strings.LastIndexByte(arn, '/')+1:]] {
		if !at.Before(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

type recordingWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

// drainPhases splits each job's task stop → job terminal time at the calls the
// recorder saw: the stop is seen by the first DescribeTasks after it; its
// log drain starts with the first read of its stream after that (no
// earlier than log_settle) and ends with the last; then the job's final
// write.
type drainPhases struct {
	stopToSeen, seenToDrain, drain, lastReadToEnd []time.Duration
	tails, drains                                 []int // reads of each final task's stream before and after the stop was seen
	failedReads, earlierReads, unseen             int
}

func (p *drainPhases) add(rec *callRecorder, t emulator.TaskInfo, stream string, end time.Time) {
	seen, ok := rec.seenStopped(t.ARN, t.StoppedAt)
	if !ok {
		p.unseen++
		return
	}
	var tails, drains int
	var first, last time.Time
	for _, rd := range rec.readsOf(stream) {
		if rd.status != http.StatusOK {
			p.failedReads++
		}
		if rd.at.Before(seen) {
			tails++
			continue
		}
		drains++
		if first.IsZero() {
			first = rd.at
		}
		last = rd.at
	}
	p.tails, p.drains = append(p.tails, tails), append(p.drains, drains)
	p.stopToSeen = append(p.stopToSeen, seen.Sub(t.StoppedAt))
	if first.IsZero() {
		return
	}
	p.seenToDrain = append(p.seenToDrain, first.Sub(seen))
	p.drain = append(p.drain, last.Sub(first))
	p.lastReadToEnd = append(p.lastReadToEnd, end.Sub(last))
}

func (p *drainPhases) report(w io.Writer, allReads int) {
	row := func(name string, ds []time.Duration) {
		fmt.Fprintf(w, "  %-38s p50 %8s  p99 %8s  max %8s\n", name,
			benchPct(ds, 0.5).Round(10*time.Millisecond), benchPct(ds, 0.99).Round(10*time.Millisecond), benchPct(ds, 1).Round(10*time.Millisecond))
	}
	fmt.Fprintf(w, "where that time goes (from the calls the emulator answered; %d final tasks never described after their stop):\n", p.unseen)
	row("stop → seen by DescribeTasks", p.stopToSeen)
	row("seen → first drain read (≥ log_settle)", p.seenToDrain)
	row("first → last drain read", p.drain)
	row("last read → job terminal", p.lastReadToEnd)
	sum := func(xs []int) (n int) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	hist := map[int]int{}
	for _, d := range p.drains {
		hist[min(d, 4)]++
	}
	fmt.Fprintf(w, "GetLogEvents: %d calls; on final tasks' streams %d before the stop was seen (tails) and %d after (drains: 0/1/2/3/4+ calls for %d/%d/%d/%d/%d tasks); %d on earlier tasks' streams; %d not answered 200\n",
		allReads, sum(p.tails), sum(p.drains), hist[0], hist[1], hist[2], hist[3], hist[4], p.earlierReads, p.failedReads)
}

// timeline prints the run every step: tasks stopped, jobs ended, the
// backlog between them, and the call rates.
func benchTimeline(w io.Writer, s []callSample, began time.Time, step time.Duration) {
	fmt.Fprintf(w, "timeline:   t  tasks stopped  jobs ended  stopped-not-ended  DescribeTasks/s  GetLogEvents/s  db conns\n")
	prev := callSample{at: began}
	for i, c := range s {
		if i != len(s)-1 && c.at.Sub(prev.at) < step {
			continue
		}
		d := c.at.Sub(prev.at).Seconds()
		fmt.Fprintf(w, "         %5.0fs %14d %11d %18d %16.2f %15.2f %9d\n", c.at.Sub(began).Seconds(), c.stopped, c.ended, c.stopped-c.ended,
			float64(c.describe-prev.describe)/d, float64(c.getLogs-prev.getLogs)/d, c.conns)
		prev = c
	}
}

// describeJob is one line on a job that did not succeed: its error, events
// and the end of its stderr.
func (r *ecsBench) describeJob(id string, j store.Job) string {
	stderr := r.stream(id, "stderr")
	if len(stderr) > 1500 {
		stderr = "…" + stderr[len(stderr)-1500:]
	}
	return fmt.Sprintf("job %s %s attempt %d error_class=%s error=%q\n  events: %s\n  stderr: %s",
		id, j.Status, j.Attempt, j.ErrorClass, j.Error, r.h.eventSummary(r.ctx, id), strings.ReplaceAll(strings.TrimSpace(stderr), "\n", "\n    "))
}

// stream is one of the job's stored output streams.
func (r *ecsBench) stream(id, name string) string {
	var sb strings.Builder
	var after int64
	for {
		chunks, err := r.h.st.Logs(r.ctx, id, name, after, 1000)
		if err != nil || len(chunks) == 0 {
			return sb.String()
		}
		for _, c := range chunks {
			sb.Write(c.Data)
			after = c.Seq
		}
	}
}

// lineCheck is what checkSynthLines found in one job's stdout.
type lineCheck struct {
	lost, dup, foreign, disorder int
	earlier                      int // lines of earlier tasks of the job, each once
	examples                     []string
}

func (c lineCheck) String() string {
	return fmt.Sprintf("lost %d, duplicated %d, foreign %d, out of order %d, earlier-task lines %d; e.g. %q",
		c.lost, c.dup, c.foreign, c.disorder, c.earlier, c.examples)
}

// checkSynthLines checks stdout against the synthetic task finalID's n
// lines ("line <k> of <n> task <id>"): each once, in order. Lines of the
// tasks in earlier are allowed once each, in their order; anything else is
// foreign.
func checkSynthLines(stdout, finalID string, n int, earlier map[string]bool) lineCheck {
	var c lineCheck
	note := func(s string) {
		if len(c.examples) < 3 {
			c.examples = append(c.examples, s)
		}
	}
	seen := map[string]map[int]bool{}
	last := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var k, of int
		var task string
		if _, err := fmt.Sscanf(line, "line %d of %d task %s", &k, &of, &task); err != nil || fmt.Sprintf("line %d of %d task %s", k, of, task) != line {
			c.foreign++
			note(line)
			continue
		}
		if task != finalID && !earlier[task] || task == finalID && (of != n || k < 1 || k > n) {
			c.foreign++
			note(line)
			continue
		}
		if seen[task] == nil {
			seen[task] = map[int]bool{}
		}
		if seen[task][k] {
			c.dup++
			note(line)
			continue
		}
		seen[task][k] = true
		if k < last[task] {
			c.disorder++
			note(line)
		}
		last[task] = k
		if task != finalID {
			c.earlier++
		}
	}
	c.lost = n - len(seen[finalID])
	if c.lost > 0 {
		for k := 1; k <= n; k++ {
			if !seen[finalID][k] { // the first missing line always shows
				c.examples = append([]string{fmt.Sprintf("missing: line %d of %d task %s", k, n, finalID)}, c.examples...)
				break
			}
		}
	}
	return c
}

// peakRates is the highest DescribeTasks and GetLogEvents rates over any
// window of at least w between samples.
func peakRates(s []callSample, w time.Duration) (describe, getLogs float64) {
	j := 0
	for i := range s {
		for j < len(s) && s[j].at.Sub(s[i].at) < w {
			j++
		}
		if j == len(s) {
			break
		}
		d := s[j].at.Sub(s[i].at).Seconds()
		describe = max(describe, float64(s[j].describe-s[i].describe)/d)
		getLogs = max(getLogs, float64(s[j].getLogs-s[i].getLogs)/d)
	}
	return describe, getLogs
}

func benchPct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func benchSince(t0, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(t0).Round(100 * time.Millisecond).String()
}

func benchFirstN(s []string, n int) []string { return s[:min(n, len(s))] }

func benchMiB(kb int64) float64 { return float64(kb) / 1024 }

func otherCalls(calls, throttled map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range calls {
			if k != "DescribeTasks" && k != "GetLogEvents" && !yield(k) {
				return
			}
		}
	}) {
		p := fmt.Sprintf("%s %d", k, calls[k])
		if t := throttled[k]; t > 0 {
			p += fmt.Sprintf(" (%d throttled)", t)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// procFigures are one process's memory and CPU from /proc.
type procFigures struct {
	agent, comm  string
	pid          int
	rssKB, hwmKB int64
	cpu          time.Duration // utime + stime
}

// benchClockTick is USER_HZ, 100 on every Linux this runs on.
const benchClockTick = 100

// procStatFields are the fields of /proc/<pid>/stat after the command name
// (the first is the state, the second the ppid).
func procStatFields(pid string) []string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func benchTicks(f []string, idx ...int) time.Duration {
	var n int64
	for _, i := range idx {
		if i < len(f) {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
	}
	return time.Duration(n) * time.Second / benchClockTick
}

// procTree reads the agent process pid and its direct children (its plugins).
func procTree(pid int, agent string) []procFigures {
	out := []procFigures{readProc(pid, agent)}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if f := procStatFields(e.Name()); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(e.Name())
			out = append(out, readProc(child, agent))
		}
	}
	return out
}

func readProc(pid int, agent string) procFigures {
	p := procFigures{agent: agent, pid: pid}
	f := procStatFields(strconv.Itoa(pid))
	p.cpu = benchTicks(f, 11, 12)
	// argv[0]'s base name: comm is cut at 15 bytes (tether-plugin-e…).
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		argv0, _, _ := strings.Cut(string(b), "\x00")
		p.comm = filepath.Base(argv0)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "VmRSS":
				p.rssKB = kb
			case "VmHWM":
				p.hwmKB = kb
			}
		}
	}
	return p
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration { return benchTicks(procStatFields("self"), 11, 12) }

// postgresCPU is the CPU time of the postgres servers this process started:
// each postmaster's own and its reaped children's, plus its live children's.
func postgresCPU() time.Duration {
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	stats := map[string][]string{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			if f := procStatFields(e.Name()); len(f) > 12 {
				stats[e.Name()] = f
			}
		}
	}
	var total time.Duration
	for pid, f := range stats {
		if f[1] != self {
			continue
		}
		if b, _ := os.ReadFile(filepath.Join("/proc", pid, "comm")); strings.TrimSpace(string(b)) != "postgres" {
			continue
		}
		total += benchTicks(f, 11, 12, 13, 14)
		for _, cf := range stats {
			if cf[1] == pid {
				total += benchTicks(cf, 11, 12)
			}
		}
	}
	return total
}

// machineCPU is the first line of /proc/stat.
type machineCPU struct {
	busy, total int64
	cpus        int
}

func readMachineCPU() machineCPU {
	var m machineCPU
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "cpu" {
			for i, v := range f[1:] {
				n, _ := strconv.ParseInt(v, 10, 64)
				if i >= 8 { // guest time is already in user
					break
				}
				m.total += n
				if i != 3 && i != 4 { // idle, iowait
					m.busy += n
				}
			}
		} else if strings.HasPrefix(f[0], "cpu") {
			m.cpus++
		}
	}
	return m
}

func (m machineCPU) sub(o machineCPU) machineCPU {
	return machineCPU{busy: m.busy - o.busy, total: m.total - o.total, cpus: m.cpus}
}

func (m machineCPU) busyFraction() float64 {
	if m.total <= 0 {
		return 0
	}
	return float64(m.busy) / float64(m.total)
}

// checkSynthLines itself: what counts as lost, duplicated, foreign and
// out of order (the benchmark's verdict rests on it).
func TestCheckSynthLines(t *testing.T) {
	l := func(k, n int, id string) string { return fmt.Sprintf("line %d of %d task %s\n", k, n, id) }
	ok := l(1, 3, "fin") + l(2, 3, "fin") + l(3, 3, "fin")
	require.Equal(t, lineCheck{}, stripExamples(checkSynthLines(ok, "fin", 3, nil)))

	// An earlier, infrastructure-stopped task's lines are allowed once each.
	withEarlier := l(1, 9, "old") + l(2, 9, "old") + ok
	require.Equal(t, lineCheck{earlier: 2}, stripExamples(checkSynthLines(withEarlier, "fin", 3, map[string]bool{"old": true})))

	c := checkSynthLines(l(1, 3, "fin")+l(3, 3, "fin")+l(3, 3, "fin")+l(1, 9, "old")+l(1, 9, "old")+"hello\n"+l(1, 3, "other"),
		"fin", 3, map[string]bool{"old": true})
	require.Equal(t, lineCheck{lost: 1, dup: 2, foreign: 2, earlier: 1}, stripExamples(c))
	require.Contains(t, c.examples, "missing: line 2 of 3 task fin")

	c = checkSynthLines(l(2, 3, "fin")+l(1, 3, "fin")+l(3, 3, "fin")+l(4, 3, "fin")+l(1, 4, "fin"), "fin", 3, nil)
	require.Equal(t, lineCheck{disorder: 1, foreign: 2}, stripExamples(c))
}

func stripExamples(c lineCheck) lineCheck {
	c.examples = nil
	return c
}
