package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/localstack/emulator"
)

// BenchmarkLivenessKill9 measures how long a kill -9'd agent's resumable
// jobs wait for another agent, with the default timings (keepalive 5s,
// stale_job 120s, clean_interval 10s, dead_after its default 2×keepalive).
// A round. Agent "victim" holds TETHER_BENCH_LIVENESS_JOBS running jobs,
// agent "rescuer" starts idle, the victim gets SIGKILL at a random point of
// the rescuer's keepalive cycle (the database's now() read just before is
// the kill's time). Per job, the figure is kill →
// its first `resumed` event, which the rescuer writes as it starts the
// plugin's Resume. Two plugins (the resumable test plugin, and ECS jobs
// against the emulator in this process, synthetic tasks), two paths side
// by side: name-lock liveness on (the default) and off
// (agent.name_lock_liveness: false: stale_job plus up to a janitor pass,
// about 125–130 s). It prints p50 and max per plugin and path, their ratio
// on/off and the target check (max ≤ 2×keepalive + keepalive + 1s). It
// asserts no timing, only that every job was resumed by the rescuer.
//
// An off round takes over two minutes, so rounds run in lanes at once,
// each round on a fresh database of the benchmark's own cluster with its
// own two agents (the shared test cluster's 300 connections are too few
// for 20 agents' pools).
//
//	make bench-liveness
//	go test -count=1 -run '^$' -bench '^BenchmarkLivenessKill9$' -benchtime 1x -timeout 40m ./internal/e2e/
//
// Sizes come from the environment (defaults in brackets):
// TETHER_BENCH_LIVENESS_ROUNDS [20 per plugin and path],
// TETHER_BENCH_LIVENESS_LANES [10 rounds at once],
// TETHER_BENCH_LIVENESS_JOBS [10 per round],
// TETHER_BENCH_LIVENESS_PLUGINS [resumable,ecs].
func BenchmarkLivenessKill9(b *testing.B) {
	if testing.Short() {
		b.Skip("a benchmark of several minutes: not with -short")
	}
	runOnce(b, func() oneRun { return &livenessBench{b: b, cfg: livenessBenchFromEnv(b)} })
}

type livenessBenchConfig struct {
	rounds, lanes, jobs int
	plugins             []string
}

func livenessBenchFromEnv(b *testing.B) livenessBenchConfig {
	c := livenessBenchConfig{rounds: 20, lanes: 10, jobs: 10, plugins: []string{"resumable", "ecs"}}
	benchEnvInt(b, "TETHER_BENCH_LIVENESS_ROUNDS", &c.rounds)
	benchEnvInt(b, "TETHER_BENCH_LIVENESS_LANES", &c.lanes)
	benchEnvInt(b, "TETHER_BENCH_LIVENESS_JOBS", &c.jobs)
	if v := os.Getenv("TETHER_BENCH_LIVENESS_PLUGINS"); v != "" {
		c.plugins = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "resumable" && p != "ecs" {
				b.Fatalf("TETHER_BENCH_LIVENESS_PLUGINS=%q: want resumable and/or ecs, comma-separated", v)
			}
			c.plugins = append(c.plugins, strings.TrimSpace(p))
		}
	}
	return c
}

// livenessBenchTimings are the defaults (internal/defaults) but capacity.
// The victim holds jobs jobs, the rescuer takes them all.
func livenessBenchTimings(jobs int) timings {
	return timings{
		Capacity:      jobs,
		PollInterval:  time.Second,
		Keepalive:     5 * time.Second,
		StaleJob:      120 * time.Second,
		OfflineAfter:  15 * time.Second,
		CleanInterval: 10 * time.Second,
		AWOLTimeout:   time.Hour,
		KillGrace:     time.Second,
	}
}

// livenessPath is one (plugin, on/off) cell of the report.
type livenessPath struct {
	plugin string
	on     bool
}

func (p livenessPath) state() string {
	if p.on {
		return "on"
	}
	return "off"
}

func (p livenessPath) String() string { return p.plugin + "/" + p.state() }

// livenessRound is one round's result.
type livenessRound struct {
	path   livenessPath
	n      int
	took   []time.Duration // per job: kill → resumed
	early  int             // jobs whose release said "name lock free"
	failed bool
}

