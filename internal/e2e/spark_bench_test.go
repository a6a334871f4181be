package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/internal/store"
)

// BenchmarkSpark500 runs 500 Spark SQL jobs at once on 2 agents through the
// sparkeks plugin against a real kube-apiserver + etcd and the real
// kubeflow spark-operator controller (kubetest.StartOperatorStack: the
// operator runs the stand-in spark-submit, which creates the driver pod;
// the kubelet stand-in runs it for TETHER_BENCH_SPARK_RUN, printing
// TETHER_BENCH_SPARK_LINES lines, and the operator moves the application
// to COMPLETED). The plugin reaches the apiserver through the kubetest
// proxy, which counts its requests (by its User-Agent,
// tether-plugin-sparkeks/<version>). The operator, the garbage collector,
// the kubelet stand-in, spark-submit and this benchmark's own watch go to
// the apiserver directly and are not in the plugin's figures.
//
// The musts (the benchmark fails when one breaks):
//
//   - every job succeeds;
//   - exactly one SparkApplication (by UID) ever exists per job;
//   - each job's stdout holds every driver log line exactly once.
//
// It prints the plugin's apiserver requests per second by verb and resource
// over the run and its peak of open watches. It prints the agents' and their
// plugins' RSS (peak) and CPU. It prints submit → application COMPLETED
// (first seen by this benchmark's watch, and status.terminationTime) → job
// terminal latencies, and the phases in between (where the time goes). It
// prints the CPU of the stack's processes and the whole run's time.
//
//	make bench-spark
//	go test -count=1 -run '^$' -bench '^BenchmarkSpark500$' -benchtime 1x -timeout 40m ./internal/e2e/
//
// Sizes come from the environment (defaults in brackets):
// TETHER_BENCH_SPARK_JOBS [500], TETHER_BENCH_SPARK_AGENTS [2],
// TETHER_BENCH_SPARK_CAPACITY [1.2 × jobs/agents, at least +10],
// TETHER_BENCH_SPARK_RUN [30s: the driver's run], TETHER_BENCH_SPARK_LINES
// [20 driver log lines], TETHER_BENCH_SPARK_POLL [the plugin's
// poll_interval default], TETHER_BENCH_SPARK_TIMEOUT [15m]. And the
// operator's flags past kubetest's (--controller-threads=10 and the
// operator's own --kube-api-qps=20 --kube-api-burst=30):
// TETHER_KUBETEST_OPERATOR_FLAGS ["--controller-threads=30
// --kube-api-qps=200 --kube-api-burst=400"; set it empty for kubetest's].
func BenchmarkSpark500(b *testing.B) {
	runOnce(b, func() oneRun { return &sparkBench{benchRun: benchRun{b: b}, cfg: sparkBenchFromEnv(b)} })
}

type sparkBenchConfig struct {
	jobs, agents, capacity, lines int
	runFor, timeout               time.Duration
	poll                          string // plugin poll_interval; "" = its default
}

func sparkBenchFromEnv(b *testing.B) sparkBenchConfig {
	c := sparkBenchConfig{jobs: 500, agents: 2, lines: 20, runFor: 30 * time.Second, timeout: 15 * time.Minute}
	benchEnvInt(b, "TETHER_BENCH_SPARK_JOBS", &c.jobs)
	benchEnvInt(b, "TETHER_BENCH_SPARK_AGENTS", &c.agents)
	benchEnvInt(b, "TETHER_BENCH_SPARK_LINES", &c.lines)
	benchEnvDur(b, "TETHER_BENCH_SPARK_RUN", &c.runFor)
	benchEnvDur(b, "TETHER_BENCH_SPARK_TIMEOUT", &c.timeout)
	per := (c.jobs + c.agents - 1) / c.agents
	c.capacity = max(int(math.Ceil(float64(per)*1.2)), per+10)
	benchEnvInt(b, "TETHER_BENCH_SPARK_CAPACITY", &c.capacity)
	benchEnvDurString(b, "TETHER_BENCH_SPARK_POLL", &c.poll)
	return c
}

