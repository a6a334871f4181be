package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
// latency (the emulator's executionStoppedAt, its containers' exit, against the job's finished_at, both this
// machine's wall clock), and the agents' and their plugins' RSS and CPU.
// Synthetic tasks (image tether.local/synthetic) run no process. Each prints
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
	runOnce(b, func() oneRun { return &ecsBench{benchRun: benchRun{b: b}, cfg: ecsBenchFromEnv(b)} })
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
	benchEnvInt(b, "TETHER_BENCH_ECS_JOBS", &c.jobs)
	benchEnvInt(b, "TETHER_BENCH_ECS_AGENTS", &c.agents)
	benchEnvInt(b, "TETHER_BENCH_ECS_CAPACITY", &c.capacity)
	benchEnvDur(b, "TETHER_BENCH_ECS_INTERVAL", &c.interval)
	benchEnvDur(b, "TETHER_BENCH_ECS_TIMEOUT", &c.timeout)
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
	benchEnvDurString(b, "TETHER_BENCH_ECS_POLL", &c.poll)
	benchEnvDurString(b, "TETHER_BENCH_ECS_DRAIN_TIMEOUT", &c.drainTimeout)
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
	benchRun
	cfg ecsBenchConfig

	em      *emulator.Emulator
	lines   map[string]int // job ID → lines its task prints
	rec     *callRecorder
	samples []callSample
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
	r.startContext(cfg.timeout)
	maxConns := benchMaxConns(cfg.agents, cfg.capacity)
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

	r.h = newECSBenchHarness(b, dbURL, benchTimings(cfg.capacity), emURL, cfg)
	r.startAgents("ecs-bench", cfg.agents)
	eff := emulator.EffectiveRateLimits(nil)
	b.Logf("ECS bench: %d jobs, %d agents × capacity %d, lines %d–%d every %s, poll_interval %s, log_settle 3s, log_drain_timeout %s, api_rates: plugin defaults (DescribeTasks %g/s, GetLogEvents %g/s per agent); emulator hostile, seed %d, limits DescribeTasks %s GetLogEvents %s; PostgreSQL max_connections %d",
		cfg.jobs, cfg.agents, cfg.capacity, cfg.minLines, cfg.maxLines, cfg.interval, benchOr(cfg.poll, "6s (default)"), benchOr(cfg.drainTimeout, "5m (default)"),
		ecs.DefaultAPIRates["describe_tasks"], ecs.DefaultAPIRates["get_log_events"], cfg.seed,
		eff["DescribeTasks"], eff["GetLogEvents"], maxConns)
}

// newECSBenchHarness is newECSHarness with the benchmark's command "ecs".
// One synthetic awslogs container, the plugin's default poll_interval and
// api_rates, log_settle 3 s (above the emulator's 1.5 s log lag).
func newECSBenchHarness(b testing.TB, dbURL string, tm timings, emURL string, cfg ecsBenchConfig) *harness {
	b.Helper()
	env := emulatorEnv(b, emURL)
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
		c, err := json.Marshal(r.jobContext(i))
		require.NoError(b, err)
		contexts[i] = c
	}
	r.createLogGroup()
	r.em.ResetCalls()
	r.startClock()
	for i, c := range contexts {
		j, _, err := r.h.st.Submit(ctx, store.SubmitParams{Command: "ecs", Plugin: "ecs", Context: c, Submitter: "bench"})
		require.NoError(b, err)
		r.ids = append(r.ids, j.ID)
		r.lines[j.ID] = cfg.lines(i)
	}
	submitted := time.Since(r.began)
	r.sample(0)
	fmt.Fprintf(os.Stderr, "ecs bench: %d jobs submitted in %s\n", cfg.jobs, submitted.Round(time.Millisecond))

	r.waitAll(cfg.timeout, r.sample, func(elapsed time.Duration, counts map[string]int) {
		s := r.samples[len(r.samples)-1]
		fmt.Fprintf(os.Stderr, "ecs bench: %s: jobs %v; tasks stopped %d; DescribeTasks %d, GetLogEvents %d calls so far\n",
			elapsed, counts, s.stopped, s.describe, s.getLogs)
	})
	r.finish("ecs bench")
}