type livenessBench struct {
	b   *testing.B
	cfg livenessBenchConfig
	ctx context.Context
	tm  timings

	admin    *pgxpool.Pool // the cluster's postgres database: CREATE/DROP DATABASE
	tmplURL  string        // the migrated database the rounds' are copies of
	createMu sync.Mutex    // one CREATE DATABASE … TEMPLATE at a time
	seq      int
	emURL    string

	began   time.Time
	results []livenessRound
}

func (r *livenessBench) setUp() {
	b, cfg := r.b, r.cfg
	ctx, cancel := context.WithTimeout(context.Background(), 38*time.Minute)
	b.Cleanup(cancel)
	r.ctx = ctx
	r.tm = livenessBenchTimings(cfg.jobs)
	// Each agent: its pool (capacity + 8), heartbeat pool (2), name lock
	// and listener. Two agents per lane.
	maxConns := cfg.lanes*2*(cfg.jobs+12) + 40
	r.tmplURL = startBenchCluster(b, maxConns)
	u, err := url.Parse(r.tmplURL)
	require.NoError(b, err)
	u.Path = "/postgres"
	r.admin, err = pgxpool.New(ctx, u.String())
	require.NoError(b, err)
	b.Cleanup(r.admin.Close)

	opts := emulator.HostileOptions()
	opts.InfraStopRate = 0 // a relaunch is not what this measures
	opts.StopTimeout = 2 * time.Second
	em := emulator.New(opts)
	r.emURL, err = em.Start("127.0.0.1:0")
	require.NoError(b, err)
	b.Cleanup(func() { _ = em.Close() })
	b.Logf("liveness bench: plugins %v, %d rounds per plugin and path, %d jobs per round, %d lanes; keepalive %s, stale_job %s, clean_interval %s, dead_after default (2×keepalive); PostgreSQL max_connections %d",
		cfg.plugins, cfg.rounds, cfg.jobs, cfg.lanes, r.tm.Keepalive, r.tm.StaleJob, r.tm.CleanInterval, maxConns)
}