// sparkBenchOperatorFlags are the operator's flags past kubetest's unless
// TETHER_KUBETEST_OPERATOR_FLAGS says otherwise.
const sparkBenchOperatorFlags = "--controller-threads=30 --kube-api-qps=200 --kube-api-burst=400"

// sparkPluginAgent is the User-Agent prefix of the sparkeks plugin's
// clients (plugins/sparkeks/sparkeks/clients.go).
const sparkPluginAgent = "tether-plugin-sparkeks/"

type sparkBench struct {
	benchRun
	cfg sparkBenchConfig

	stack *kubetest.OperatorStack
	apps  *appWatch

	submitted map[string]time.Time // job ID → when Submit returned
	samples   []sparkSample
	procs0    map[int]procFigures   // agents and plugins before the run, by pid (benchRun.procs: at its end)
	stack0    map[int]stackProc     // the stack's processes before the run
	reqs      kubetest.RequestStats // the proxy's counts over the run
}

// sparkSample is the run at one moment, for the timeline.
type sparkSample struct {
	at                                    time.Time
	created, submitted, running, complete int // applications in (or past) each state
	ended                                 int // jobs terminal
	requests                              int // the plugin's requests so far
	openWatches                           int // the plugin's watches open now
	openLogs                              int // and its followed logs
}

func (r *sparkBench) setUp() {
	b, cfg := r.b, r.cfg
	r.startContext(cfg.timeout)
	ctx := r.ctx
	maxConns := benchMaxConns(cfg.agents, cfg.capacity)
	dbURL := startBenchCluster(b, maxConns)

	// The operator's own client (20 requests/s, burst 30) and kubetest's 10
	// controller threads bottleneck it at 500 applications (measured: the
	// run took twice as long, COMPLETED came ~26 s after the driver pod
	// ended), which is not what this benchmark measures.
	if _, set := os.LookupEnv("TETHER_KUBETEST_OPERATOR_FLAGS"); !set {
		b.Setenv("TETHER_KUBETEST_OPERATOR_FLAGS", sparkBenchOperatorFlags)
	}
	dir := b.TempDir()
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	defer scancel()
	began := time.Now()
	stack, err := kubetest.StartOperatorStack(sctx, dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(b, err, "starting the operator stack")
	r.stack = stack
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("spark-operator log ends:\n%s", stack.OperatorLog())
		}
		if err := stack.Stop(); err != nil {
			b.Logf("stopping the operator stack: %v", err)
		}
	})
	fmt.Fprintf(os.Stderr, "spark bench: operator stack up in %s\n", time.Since(began).Round(100*time.Millisecond))
	r.apps = watchApps(b, ctx, stack)

	pcfg := fmt.Sprintf("{kubeconfig: %q}", stack.Proxy.Kubeconfig)
	if cfg.poll != "" {
		pcfg = fmt.Sprintf("{kubeconfig: %q, poll_interval: %s}", stack.Proxy.Kubeconfig, cfg.poll)
	}
	plugins := fmt.Sprintf("  sparkeks:\n    config: %s\n", pcfg)
	commands := "  spark-sql:\n    plugin: sparkeks\n    context: {image: \"spark:3.5.3\", main_application_file: \"local:///opt/tether/spark_sql.py\"}\n"
	r.h = newHarnessWith(b, dbURL, benchTimings(cfg.capacity), plugins, commands)
	r.startAgents("spark-bench", cfg.agents)
	b.Logf("Spark bench: %d jobs, %d agents × capacity %d, driver run %s with %d log lines, plugin poll_interval %s; spark-operator v2.5.2 (kubetest's flags, --controller-threads=10, plus TETHER_KUBETEST_OPERATOR_FLAGS %q); PostgreSQL max_connections %d",
		cfg.jobs, cfg.agents, cfg.capacity, cfg.runFor, cfg.lines, benchOr(cfg.poll, "its default"), os.Getenv("TETHER_KUBETEST_OPERATOR_FLAGS"), maxConns)
}