func (r *ecsBench) sample(ended int) {
	calls, _ := r.em.Calls()
	stopped := 0
	for _, t := range r.em.Tasks() {
		if !t.ExecutionStoppedAt.IsZero() { // its containers exited (DEPROVISIONING or STOPPED)
			stopped++
		}
	}
	var conns int
	_ = r.h.pool.QueryRow(r.ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&conns)
	r.samples = append(r.samples, callSample{at: time.Now(), describe: calls["DescribeTasks"], getLogs: calls["GetLogEvents"],
		stopped: stopped, ended: ended, conns: conns})
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
		jobs                     benchTally
		lineProblems             []string
		launchProblems           []string
		relaunches, earlierLines int
		lost, dup, foreign       int
		latencies                []time.Duration
		ph                       drainPhases
		notes                    = stderrNotes{}
	)
	for _, id := range r.ids {
		j := r.h.job(ctx, id)
		if !jobs.add(j, func() string { return r.describeJob(id, j) }) {
			continue
		}
		var out ecs.Output
		if err := json.Unmarshal(j.Result, &out); err != nil || len(out.Tasks) != 1 {
			jobs.failures = append(jobs.failures, fmt.Sprintf("job %s: result %s: want one task (%v)", id, j.Result, err))
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
		if ti, ok := r.em.Task(final.TaskARN); ok && !ti.ExecutionStoppedAt.IsZero() && j.FinishedAt != nil {
			latencies = append(latencies, j.FinishedAt.Sub(ti.ExecutionStoppedAt))
			ph.add(r.rec, ti, "job/"+ecsContainer+"/"+finalID, *j.FinishedAt)
			for id := range earlier {
				ph.earlierReads += len(r.rec.readsOf("job/" + ecsContainer + "/" + id))
			}
		} else {
			jobs.failures = append(jobs.failures, fmt.Sprintf("job %s: final task %s unknown to the emulator or not stopped (%+v)", id, final.TaskARN, ti))
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
		elapsed.Round(time.Second), benchSince(r.began, firstLaunch), benchSince(r.began, lastLaunch), benchSince(r.began, lastFirstLaunch), benchSince(r.began, jobs.firstEnd), benchSince(r.began, jobs.lastEnd))
	fmt.Fprintf(&rep, "PostgreSQL client connections: at most %d seen (samples every second)\n", peakConns)
	fmt.Fprintf(&rep, "jobs: %d succeeded, %d failed, %d not terminal (of %d)\n", jobs.succeeded, jobs.failed, jobs.open, len(r.ids))
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
	r.liveTailReport(&rep, elapsed)
	benchTimeline(&rep, r.samples, r.began, 30*time.Second)
	var aggRSS, aggHWM int64
	var aggCPU time.Duration
	byKind := map[string]*procKind{}
	for _, p := range r.procs {
		fmt.Fprintf(&rep, "process %-12s %-24s pid %-7d RSS %6.1f MiB, peak %6.1f MiB, CPU %7.1f s (%.0f%% of a core)\n",
			p.agent, p.comm, p.pid, benchMiB(p.rssKB), benchMiB(p.hwmKB), p.cpu.Seconds(), 100*p.cpu.Seconds()/secs)
		aggRSS += p.rssKB
		aggHWM += p.hwmKB
		aggCPU += p.cpu
		addProc(byKind, p, p.cpu)
	}
	for _, name := range slices.Sorted(maps.Keys(byKind)) {
		k := byKind[name]
		fmt.Fprintf(&rep, "  %d × %-24s RSS %6.1f MiB, sum of peaks %6.1f MiB, CPU %7.1f s\n", k.n, name, benchMiB(k.rssKB), benchMiB(k.hwmKB), k.cpu.Seconds())
	}
	fmt.Fprintf(&rep, "agents + plugins: RSS %.1f MiB, sum of peaks %.1f MiB, CPU %.1f s (%.0f%% of a core over the run)\n",
		benchMiB(aggRSS), benchMiB(aggHWM), aggCPU.Seconds(), 100*aggCPU.Seconds()/secs)
	if k := byKind["tether"]; k != nil {
		b.ReportMetric(benchMiB(k.hwmKB)/float64(k.n), "agent-peak-MiB")
		b.ReportMetric(k.cpu.Seconds()/float64(k.n), "agent-cpu-s")
	}
	if k := byKind["tether-plugin-ecs"]; k != nil {
		b.ReportMetric(benchMiB(k.hwmKB)/float64(k.n), "ecs-plugin-peak-MiB")
		b.ReportMetric(k.cpu.Seconds()/float64(k.n), "ecs-plugin-cpu-s")
	}
	fmt.Fprintf(&rep, "this process (emulator + checker): CPU %.1f s; PostgreSQL: CPU %.1f s; machine: %d CPUs %.0f%% busy during the run\n",
		selfCPU.Seconds(), pgCPU.Seconds(), cpu.cpus, 100*cpu.busyFraction())
	// To stdout. The testing package keeps only 10 lines of a benchmark's log.
	fmt.Print(rep.String())
	b.Logf("%d/%d jobs succeeded in %s; lines lost %d, duplicated %d; DescribeTasks %.2f/s, GetLogEvents %.2f/s; stop → terminal p50 %s p99 %s (full report above)",
		jobs.succeeded, len(r.ids), elapsed.Round(time.Second), lost, dup, descRate, logRate, p50.Round(time.Millisecond), p99.Round(time.Millisecond))

	b.ReportMetric(elapsed.Seconds(), "elapsed-s")
	b.ReportMetric(float64(jobs.succeeded), "succeeded")
	b.ReportMetric(float64(relaunches), "infra-relaunches")
	b.ReportMetric(float64(lost), "lines-lost")
	b.ReportMetric(float64(dup), "lines-dup")
	b.ReportMetric(descRate, "describe/s")
	b.ReportMetric(logRate, "getlogs/s")
	b.ReportMetric(float64(throttled["DescribeTasks"]+throttled["GetLogEvents"]), "throttled")
	b.ReportMetric(p50.Seconds(), "stop-to-end-p50-s")
	b.ReportMetric(p99.Seconds(), "stop-to-end-p99-s")

	// The musts.
	jobs.must(b, r.timeout, len(r.ids), r.cfg.timeout)
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
// recorder saw. The stop is seen by the first DescribeTasks after it. Its
// log drain starts with the first read of its stream after that (no
// earlier than log_settle) and ends with the last. Then the job's final
// write.
type drainPhases struct {
	stopToSeen, seenToDrain, drain, lastReadToEnd []time.Duration
	tails, drains                                 []int // reads of each final task's stream before and after the stop was seen
	failedReads, earlierReads, unseen             int
}

func (p *drainPhases) add(rec *callRecorder, t emulator.TaskInfo, stream string, end time.Time) {
	seen, ok := rec.seenStopped(t.ARN, t.ExecutionStoppedAt)
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
	p.stopToSeen = append(p.stopToSeen, seen.Sub(t.ExecutionStoppedAt))
	if first.IsZero() {
		return
	}
	p.seenToDrain = append(p.seenToDrain, first.Sub(seen))
	p.drain = append(p.drain, last.Sub(first))
	p.lastReadToEnd = append(p.lastReadToEnd, end.Sub(last))
}

func (p *drainPhases) report(w io.Writer, allReads int) {
	row := func(name string, ds []time.Duration) { fmt.Fprintf(w, "  %-38s %s\n", name, benchPcts(ds)) }
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
	return fmt.Sprintf("job %s %s attempt %d error_class=%s error=%q\n  events: %s\n  stderr: %s",
		id, j.Status, j.Attempt, j.ErrorClass, j.Error, r.h.eventSummary(r.ctx, id), r.stderrTail(id))
}

// checkSynthLines checks stdout against the synthetic task finalID's n
// lines ("line <k> of <n> task <id>"): each once, in order. Lines of the
// tasks in earlier are allowed once each, in their order. Anything else is
// foreign.
func checkSynthLines(stdout, finalID string, n int, earlier map[string]bool) lineCheck {
	var c lineCheck
	seen := map[string]map[int]bool{}
	last := map[string]int{}
	scanLines(stdout, func(line string) {
		var k, of int
		var task string
		if _, err := fmt.Sscanf(line, "line %d of %d task %s", &k, &of, &task); err != nil || fmt.Sprintf("line %d of %d task %s", k, of, task) != line {
			c.foreign++
			c.note(line)
			return
		}
		if task != finalID && !earlier[task] || task == finalID && (of != n || k < 1 || k > n) {
			c.foreign++
			c.note(line)
			return
		}
		if seen[task] == nil {
			seen[task] = map[int]bool{}
		}
		if seen[task][k] {
			c.dup++
			c.note(line)
			return
		}
		seen[task][k] = true
		if k < last[task] {
			c.disorder++
			c.note(line)
		}
		last[task] = k
		if task != finalID {
			c.earlier++
		}
	})
	c.lost = n - len(seen[finalID])
	if c.lost > 0 {
		for k := 1; k <= n; k++ {
			if !seen[finalID][k] { // the first missing line always shows
				c.missing(fmt.Sprintf("missing: line %d of %d task %s", k, n, finalID))
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