func (r *livenessBench) run() {
	cfg := r.cfg
	// Off rounds first. They are the long ones, so the lanes end together.
	var queue []livenessRound
	for _, on := range []bool{false, true} {
		for n := 1; n <= cfg.rounds; n++ {
			for _, p := range cfg.plugins {
				queue = append(queue, livenessRound{path: livenessPath{plugin: p, on: on}, n: n})
			}
		}
	}
	rounds := make(chan livenessRound, len(queue))
	for _, q := range queue {
		rounds <- q
	}
	close(rounds)
	done := make(chan livenessRound)
	var wg sync.WaitGroup
	r.began = time.Now()
	r.b.StartTimer()
	for range min(cfg.lanes, len(queue)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range rounds {
				if r.ctx.Err() != nil {
					return
				}
				done <- r.runRound(q)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for res := range done {
		r.results = append(r.results, res)
		p50, mx := p50Max(res.took)
		state := fmt.Sprintf("p50 %s max %s, %d/%d released early", p50.Round(100*time.Millisecond), mx.Round(100*time.Millisecond), res.early, len(res.took))
		if res.failed {
			state = "FAILED"
		}
		fmt.Fprintf(os.Stderr, "liveness bench: %s round %d: %s (%d/%d rounds, %s)\n",
			res.path, res.n, state, len(r.results), len(queue), time.Since(r.began).Round(time.Second))
	}
	r.b.StopTimer()
}

// runRound runs one round in a goroutine of its own, under a laneT: a
// failing helper ends the round, not the benchmark.
func (r *livenessBench) runRound(q livenessRound) livenessRound {
	lt := &laneT{TB: r.b, prefix: q.path.String() + " round " + strconv.Itoa(q.n)}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer lt.runCleanups()
		q.took, q.early = r.round(lt, q)
	}()
	<-finished
	q.failed = lt.Failed()
	return q
}

// round: a fresh database, the victim with its jobs running, the idle
// rescuer, the kill, and each job's kill → resumed.
func (r *livenessBench) round(t *laneT, q livenessRound) (took []time.Duration, early int) {
	ctx, cancel := context.WithTimeout(r.ctx, r.tm.StaleJob+4*time.Minute)
	defer cancel()
	dbURL := r.newDB(t)
	var h *harness
	if q.path.plugin == "ecs" {
		h = newECSBenchHarness(t, dbURL, r.tm, r.emURL, ecsBenchConfig{interval: time.Second})
	} else {
		h = newHarness(t, dbURL, r.tm)
	}
	if !q.path.on {
		h.setAgentYAML("name_lock_liveness: false")
	}
	name := fmt.Sprintf("%s-%s-%d", q.path.plugin, q.path.state(), q.n)
	victim := h.startAgent(ctx, name+"-victim")
	ids := make([]string, r.cfg.jobs)
	for i := range ids {
		if q.path.plugin == "ecs" {
			ids[i] = h.submitSynthetic(ctx, 600) // 10 minutes of output: outlives the round
		} else {
			ids[i] = h.submitResumable(ctx, 10*time.Minute)
		}
	}
	for _, id := range ids {
		h.waitHandle(ctx, id, 2*time.Minute)
	}
	rescuer := h.startAgent(ctx, name+"-rescuer")
	// The rescuer's check runs every keepalive from its start. Kill at a
	// random point of that cycle, as a crash would come, not always just
	// after a check (which is the worst case, dead_after + keepalive).
	sleep(ctx, rand.N(r.tm.Keepalive))

	killedAt := h.dbNow(ctx)
	h.kill9(victim)
	wait := r.tm.StaleJob + 2*r.tm.CleanInterval + time.Minute
	deadline := time.Now().Add(wait)
	for {
		var n int
		require.NoError(t, h.pool.QueryRow(ctx,
			`SELECT count(DISTINCT job_id) FROM job_timeline WHERE job_id = ANY($1) AND kind = 'resumed'`, ids).Scan(&n))
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs resumed %s after the kill", n, len(ids), wait)
		}
		sleep(ctx, 200*time.Millisecond)
	}
	for _, id := range ids {
		var released, resumed event
		for _, e := range h.events(ctx, id) {
			switch {
			case e.Kind == "released" && released.ID == 0:
				released = e
			case e.Kind == "resumed" && resumed.ID == 0:
				resumed = e
			}
		}
		require.Equal(t, rescuer.gen, resumed.Generation, "job %s: resumed by the rescuer: %s", id, h.eventSummary(ctx, id))
		took = append(took, resumed.At.Sub(killedAt))
		if strings.Contains(released.Message, earlyReason) {
			early++
		}
	}
	return took, early
}