// appWatch is the benchmark's own informer on SparkApplications (straight to
// the apiserver, not through the proxy). It holds when each was first seen,
// and first seen in each state.
type appWatch struct {
	mu   sync.Mutex
	apps map[string]*appSeen // name → what was seen
}

type appSeen struct {
	uids                                map[types.UID]bool
	created                             time.Time // metadata.creationTimestamp (seconds)
	seen, submitted, running, completed time.Time // first seen (in that state)
	terminated                          time.Time // status.terminationTime (seconds)
	states                              []string  // the states seen, in order
}

func watchApps(b *testing.B, ctx context.Context, stack *kubetest.OperatorStack) *appWatch {
	w := &appWatch{apps: map[string]*appSeen{}}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(stack.Env.Dynamic, 0)
	inf := factory.ForResource(kubetest.SparkApplications).Informer()
	see := func(o any) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return
		}
		now := time.Now()
		st, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "state")
		w.mu.Lock()
		defer w.mu.Unlock()
		a := w.apps[u.GetName()]
		if a == nil {
			a = &appSeen{uids: map[types.UID]bool{}, seen: now, created: u.GetCreationTimestamp().Time}
			w.apps[u.GetName()] = a
		}
		a.uids[u.GetUID()] = true
		if st != "" && (len(a.states) == 0 || a.states[len(a.states)-1] != st) {
			a.states = append(a.states, st)
		}
		first := func(t *time.Time) {
			if t.IsZero() {
				*t = now
			}
		}
		switch st {
		case "SUBMITTED":
			first(&a.submitted)
		case "RUNNING":
			first(&a.running)
		case "COMPLETED":
			first(&a.completed)
		}
		if ts, ok, _ := unstructured.NestedString(u.Object, "status", "terminationTime"); ok && ts != "" && a.terminated.IsZero() {
			if t, err := time.Parse(time.RFC3339, ts); err == nil {
				a.terminated = t
			}
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }})
	require.NoError(b, err)
	// Its own stop. ctx ends only after every cleanup, this one's too.
	stop := make(chan struct{})
	b.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	factory.Start(stop)
	require.True(b, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "the benchmark's SparkApplication informer did not sync")
	return w
}

func (w *appWatch) get(name string) (appSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.apps[name]
	if !ok {
		return appSeen{}, false
	}
	c := *a
	c.uids = maps.Clone(a.uids)
	c.states = slices.Clone(a.states)
	return c, true
}

func (w *appWatch) counts() (created, submitted, running, completed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.apps {
		created++
		if !a.submitted.IsZero() || !a.running.IsZero() || !a.completed.IsZero() {
			submitted++
		}
		if !a.running.IsZero() || !a.completed.IsZero() {
			running++
		}
		if !a.completed.IsZero() {
			completed++
		}
	}
	return
}

