package e2e

// What the ECS and Spark benchmarks (ecs_bench_test.go,
// spark_bench_test.go) share: their sizes from the environment, the
// PostgreSQL cluster and agents, the wait for every job, the tally of the
// jobs' ends, the checks of stdout lines, and the /proc figures of the
// agents, their plugins, PostgreSQL and the machine.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/internal/store/migrate"
)

// oneRun is a benchmark that is one long run.
type oneRun interface {
	setUp()
	run() // starts and stops the benchmark's clock
	check()
}

// runOnce runs the benchmark b that newRun makes once. It is one long run
// (-benchtime 1x), its clock stopped but for the run itself.
func runOnce(b *testing.B, newRun func() oneRun) {
	if b.N > 1 {
		b.Fatalf("%s is one long run: use -benchtime 1x (b.N = %d)", b.Name(), b.N)
	}
	b.StopTimer()
	r := newRun()
	r.setUp()
	r.run()
	r.check()
}

// benchEnvInt sets *dst from the environment variable name, a positive
// integer, when it is set.
func benchEnvInt(b *testing.B, name string, dst *int) {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive integer", name, v)
		}
		*dst = n
	}
}

// benchEnvDur sets *dst from the environment variable name, a positive Go
// duration, when it is set.
func benchEnvDur(b *testing.B, name string, dst *time.Duration) {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive Go duration", name, v)
		}
		*dst = d
	}
}

// benchEnvDurString sets *dst to the environment variable name, a Go
// duration passed on as written (to a plugin's config), when it is set.
func benchEnvDurString(b *testing.B, name string, dst *string) {
	if v := os.Getenv(name); v != "" {
		if _, err := time.ParseDuration(v); err != nil {
			b.Fatalf("%s=%q: want a Go duration", name, v)
		}
		*dst = v
	}
}

// benchMaxConns is the benchmark cluster's max_connections. Each agent's
// pool grows to capacity + 8, its heartbeat pool to 2. The harness and the
// benchmark hold a few more.
func benchMaxConns(agents, capacity int) int { return agents*(capacity+8+2) + 40 }

// benchTimings are the agents' timings in both benchmarks.
func benchTimings(capacity int) timings {
	return timings{
		Capacity:      capacity,
		PollInterval:  time.Second,
		Keepalive:     2 * time.Second,
		StaleJob:      30 * time.Second,
		OfflineAfter:  6 * time.Second,
		CleanInterval: 5 * time.Second,
		AWOLTimeout:   120 * time.Second,
		KillGrace:     time.Second,
	}
}

// benchRun is the part of a benchmark's state that both keep: the run's
// context, harness, agents and jobs, its clock, and the CPU and process
// figures around it.
type benchRun struct {
	b      *testing.B
	ctx    context.Context
	h      *harness
	agents []*agentProc

	ids     []string
	began   time.Time // just before the first submit
	ended   time.Time // when the last job was seen terminal
	timeout bool      // some job never ended

	cpuStart machineCPU
	cpuEnd   machineCPU
	selfCPU0 time.Duration
	pgCPU0   time.Duration
	procs    []procFigures // agents and their plugins, at the end
}

// startContext gives the run a context that ends 5 minutes past its
// timeout (or when the benchmark does).
func (r *benchRun) startContext(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	r.b.Cleanup(cancel)
	r.ctx = ctx
}

// startAgents starts n agents named <prefix>-1 … <prefix>-n.
func (r *benchRun) startAgents(prefix string, n int) {
	for i := range n {
		r.agents = append(r.agents, r.h.startAgent(r.ctx, fmt.Sprintf("%s-%d", prefix, i+1)))
	}
}

// startClock takes the CPU figures the run's are measured from and starts
// the run's (and the benchmark's) clock, just before the first submit.
func (r *benchRun) startClock() {
	r.cpuStart = readMachineCPU()
	r.selfCPU0 = selfCPU()
	r.pgCPU0 = postgresCPU()
	r.began = time.Now()
	r.b.StartTimer()
}

// waitAll waits, a second at a time, until every job is terminal or
// timeout has passed since the first submit, calling sample with the
// number of jobs ended after each look and progress every 30 s. Then it
// stops the clock.
func (r *benchRun) waitAll(timeout time.Duration, sample func(ended int), progress func(elapsed time.Duration, counts map[string]int)) {
	deadline := r.began.Add(timeout)
	lastReport := time.Now()
	for {
		sleep(r.ctx, time.Second)
		counts := r.statusCounts()
		open, ended := 0, 0
		for k, n := range counts {
			if store.Terminal(jobstate.JobStatus(k)) {
				ended += n
			} else {
				open += n
			}
		}
		sample(ended)
		if open == 0 {
			break
		}
		if time.Since(lastReport) >= 30*time.Second {
			lastReport = time.Now()
			progress(time.Since(r.began).Round(time.Second), counts)
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			r.timeout = true
			break
		}
	}
	r.b.StopTimer()
	r.ended = time.Now()
}

// finish takes the machine's CPU and the agents' and plugins' figures at
// the run's end and says so, as "<label>: done after …".
func (r *benchRun) finish(label string) {
	r.cpuEnd = readMachineCPU()
	for _, a := range r.agents {
		r.procs = append(r.procs, procTree(a.cmd.Process.Pid, a.name)...)
	}
	fmt.Fprintf(os.Stderr, "%s: done after %s\n", label, r.ended.Sub(r.began).Round(time.Second))
}

