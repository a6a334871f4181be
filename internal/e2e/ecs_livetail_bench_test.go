package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// The ECS bench runs live tail and GetLogEvents polling side by side:
// TETHER_BENCH_ECS_LIVE [split] is "split" (even jobs follow their output
// with StartLiveTail, odd ones poll it), "on" or "off";
// TETHER_BENCH_ECS_LIVE_SESSIONS [2] is the plugin's live_tail_sessions.
type liveBenchConfig struct {
	mode     string
	sessions int
}

const benchLogGroup = "/tether/bench"

func liveBenchFromEnv(b *testing.B) liveBenchConfig {
	c := liveBenchConfig{mode: "split", sessions: 2}
	if v := os.Getenv("TETHER_BENCH_ECS_LIVE"); v != "" {
		if v != "split" && v != "on" && v != "off" {
			b.Fatalf("TETHER_BENCH_ECS_LIVE=%q: want split, on or off", v)
		}
		c.mode = v
	}
	benchEnvInt(b, "TETHER_BENCH_ECS_LIVE_SESSIONS", &c.sessions)
	if c.sessions < 1 || c.sessions > ecs.MaxLiveTailSessions {
		b.Fatalf("TETHER_BENCH_ECS_LIVE_SESSIONS=%d: want 1-%d", c.sessions, ecs.MaxLiveTailSessions)
	}
	return c
}

// live reports whether job i follows its output live.
func (c liveBenchConfig) live(i int) bool {
	return c.mode == "on" || c.mode == "split" && i%2 == 0
}

// jobContext is job i's context: its line count, and how it follows its
// output.
func (r *ecsBench) jobContext(i int) map[string]any {
	lc := liveBenchFromEnv(r.b)
	return map[string]any{
		"container_overrides": []any{map[string]any{
			"name": ecsContainer, "environment": map[string]string{"SYNTH_LINES": strconv.Itoa(r.cfg.lines(i))},
		}},
		"live_tail":          lc.live(i),
		"live_tail_sessions": lc.sessions,
	}
}