func (r *sparkBench) run() {
	b, cfg, ctx := r.b, r.cfg, r.ctx
	conf := map[string]string{
		kubetest.SimRun:          cfg.runFor.String(),
		kubetest.KubeletLogLines: strconv.Itoa(cfg.lines),
	}
	raw, err := json.Marshal(map[string]any{"query": sparkBenchQuery, "spark_conf": conf})
	require.NoError(b, err)

	r.procs0 = map[int]procFigures{}
	for _, a := range r.agents {
		for _, p := range procTree(a.cmd.Process.Pid, a.name) {
			r.procs0[p.pid] = p
		}
	}
	r.stack0 = stackProcs()
	r.submitted = map[string]time.Time{}
	r.stack.Proxy.ResetRequests()
	r.startClock()
	for range cfg.jobs {
		j, _, err := r.h.st.Submit(ctx, store.SubmitParams{Command: "spark-sql", Plugin: "sparkeks", Context: raw, Submitter: "bench"})
		require.NoError(b, err)
		r.ids = append(r.ids, j.ID)
		r.submitted[j.ID] = time.Now()
	}
	fmt.Fprintf(os.Stderr, "spark bench: %d jobs submitted in %s\n", cfg.jobs, time.Since(r.began).Round(time.Millisecond))

	r.waitAll(cfg.timeout, r.sample, func(elapsed time.Duration, counts map[string]int) {
		s := r.samples[len(r.samples)-1]
		fmt.Fprintf(os.Stderr, "spark bench: %s: jobs %v; applications created %d, submitted %d, running %d, completed %d; plugin requests %d, watches open %d, logs followed %d\n",
			elapsed, counts, s.created, s.submitted, s.running, s.complete, s.requests, s.openWatches, s.openLogs)
	})
	r.reqs = r.stack.Proxy.Requests()
	r.finish("spark bench")
}

func (r *sparkBench) sample(ended int) {
	s := sparkSample{at: time.Now(), ended: ended}
	s.created, s.submitted, s.running, s.complete = r.apps.counts()
	req := r.stack.Proxy.Requests()
	for k, n := range req.Counts {
		if strings.HasPrefix(k.Client, sparkPluginAgent) {
			s.requests += n
		}
	}
	for c, n := range req.OpenWatches {
		if strings.HasPrefix(c, sparkPluginAgent) {
			s.openWatches += n
		}
	}
	for c, n := range req.OpenLogStreams {
		if strings.HasPrefix(c, sparkPluginAgent) {
			s.openLogs += n
		}
	}
	r.samples = append(r.samples, s)
}

// sparkPhases are the per-job latencies of the report, each from the
// job's submit (this benchmark's clock) or between the moments this
// benchmark's watch first saw the application in a state.
type sparkPhases struct {
	submitToCreated, createdToSubmitted, submittedToRunning, runningToCompleted []time.Duration
	submitToCompleted, completedToTerminal, terminationToTerminal               []time.Duration
	submitToTerminal                                                            []time.Duration
}