// newDB creates a fresh copy of the migrated template database, dropped
// when the round ends.
func (r *livenessBench) newDB(t *laneT) string {
	r.createMu.Lock()
	r.seq++
	name := fmt.Sprintf("liveness_%d", r.seq)
	_, err := r.admin.Exec(r.ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE tether", pgx.Identifier{name}.Sanitize()))
	r.createMu.Unlock()
	require.NoError(t, err, "creating database %s", name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := r.admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize())); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(r.tmplURL)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func (r *livenessBench) check() {
	r.report(os.Stderr)
}

// report prints a table per plugin: path, rounds, jobs, p50, max, how many
// were released by the early path, the ratio on/off and the target check.
func (r *livenessBench) report(w io.Writer) {
	target := 2*r.tm.Keepalive + r.tm.Keepalive + time.Second
	fmt.Fprintf(w, "\nliveness bench: kill -9 → resumed by the idle agent, per job; keepalive %s, stale_job %s, clean_interval %s, dead_after %s; %d jobs per round; %s in all\n",
		r.tm.Keepalive, r.tm.StaleJob, r.tm.CleanInterval, 2*r.tm.Keepalive, r.cfg.jobs, time.Since(r.began).Round(time.Second))
	for _, plugin := range r.cfg.plugins {
		fmt.Fprintf(w, "\n%s plugin\n", plugin)
		fmt.Fprintf(w, "  %-32s %6s %6s %6s %9s %9s %14s\n", "path", "rounds", "failed", "jobs", "p50", "max", "early releases")
		p50s, maxes := map[bool]time.Duration{}, map[bool]time.Duration{}
		for _, on := range []bool{true, false} {
			var took []time.Duration
			rounds, failed, early := 0, 0, 0
			for _, res := range r.results {
				if res.path != (livenessPath{plugin: plugin, on: on}) {
					continue
				}
				rounds++
				if res.failed {
					failed++
					continue
				}
				took = append(took, res.took...)
				early += res.early
			}
			p50, mx := p50Max(took)
			p50s[on], maxes[on] = p50, mx
			label := "off (name_lock_liveness: false)"
			if on {
				label = "on (default)"
			}
			fmt.Fprintf(w, "  %-32s %6d %6d %6d %9s %9s %14s\n", label, rounds, failed, len(took),
				p50.Round(100*time.Millisecond), mx.Round(100*time.Millisecond), fmt.Sprintf("%d/%d", early, len(took)))
			state := livenessPath{plugin: plugin, on: on}.state()
			r.b.ReportMetric(p50.Seconds(), plugin+"-"+state+"-p50-s")
			r.b.ReportMetric(mx.Seconds(), plugin+"-"+state+"-max-s")
		}
		if p50s[false] > 0 && maxes[false] > 0 {
			fmt.Fprintf(w, "  %-32s %6s %6s %6s %9.3f %9.3f\n", "ratio on/off", "", "", "",
				p50s[true].Seconds()/p50s[false].Seconds(), maxes[true].Seconds()/maxes[false].Seconds())
		}
		met := "no"
		if maxes[true] > 0 && maxes[true] <= target {
			met = "yes"
		}
		fmt.Fprintf(w, "  target max ≤ 2×keepalive + keepalive + 1s = %s: %s (on: max %s)\n", target, met, maxes[true].Round(100*time.Millisecond))
	}
}

// submitSynthetic submits an ecs job (the bench harness's command: one
// synthetic container) printing lines lines, one a second.
func (h *harness) submitSynthetic(ctx context.Context, lines int) string {
	h.t.Helper()
	c, err := json.Marshal(map[string]any{"container_overrides": []any{map[string]any{
		"name": ecsContainer, "environment": map[string]string{"SYNTH_LINES": strconv.Itoa(lines)},
	}}})
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "ecs", Plugin: "ecs", Context: c, Submitter: "bench"})
	require.NoError(h.t, err)
	return j.ID
}

// laneT is the testing.TB a benchmark round runs under on a goroutine of
// its own. The helpers' FailNow (require, Fatalf) ends that goroutine, not
// the benchmark's, cleanups run when the round ends (its agents and
// database go at once, not after the benchmark), and Failed is the round's.
// Errors and logs go to the benchmark, prefixed with the round.
type laneT struct {
	testing.TB
	prefix string

	mu       sync.Mutex
	failed   bool
	cleanups []func()
}

func (l *laneT) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// runCleanups runs the cleanups, last registered first.
func (l *laneT) runCleanups() {
	l.mu.Lock()
	fs := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (l *laneT) Fail() {
	l.mu.Lock()
	l.failed = true
	l.mu.Unlock()
	l.TB.Fail()
}

func (l *laneT) Failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// FailNow ends the round's goroutine (its deferred cleanups run).
func (l *laneT) FailNow() {
	l.Fail()
	runtime.Goexit()
}

func (l *laneT) Error(args ...any) { l.Errorf("%s", fmt.Sprint(args...)) }

func (l *laneT) Errorf(format string, args ...any) {
	l.Fail()
	l.TB.Errorf("%s: %s", l.prefix, fmt.Sprintf(format, args...))
}

func (l *laneT) Fatal(args ...any) { l.Error(args...); l.FailNow() }

func (l *laneT) Fatalf(format string, args ...any) { l.Errorf(format, args...); l.FailNow() }

func (l *laneT) Log(args ...any) { l.Logf("%s", fmt.Sprint(args...)) }

func (l *laneT) Logf(format string, args ...any) {
	l.TB.Logf("%s: %s", l.prefix, fmt.Sprintf(format, args...))
}