// createLogGroup makes the jobs' log group before any task logs, as a
// deployment has it (awslogs would create it with the first stream, and a
// live tail starts once it exists).
func (r *ecsBench) createLogGroup() {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"logGroupName":"`+benchLogGroup+`"}`))
	req.Header.Set("X-Amz-Target", "Logs_20140328.CreateLogGroup")
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	w := httptest.NewRecorder()
	r.em.Handler().ServeHTTP(w, req)
	require.Equal(r.b, http.StatusOK, w.Code, "creating %s: %s", benchLogGroup, w.Body)
}

// followFigures are one way of following output's results over its jobs.
type followFigures struct {
	jobs, lines int
	lag         []time.Duration // line written → stored by tether
	stopToEnd   []time.Duration
	reads       int // GetLogEvents calls naming the jobs' final streams
}

// liveTailReport compares the live and the polled jobs of the run.
func (r *ecsBench) liveTailReport(rep *strings.Builder, elapsed time.Duration) {
	lc := liveBenchFromEnv(r.b)
	figs := map[bool]*followFigures{true: {}, false: {}}
	for i, id := range r.ids {
		r.addFollowFigures(figs[lc.live(i)], id)
	}
	calls, _ := r.em.Calls()
	fmt.Fprintf(rep, "---- following output: live tail (StartLiveTail, %d session(s) per agent) vs GetLogEvents polling, same run ----\n", lc.sessions)
	fmt.Fprintf(rep, "%-8s %5s %7s | %-30s | %-30s | %s\n", "mode", "jobs", "lines", "output lag p50 / p99 / max", "task stop → job end p50 / p99", "GetLogEvents on their streams")
	for _, live := range []bool{true, false} {
		f := figs[live]
		if f.jobs == 0 {
			continue
		}
		name := map[bool]string{true: "live", false: "polled"}[live]
		fmt.Fprintf(rep, "%-8s %5d %7d | %8s %8s %8s     | %8s %8s            | %d calls, %.2f/s\n", name, f.jobs, f.lines,
			benchPct(f.lag, 0.5).Round(10*time.Millisecond), benchPct(f.lag, 0.99).Round(10*time.Millisecond), benchPct(f.lag, 1).Round(10*time.Millisecond),
			benchPct(f.stopToEnd, 0.5).Round(10*time.Millisecond), benchPct(f.stopToEnd, 0.99).Round(10*time.Millisecond),
			f.reads, float64(f.reads)/elapsed.Seconds())
		r.b.ReportMetric(benchPct(f.lag, 0.99).Seconds(), name+"-lag-p99-s")
		r.b.ReportMetric(benchPct(f.stopToEnd, 0.99).Seconds(), name+"-stop-to-end-p99-s")
	}
	fmt.Fprintf(rep, "StartLiveTail: %d calls; sessions open at the end: %d (account quota %d)\n",
		calls["StartLiveTail"], r.em.LiveTailSessions(), emulator.DefaultLiveTailSessions)
	liveArithmetic(rep, r.cfg, lc)
}

// addFollowFigures adds job id's lag, stop → end and reads.
func (r *ecsBench) addFollowFigures(f *followFigures, id string) {
	j := r.h.job(r.ctx, id)
	var out ecs.Output
	if json.Unmarshal(j.Result, &out) != nil || len(out.Tasks) != 1 || j.FinishedAt == nil {
		return
	}
	arn := out.Tasks[0].TaskARN
	taskID := arn[strings.LastIndex(arn, "/")+1:]
	stream := "job/" + ecsContainer + "/" + taskID
	written := map[string]time.Time{}
	for _, ev := range r.em.LogEvents(benchLogGroup, stream) {
		written[ev.Message] = ev.Timestamp
	}
	f.jobs++
	f.reads += len(r.rec.readsOf(stream))
	// The task's end is when its containers had all exited (it is STOPPED
	// only after DEPROVISIONING), as in the run's own stop → terminal.
	if ti, ok := r.em.Task(arn); ok && !ti.ExecutionStoppedAt.IsZero() {
		f.stopToEnd = append(f.stopToEnd, j.FinishedAt.Sub(ti.ExecutionStoppedAt))
	}
	var after int64
	for {
		chunks, err := r.h.st.Logs(r.ctx, id, "stdout", after, 1000)
		require.NoError(r.b, err)
		if len(chunks) == 0 {
			return
		}
		for _, c := range chunks {
			for _, line := range strings.Split(strings.TrimSuffix(string(c.Data), "\n"), "\n") {
				if at, ok := written[line]; ok {
					f.lines++
					f.lag = append(f.lag, c.At.Sub(at))
				}
			}
			after = c.Seq
		}
	}
}

// liveArithmetic prints what the run's settings give at 10,000 one-task
// jobs on 3 agents, for each way of following output.
func liveArithmetic(rep *strings.Builder, cfg ecsBenchConfig, lc liveBenchConfig) {
	const jobs, agents, sessionRate, quota = 10000, 3, 500.0, emulator.DefaultLiveTailSessions
	perAgent := math.Ceil(float64(jobs) / agents)
	lineRate := float64(jobs) / cfg.interval.Seconds() // lines a second, fleet-wide
	getLogs := ecs.DefaultAPIRates["get_log_events"]
	fmt.Fprintf(rep, "---- arithmetic for %d one-task jobs on %d agents (%.0f tasks per agent), one line per %s per task ----\n", jobs, agents, perAgent, cfg.interval)
	fmt.Fprintf(rep, "polling: GetLogEvents %.0f/s per agent, %.0f/s fleet (account 10/s): a running task's tail every %.1f min; ends need ~2 calls: at most %.1f jobs end/s fleet-wide\n",
		getLogs, getLogs*agents, perAgent/getLogs/60, getLogs*agents/2)
	k := lc.sessions
	perSession := lineRate / float64(k) // a prefix session carries every agent's lines of its share
	fmt.Fprintf(rep, "live tail: %d session(s) per agent, %d in the account (quota %d); each carries %.0f lines/s (sampled above %.0f/s)",
		k, k*agents, quota, perSession, sessionRate)
	if perSession <= sessionRate && k*agents <= quota {
		fmt.Fprintf(rep, ": no sampling, output lag ≈ CloudWatch's ingestion + ≤ 1 s, job end ≈ log_settle + ≤ 2 s after the stop, GetLogEvents only for gaps\n")
		return
	}
	need := int(math.Ceil(lineRate / sessionRate))
	fmt.Fprintf(rep, ": SAMPLED. %d session(s) per agent would be needed (%d in the account", need, need*agents)
	maxRate := sessionRate * float64(quota/agents)
	fmt.Fprintf(rep, "); within the quota %d agents follow at most %.0f lines/s fleet-wide live (%d sessions each), i.e. one line per %.1f s per task; above it streams fall back to polling\n",
		agents, maxRate, quota/agents, float64(jobs)/maxRate)
}