func (r *sparkBench) check() {
	b, ctx := r.b, r.ctx
	elapsed := r.ended.Sub(r.began)
	var (
		jobs                     benchTally
		lineProblems             []string
		appProblems              []string
		lost, dup, foreign       int
		ph                       sparkPhases
		firstCreated, lastCreate time.Time
	)
	for _, id := range r.ids {
		name := "spark-sql-job-" + id
		j := r.h.job(ctx, id)
		a, seen := r.apps.get(name)
		if n := r.stack.Created("default", name); n != 1 || seen && len(a.uids) != 1 {
			appProblems = append(appProblems, fmt.Sprintf("job %s: %d SparkApplications by the stack's count, %d by the benchmark's watch", id, n, len(a.uids)))
		}
		if !jobs.add(j, func() string { return r.describeSparkJob(id, j, a) }) {
			continue
		}
		lc := checkDriverLines(r.h.stdout(ctx, id), r.cfg.lines, sparkBenchQuery)
		lost += lc.lost
		dup += lc.dup
		foreign += lc.foreign
		if lc.lost+lc.dup+lc.disorder > 0 || lc.foreign > 0 {
			lineProblems = append(lineProblems, fmt.Sprintf("job %s: %s", id, lc))
		}
		if !seen || j.FinishedAt == nil {
			jobs.failures = append(jobs.failures, fmt.Sprintf("job %s succeeded but its application %s was never seen by the benchmark's watch", id, name))
			continue
		}
		if firstCreated.IsZero() || a.seen.Before(firstCreated) {
			firstCreated = a.seen
		}
		lastCreate = maxTime(lastCreate, a.seen)
		sub, end := r.submitted[id], *j.FinishedAt
		ph.submitToCreated = append(ph.submitToCreated, a.seen.Sub(sub))
		ph.submitToTerminal = append(ph.submitToTerminal, end.Sub(sub))
		if !a.submitted.IsZero() {
			ph.createdToSubmitted = append(ph.createdToSubmitted, a.submitted.Sub(a.seen))
			if !a.running.IsZero() {
				ph.submittedToRunning = append(ph.submittedToRunning, a.running.Sub(a.submitted))
			}
		}
		if !a.completed.IsZero() {
			ph.submitToCompleted = append(ph.submitToCompleted, a.completed.Sub(sub))
			ph.completedToTerminal = append(ph.completedToTerminal, end.Sub(a.completed))
			if !a.running.IsZero() {
				ph.runningToCompleted = append(ph.runningToCompleted, a.completed.Sub(a.running))
			}
		} else {
			jobs.failures = append(jobs.failures, fmt.Sprintf("job %s succeeded but its application was never seen COMPLETED (states %v)", id, a.states))
		}
		if !a.terminated.IsZero() {
			ph.terminationToTerminal = append(ph.terminationToTerminal, end.Sub(a.terminated))
		}
	}

	secs := elapsed.Seconds()
	cpu := r.cpuEnd.sub(r.cpuStart)
	var rep strings.Builder
	fmt.Fprintf(&rep, "\n==== Spark at %d jobs, %d agents (real spark-operator) ====\n", r.cfg.jobs, r.cfg.agents)
	fmt.Fprintf(&rep, "elapsed (first submit → last job terminal): %s; applications created from %s to %s after the first submit; job ends from %s to %s\n",
		elapsed.Round(time.Second), benchSince(r.began, firstCreated), benchSince(r.began, lastCreate), benchSince(r.began, jobs.firstEnd), benchSince(r.began, jobs.lastEnd))
	fmt.Fprintf(&rep, "jobs: %d succeeded, %d failed, %d not terminal (of %d); ended per agent: %s\n", jobs.succeeded, jobs.failed, jobs.open, len(r.ids), r.endsPerAgent())
	fmt.Fprintf(&rep, "SparkApplications: %d jobs with other than exactly one ever\n", len(appProblems))
	fmt.Fprintf(&rep, "driver log lines (%d per job): lost %d, duplicated %d, foreign %d; jobs with problems %d\n", r.cfg.lines, lost, dup, foreign, len(lineProblems))
	for _, p := range benchFirstN(lineProblems, 3) {
		fmt.Fprintf(&rep, "  %s\n", p)
	}

	// The plugin's requests, by verb and resource.
	pluginClients := []string{}
	for _, c := range r.reqs.Clients() {
		if strings.HasPrefix(c, sparkPluginAgent) {
			pluginClients = append(pluginClients, c)
		}
	}
	byVR := map[[2]string]int{}
	total := 0
	others := 0
	for k, n := range r.reqs.Counts {
		if !strings.HasPrefix(k.Client, sparkPluginAgent) {
			others += n
			continue
		}
		byVR[[2]string{k.Verb, k.Resource}] += n
		total += n
	}
	peakWatches, peakLogs, peakRate := 0, 0, 0.0
	for _, c := range pluginClients {
		peakWatches += r.reqs.PeakWatches[c]
		peakLogs += r.reqs.PeakLogStreams[c]
	}
	for i := range r.samples {
		for j := i + 1; j < len(r.samples); j++ {
			if d := r.samples[j].at.Sub(r.samples[i].at); d >= 10*time.Second {
				peakRate = max(peakRate, float64(r.samples[j].requests-r.samples[i].requests)/d.Seconds())
				break
			}
		}
	}
	fmt.Fprintf(&rep, "plugin apiserver requests (User-Agent %s, both agents' plugins together): %d, %.2f/s over the run, busiest 10 s %.2f/s; per job %.1f; peak open watches %d (%d open at the end), peak followed driver logs %d; requests of other clients through the proxy: %d\n",
		strings.Join(pluginClients, ", "), total, float64(total)/secs, peakRate, float64(total)/float64(max(len(r.ids), 1)), peakWatches, r.samples[len(r.samples)-1].openWatches, peakLogs, others)
	keys := slices.SortedFunc(maps.Keys(byVR), func(x, y [2]string) int {
		if c := strings.Compare(x[1], y[1]); c != 0 {
			return c
		}
		return strings.Compare(x[0], y[0])
	})
	for _, k := range keys {
		fmt.Fprintf(&rep, "  %-7s %-36s %7d  %8.2f/s  %6.2f per job\n", k[0], k[1], byVR[k], float64(byVR[k])/secs, float64(byVR[k])/float64(max(len(r.ids), 1)))
	}

	row := func(name string, ds []time.Duration) {
		fmt.Fprintf(&rep, "  %-44s %s  (%d)\n", name, benchPcts(ds), len(ds))
	}
	fmt.Fprintf(&rep, "latencies (this machine's clock; application states as first seen by the benchmark's watch, straight to the apiserver):\n")
	row("submit → COMPLETED (seen)", ph.submitToCompleted)
	row("COMPLETED (seen) → job terminal", ph.completedToTerminal)
	row("status.terminationTime (s) → job terminal", ph.terminationToTerminal)
	row("submit → job terminal", ph.submitToTerminal)
	fmt.Fprintf(&rep, "where the time goes:\n")
	row("submit → application created (agent+plugin)", ph.submitToCreated)
	row("created → SUBMITTED (operator, spark-submit)", ph.createdToSubmitted)
	row("SUBMITTED → RUNNING (kubelet, operator)", ph.submittedToRunning)
	row(fmt.Sprintf("RUNNING → COMPLETED (driver run %s)", r.cfg.runFor), ph.runningToCompleted)
	sparkTimeline(&rep, r.samples, r.began, 30*time.Second)

	var aggCPU time.Duration
	var aggHWM int64
	byKind := map[string]*procKind{}
	for _, p := range r.procs {
		c := p.cpu
		if p0, ok := r.procs0[p.pid]; ok {
			c -= p0.cpu
		}
		fmt.Fprintf(&rep, "process %-14s %-24s pid %-7d RSS %6.1f MiB, peak %6.1f MiB, CPU during the run %7.1f s (%.0f%% of a core)\n",
			p.agent, p.comm, p.pid, benchMiB(p.rssKB), benchMiB(p.hwmKB), c.Seconds(), 100*c.Seconds()/secs)
		aggCPU += c
		aggHWM += p.hwmKB
		addProc(byKind, p, c)
	}
	for _, name := range slices.Sorted(maps.Keys(byKind)) {
		k := byKind[name]
		fmt.Fprintf(&rep, "  %d × %-24s highest peak RSS %6.1f MiB, CPU %7.1f s in all\n", k.n, name, benchMiB(k.maxHWMKB), k.cpu.Seconds())
	}
	fmt.Fprintf(&rep, "agents + plugins: sum of peaks %.1f MiB, CPU %.1f s (%.0f%% of a core over the run)\n", benchMiB(aggHWM), aggCPU.Seconds(), 100*aggCPU.Seconds()/secs)
	if k := byKind["tether"]; k != nil {
		b.ReportMetric(benchMiB(k.maxHWMKB), "agent-peak-MiB")
		b.ReportMetric(k.cpu.Seconds()/float64(k.n), "agent-cpu-s")
	}
	if k := byKind["tether-plugin-sparkeks"]; k != nil {
		b.ReportMetric(benchMiB(k.maxHWMKB), "plugin-peak-MiB")
		b.ReportMetric(k.cpu.Seconds()/float64(k.n), "plugin-cpu-s")
	}
	fmt.Fprintf(&rep, "the stack (CPU during the run; a process's reaped children, e.g. the operator's spark-submit runs, included):\n")
	for _, p := range stackDelta(r.stack0, stackProcs()) {
		fmt.Fprintf(&rep, "  %-26s pid %-7d CPU %7.1f s (%.0f%% of a core; children %6.1f s), RSS %6.1f MiB\n",
			p.comm, p.pid, p.cpu.Seconds(), 100*p.cpu.Seconds()/secs, p.childCPU.Seconds(), benchMiB(p.rssKB))
	}
	fmt.Fprintf(&rep, "this process (proxy, kubelet stand-in, watches, checker): CPU %.1f s; PostgreSQL: CPU %.1f s; machine: %d CPUs %.0f%% busy during the run\n",
		(selfCPU() - r.selfCPU0).Seconds(), (postgresCPU() - r.pgCPU0).Seconds(), cpu.cpus, 100*cpu.busyFraction())
	fmt.Print(rep.String())

	p50, p99 := benchPct(ph.submitToTerminal, 0.5), benchPct(ph.submitToTerminal, 0.99)
	b.Logf("%d/%d jobs succeeded in %s; plugin requests %.2f/s, peak open watches %d; submit → terminal p50 %s p99 %s (full report above)",
		jobs.succeeded, len(r.ids), elapsed.Round(time.Second), float64(total)/secs, peakWatches, p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	b.ReportMetric(elapsed.Seconds(), "elapsed-s")
	b.ReportMetric(float64(jobs.succeeded), "succeeded")
	b.ReportMetric(float64(total)/secs, "plugin-req/s")
	b.ReportMetric(float64(peakWatches), "plugin-peak-watches")
	b.ReportMetric(float64(peakLogs), "plugin-peak-log-streams")
	b.ReportMetric(benchPct(ph.completedToTerminal, 0.5).Seconds(), "completed-to-end-p50-s")
	b.ReportMetric(benchPct(ph.completedToTerminal, 0.99).Seconds(), "completed-to-end-p99-s")

	// The musts.
	jobs.must(b, r.timeout, len(r.ids), r.cfg.timeout)
	if len(appProblems) > 0 {
		b.Errorf("%d jobs without exactly one SparkApplication ever:\n%s", len(appProblems), strings.Join(benchFirstN(appProblems, 10), "\n"))
	}
	if lost+dup > 0 {
		b.Errorf("%d jobs with lost, duplicated or foreign driver lines:\n%s", len(lineProblems), strings.Join(benchFirstN(lineProblems, 10), "\n"))
	} else if len(lineProblems) > 0 {
		b.Logf("%d jobs with foreign or out-of-order lines in stdout (every driver line is there once):\n%s", len(lineProblems), strings.Join(benchFirstN(lineProblems, 5), "\n"))
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (r *sparkBench) describeSparkJob(id string, j store.Job, a appSeen) string {
	return fmt.Sprintf("job %s %s attempt %d error_class=%s error=%q\n  application states seen: %v\n  events: %s\n  stderr: %s",
		id, j.Status, j.Attempt, j.ErrorClass, j.Error, a.states, r.h.eventSummary(r.ctx, id), r.stderrTail(id))
}

// sparkBenchQuery is every job's query. The kubelet stand-in's driver
// prints "query: <its first line>" before its own lines.
const sparkBenchQuery = "SELECT count(*) FROM events"

// checkDriverLines checks stdout against the kubelet stand-in's driver log
// ("driver line <i> of <n>", i = 1..n): each once, in order. The line
// "query: <query>" may come once (the stand-in prints the mounted query
// first). Any other line is foreign.
func checkDriverLines(stdout string, n int, query string) lineCheck {
	var c lineCheck
	seen := map[int]bool{}
	last, queries := 0, 0
	scanLines(stdout, func(line string) {
		if line == "query: "+query {
			if queries++; queries > 1 {
				c.dup++
				c.note(line)
			}
			return
		}
		var k, of int
		if _, err := fmt.Sscanf(line, "driver line %d of %d", &k, &of); err != nil || fmt.Sprintf("driver line %d of %d", k, of) != line || of != n || k < 1 || k > n {
			c.foreign++
			c.note(line)
			return
		}
		if seen[k] {
			c.dup++
			c.note(line)
			return
		}
		seen[k] = true
		if k < last {
			c.disorder++
			c.note(line)
		}
		last = k
	})
	c.lost = n - len(seen)
	for k := 1; k <= n && c.lost > 0; k++ {
		if !seen[k] {
			c.missing(fmt.Sprintf("missing: driver line %d of %d", k, n))
			break
		}
	}
	return c
}

func sparkTimeline(w io.Writer, s []sparkSample, began time.Time, step time.Duration) {
	fmt.Fprintf(w, "timeline:   t  apps created  submitted  running  completed  jobs ended  plugin req/s  watches open  logs followed\n")
	prev := sparkSample{at: began}
	for i, c := range s {
		if i != len(s)-1 && c.at.Sub(prev.at) < step {
			continue
		}
		d := c.at.Sub(prev.at).Seconds()
		fmt.Fprintf(w, "         %5.0fs %13d %10d %8d %10d %11d %13.2f %13d %14d\n", c.at.Sub(began).Seconds(), c.created, c.submitted, c.running, c.complete, c.ended,
			float64(c.requests-prev.requests)/d, c.openWatches, c.openLogs)
		prev = c
	}
}

// stackProc is one of the stack's processes (a direct child of this
// process other than the agents and PostgreSQL): kube-apiserver, etcd,
// spark-operator, kube-controller-manager.
type stackProc struct {
	comm          string
	pid           int
	cpu, childCPU time.Duration // own; reaped children's
	rssKB         int64
}

func stackProcs() map[int]stackProc {
	self := strconv.Itoa(os.Getpid())
	out := map[int]stackProc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStatFields(e.Name())
		if len(f) < 15 || f[1] != self {
			continue
		}
		p := readProc(pid, "")
		if p.comm == "tether" || p.comm == "postgres" || strings.HasPrefix(p.comm, "tether-plugin-") {
			continue
		}
		if b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); strings.TrimSpace(string(b)) == "postgres" {
			continue
		}
		out[pid] = stackProc{comm: p.comm, pid: pid, cpu: benchTicks(f, 11, 12), childCPU: benchTicks(f, 13, 14), rssKB: p.rssKB}
	}
	return out
}

func stackDelta(before, after map[int]stackProc) []stackProc {
	var out []stackProc
	for _, pid := range slices.Sorted(maps.Keys(after)) {
		p := after[pid]
		if b, ok := before[pid]; ok {
			p.cpu -= b.cpu
			p.childCPU -= b.childCPU
		}
		p.cpu += p.childCPU
		out = append(out, p)
	}
	return out
}

// checkDriverLines itself.
func TestCheckDriverLines(t *testing.T) {
	l := func(k, n int) string { return fmt.Sprintf("driver line %d of %d\n", k, n) }
	require.Equal(t, lineCheck{}, stripExamples(checkDriverLines(l(1, 3)+l(2, 3)+l(3, 3), 3, "q")))
	require.Equal(t, lineCheck{}, stripExamples(checkDriverLines("query: q\n"+l(1, 3)+l(2, 3)+l(3, 3), 3, "q")))
	c := checkDriverLines("query: q\n"+l(1, 3)+l(3, 3)+l(3, 3)+"hello\nquery: q\nquery: other\n"+l(1, 4), 3, "q")
	require.Equal(t, lineCheck{lost: 1, dup: 2, foreign: 3}, stripExamples(c))
	require.Contains(t, c.examples, "missing: driver line 2 of 3")
	require.Equal(t, lineCheck{disorder: 1}, stripExamples(checkDriverLines(l(2, 3)+l(1, 3)+l(3, 3), 3, "q")))
}