func (r *benchRun) statusCounts() map[string]int {
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

// endsPerAgent says which agent wrote each job's final event. The claim
// split, which decides the run's length (each agent has its own budgets).
func (r *benchRun) endsPerAgent() string {
	rows, err := r.h.pool.Query(r.ctx, `SELECT coalesce(agent, '-'), count(*) FROM job_timeline
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

// stream is one of the job's stored output streams.
func (r *benchRun) stream(id, name string) string {
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

// stderrTail is the end of the job's stderr (1,500 bytes at the most),
// its lines indented for a job's description.
func (r *benchRun) stderrTail(id string) string {
	stderr := r.stream(id, "stderr")
	if len(stderr) > 1500 {
		stderr = "…" + stderr[len(stderr)-1500:]
	}
	return strings.ReplaceAll(strings.TrimSpace(stderr), "\n", "\n    ")
}

// benchTally counts the jobs' ends: succeeded, failed, not terminal, with
// a description of the first 10 failed and the first 10 open ones, and
// the first and last job end.
type benchTally struct {
	succeeded, failed, open int
	failures                []string
	firstEnd, lastEnd       time.Time
}

// add counts job j and says whether it succeeded. describe describes it
// when it is one of the first open or failed ones.
func (t *benchTally) add(j store.Job, describe func() string) bool {
	if !store.Terminal(j.Status) {
		t.open++
		if t.open <= 10 {
			t.failures = append(t.failures, describe())
		}
		return false
	}
	if j.FinishedAt != nil {
		if t.firstEnd.IsZero() || j.FinishedAt.Before(t.firstEnd) {
			t.firstEnd = *j.FinishedAt
		}
		if j.FinishedAt.After(t.lastEnd) {
			t.lastEnd = *j.FinishedAt
		}
	}
	if j.Status != store.StatusSucceeded {
		t.failed++
		if t.failed <= 10 {
			t.failures = append(t.failures, describe())
		}
		return false
	}
	t.succeeded++
	return true
}

// must fails the benchmark when a job did not end by the run's timeout,
// did not succeed, or has a problem noted in failures.
func (t *benchTally) must(b *testing.B, timedOut bool, jobs int, timeout time.Duration) {
	if timedOut {
		b.Errorf("%d of %d jobs not terminal after %s", t.open, jobs, timeout)
	}
	if t.succeeded != jobs {
		b.Errorf("%d of %d jobs succeeded (%d failed, %d open); first ones:\n%s", t.succeeded, jobs, t.failed, t.open, strings.Join(t.failures, "\n"))
	} else if len(t.failures) > 0 {
		b.Errorf("%d problems:\n%s", len(t.failures), strings.Join(benchFirstN(t.failures, 10), "\n"))
	}
}

// benchPcts is the p50, p99 and max of ds, for a row of a report.
func benchPcts(ds []time.Duration) string {
	return fmt.Sprintf("p50 %8s  p99 %8s  max %8s",
		benchPct(ds, 0.5).Round(10*time.Millisecond), benchPct(ds, 0.99).Round(10*time.Millisecond), benchPct(ds, 1).Round(10*time.Millisecond))
}

// procKind is the figures of the processes of one kind (comm).
type procKind struct {
	n            int
	rssKB, hwmKB int64 // sums
	maxHWMKB     int64
	cpu          time.Duration
}

// addProc adds p, with CPU cpu, to its kind's figures in kinds.
func addProc(kinds map[string]*procKind, p procFigures, cpu time.Duration) {
	k := kinds[p.comm]
	if k == nil {
		k = &procKind{}
		kinds[p.comm] = k
	}
	k.n++
	k.rssKB, k.hwmKB, k.maxHWMKB, k.cpu = k.rssKB+p.rssKB, k.hwmKB+p.hwmKB, max(k.maxHWMKB, p.hwmKB), k.cpu+cpu
}

// note keeps s as an example, the first 3 at the most.
func (c *lineCheck) note(s string) {
	if len(c.examples) < 3 {
		c.examples = append(c.examples, s)
	}
}

// missing puts the missing line s first among the examples.
func (c *lineCheck) missing(s string) {
	c.examples = append([]string{s}, c.examples...)
}

// scanLines calls line with each line of s.
func scanLines(s string, line func(string)) {
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line(sc.Text())
	}
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
	// argv[0]'s base name. comm is cut at 15 bytes (tether-plugin-e…).
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

// lineCheck is what checkSynthLines (ECS) or checkDriverLines (Spark) found
// in one job's stdout.
type lineCheck struct {
	lost, dup, foreign, disorder int
	earlier                      int // lines of earlier tasks of the job, each once
	examples                     []string
}

func (c lineCheck) String() string {
	return fmt.Sprintf("lost %d, duplicated %d, foreign %d, out of order %d, earlier-task lines %d; e.g. %q",
		c.lost, c.dup, c.foreign, c.disorder, c.earlier, c.examples)
}

// stripExamples is c without its examples, for comparing counts.
func stripExamples(c lineCheck) lineCheck {
	c.examples = nil
	return c
}
