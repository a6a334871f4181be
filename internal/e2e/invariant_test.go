package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// TestInvariant runs rounds of seeded random chaos against real PostgreSQL,
// real agent processes and real plugin processes — submits (resumable jobs
// that succeed or fail retriably or permanently, with retries and short
// backoffs; shell jobs), kill -9 of agents and of plugin processes,
// restarts under the same name and under new names, SIGTERM drains,
// cancels and operator requeues through the API, short and long database
// outages, a hung database (SIGSTOP of the whole cluster), an agent frozen
// alone (SIGSTOP; its plugins run on), failovers to an asynchronous standby
// with and without lost history — then lets every job end and checks, from
// what the database, the resumable plugin's launch journals and the shell
// jobs' own tick files recorded (not from the schedule), the invariants of
// invariant_check_test.go, output lines per job included.
//
// Knobs (environment):
//
//	TETHER_INVARIANT_SEED=<n>        seed of the first round (round k uses n+k-1); default: the time
//	TETHER_INVARIANT_ROUNDS=<n>      rounds to run (default 2)
//	TETHER_INVARIANT_DURATION=<d>    keep starting rounds until d has passed (make soak SOAK=30m)
//	TETHER_INVARIANT_CHAOS=<d>       chaos per round (default 40s)
//
// A seed fixes the schedule (which steps, in which order, with which jobs
// and pauses), not the timing of the processes it acts on. A rerun with the
// same seed replays the same chaos, which usually, not always, hits the
// same race again.
func TestInvariant(t *testing.T) {
	s := invariantSettings(t)
	t.Logf("invariant test: base seed %d (%s); %s of chaos per round; %s",
		s.seed, s.seedFrom, s.chaos, s.plan())
	began := time.Now()
	var failed []uint64
	for round := 1; ; round++ {
		if s.duration > 0 {
			if round > 1 && time.Since(began) >= s.duration {
				break
			}
		} else if round > s.rounds {
			break
		}
		seed := s.seed + uint64(round-1)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runInvariantRound(t, seed, s) }) {
			failed = append(failed, seed)
		}
	}
	t.Logf("invariant test: %s in all", time.Since(began).Round(time.Second))
	for _, seed := range failed {
		t.Logf("failed round: rerun with  %s=%d %s=1 go test -race -count=1 -run 'TestInvariant$' -v ./internal/e2e/", envInvSeed, seed, envInvRounds)
	}
}

const (
	envInvSeed     = "TETHER_INVARIANT_SEED"
	envInvRounds   = "TETHER_INVARIANT_ROUNDS"
	envInvDuration = "TETHER_INVARIANT_DURATION"
	envInvChaos    = "TETHER_INVARIANT_CHAOS"
)

type invSettings struct {
	seed     uint64
	seedFrom string
	rounds   int           // without duration
	duration time.Duration // soak: start rounds until it has passed
	chaos    time.Duration // per round
	settle   time.Duration // per round: how long jobs get to end after the chaos
}

func (s invSettings) plan() string {
	if s.duration > 0 {
		return fmt.Sprintf("rounds until %s have passed", s.duration)
	}
	return fmt.Sprintf("%d round(s)", s.rounds)
}

func invariantSettings(t *testing.T) invSettings {
	s := invSettings{seed: uint64(time.Now().UnixNano()), seedFrom: "from the time", rounds: 2, chaos: 40 * time.Second, settle: 45 * time.Second}
	if v := os.Getenv(envInvSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", envInvSeed, v)
		}
		s.seed, s.seedFrom = n, "from "+envInvSeed
	}
	if v := os.Getenv(envInvRounds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envInvRounds, v)
		}
		s.rounds = n
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{envInvDuration, &s.duration}, {envInvChaos, &s.chaos}} {
		if v := os.Getenv(d.env); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				t.Fatalf("%s=%q: want a positive Go duration such as 30m", d.env, v)
			}
			*d.dst = x
		}
	}
	return s
}

// invariantTimings: fast, with room between a short outage (at most about
// 1 s with the stop and start) and self-fencing (stale_job − 2×keepalive −
// max_kill_grace = 4 − 0.6 − 0.25 = 3.15 s).
func invariantTimings() timings {
	tm := fast()
	tm.Keepalive = 300 * time.Millisecond
	tm.StaleJob = 4 * time.Second
	tm.OfflineAfter = 1200 * time.Millisecond
	tm.CleanInterval = 500 * time.Millisecond
	return tm
}

// invSlot is one agent name and the process currently running under it.
type invSlot struct {
	name    string
	proc    *agentProc
	state   string // live, draining or dead
	since   time.Time
	api     *client.Client
	handoff string
}

type invRound struct {
	t       *testing.T
	seed    uint64
	h       *harness
	cluster *pgcluster.Cluster // the primary
	standby *pgcluster.Cluster // asynchronous, streaming from it
	rng     *rand.Rand
	tm      timings
	began   time.Time

	slots    []*invSlot
	nextName int
	agents   map[int]invAgent // every agent process started, by pid

	jobs      []string
	submitted map[string]time.Time
	requeues  map[string]int
	keys      int

	lastOutage, lastLong, lastFailover time.Time
	losses                             []lossWindow
	actions                            map[string]int
	notes                              []string
}

func runInvariantRound(t *testing.T, seed uint64, s invSettings) {
	t.Logf("seed %d — rerun this round alone with: %s=%d %s=1 go test -race -count=1 -run 'TestInvariant$' -v ./internal/e2e/",
		seed, envInvSeed, seed, envInvRounds)
	ctx, cancel := context.WithTimeout(context.Background(), s.chaos+s.settle+2*time.Minute)
	defer cancel()
	cluster, standby, url := pgtest.StartReplicated(t, false)
	tm := invariantTimings()
	r := &invRound{
		t: t, seed: seed, cluster: cluster, standby: standby, tm: tm, began: time.Now(),
		submitted: map[string]time.Time{},
		h:         newHarness(t, url, tm),
		rng:       rand.New(rand.NewPCG(seed, 0x7e7e)),
		agents:    map[int]invAgent{},
		requeues:  map[string]int{},
		actions:   map[string]int{},
	}
	t.Cleanup(r.killWork)

	for range 3 {
		r.startNew(ctx)
	}
	r.chaos(ctx, s.chaos)
	r.settle(ctx, s.settle)
	if ctx.Err() != nil {
		t.Fatalf("round ran out of time: %v", ctx.Err())
	}
	d := r.collect(ctx)
	r.report(d, checkInvariants(d))
}

func (r *invRound) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%7.2fs  %s", time.Since(r.began).Seconds(), fmt.Sprintf(format, args...))
}

func (r *invRound) note(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, msg)
	r.logf("note: %s", msg)
}

// ---- the schedule ----

func (r *invRound) chaos(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	r.submit(ctx, 6+r.rng.IntN(5))
	for time.Now().Before(end) && ctx.Err() == nil {
		r.reap()
		r.step(ctx)
		sleep(ctx, time.Duration(100+r.rng.IntN(1100))*time.Millisecond)
	}
}

// step picks one action, weighted by what the state allows.
func (r *invRound) step(ctx context.Context) {
	live, dead := r.inState("live"), r.inState("dead")
	type choice struct {
		w  float64
		do func()
	}
	var cs []choice
	add := func(w float64, do func()) {
		if w > 0 {
			cs = append(cs, choice{w, do})
		}
	}
	few := len(live) < 2
	if len(r.jobs) < 150 {
		add(4, func() { r.submit(ctx, 1+r.rng.IntN(3)) })
	}
	if len(live) > 0 {
		add(1.3, func() { r.kill9(r.pick(live)) })
		add(1.2, func() { r.killPlugin(r.pick(live)) })
	}
	if len(live) > 1 {
		add(0.8, func() { r.drain(r.pick(live)) })
	}
	if len(dead) > 0 {
		add(map[bool]float64{true: 5, false: 1.5}[few], func() { r.restart(ctx, r.pick(dead)) })
	}
	if len(live) < 4 {
		add(map[bool]float64{true: 3, false: 0.6}[few], func() { r.startNew(ctx) })
	}
	if len(live) > 0 {
		add(1.5, func() { r.cancel(ctx) })
		add(1.0, func() { r.requeue(ctx) })
	}
	if len(live) > 1 {
		add(0.5, func() { r.freezeAgent(ctx, r.pick(live)) })
	}
	if time.Since(r.lastOutage) > 8*time.Second {
		add(0.35, func() { r.outage(ctx, false) })
		add(0.25, func() { r.freezeDatabase(ctx, false) })
		if time.Since(r.lastLong) > 30*time.Second {
			add(0.12, func() { r.outage(ctx, true) })
			add(0.06, func() { r.lastLong = time.Now(); r.freezeDatabase(ctx, true) })
		}
		if time.Since(r.lastFailover) > 15*time.Second {
			add(0.35, func() { r.failover(ctx, true) })
			add(0.2, func() { r.failover(ctx, false) })
		}
	}
	var sum float64
	for _, c := range cs {
		sum += c.w
	}
	x := r.rng.Float64() * sum
	for _, c := range cs {
		if x -= c.w; x < 0 {
			c.do()
			return
		}
	}
}

func (r *invRound) inState(state string) []*invSlot {
	var out []*invSlot
	for _, s := range r.slots {
		if s.state == state {
			out = append(out, s)
		}
	}
	return out
}

func (r *invRound) pick(slots []*invSlot) *invSlot { return slots[r.rng.IntN(len(slots))] }

// reap notices agents that exited: drained ones, and any that ended on
// their own (which is worth a note).
func (r *invRound) reap() {
	for _, s := range r.slots {
		switch {
		case s.state == "dead":
		case s.proc.exited() && s.state == "draining":
			r.logf("agent %s exited %d after its drain (%s)", s.name, s.proc.cmd.ProcessState.ExitCode(), time.Since(s.since).Round(time.Millisecond))
			s.state = "dead"
		case s.proc.exited():
			r.note("agent %s (gen %s) exited on its own: %v\n%s", s.name, short(s.proc.gen), s.proc.waitEr, s.proc.out.tail(3000))
			s.state = "dead"
		case s.state == "draining" && time.Since(s.since) > 20*time.Second:
			r.note("agent %s still draining %s after SIGTERM; killing it", s.name, time.Since(s.since).Round(time.Second))
			r.h.kill9(s.proc)
			s.state = "dead"
		}
	}
}

func (r *invRound) submit(ctx context.Context, n int) {
	r.actions["submit"] += n
	var what []string
	for range n {
		if r.rng.Float64() < 0.7 {
			what = append(what, r.submitResumable(ctx))
		} else {
			what = append(what, r.submitShell(ctx))
		}
	}
	r.logf("submit %s", strings.Join(what, ", "))
}

func (r *invRound) submitResumable(ctx context.Context) string {
	dur := 300 + r.rng.IntN(4500)
	c := map[string]any{"duration_ms": dur}
	desc := fmt.Sprintf("resumable %dms", dur)
	switch p := r.rng.Float64(); {
	case p < 0.15:
		c["fail"], c["fail_class"] = "chaos: permanent failure", "permanent"
		desc += " fail permanent"
	case p < 0.32:
		at := []int{1}
		if r.rng.IntN(2) == 0 {
			at = []int{1, 2}
		}
		c["fail"], c["fail_class"], c["fail_attempts"] = "chaos: retriable failure", "retriable", at
		desc += fmt.Sprintf(" fail retriable on %v", at)
	case p < 0.40:
		c["fail"], c["fail_class"] = "chaos: retriable failure", "retriable"
		desc += " fail retriable always"
	}
	l := limits.Set{MaxRetry: r.rng.IntN(4), RetryBackoff: time.Duration(50+r.rng.IntN(250)) * time.Millisecond, RetryBackoffMax: 600 * time.Millisecond}
	if dur > 1500 && r.rng.Float64() < 0.1 {
		l.ActiveTimeout = time.Duration(dur/2) * time.Millisecond
		desc += fmt.Sprintf(" active_timeout %s", l.ActiveTimeout)
	}
	return r.submitJob(ctx, "resumable", c, l, desc)
}

// submitShell submits a shell job whose run prints lines unique to it
// ("a<attempt> p<pid> line <i>", then "a<attempt> p<pid> slept") and appends a tick per line
// to a file of its own, outside the database, for the checker.
func (r *invRound) submitShell(ctx context.Context) string {
	lines := 2 + r.rng.IntN(28) // a tenth of a second each
	script := fmt.Sprintf(`echo $$ > %q/"$TETHER_JOB_ID".pid; i=1; while [ $i -le %d ]; do `+
		`echo "$TETHER_JOB_ATTEMPT $$ $(date +%%s%%N)" >> %q/"$TETHER_JOB_ID".ticks; `+
		`echo "a$TETHER_JOB_ATTEMPT p$$ line $i"; i=$((i+1)); sleep 0.1; done; echo "a$TETHER_JOB_ATTEMPT p$$ slept"`, r.h.pidDir, lines, r.h.pidDir)
	desc := fmt.Sprintf("shell %d lines", lines)
	if r.rng.Float64() < 0.1 {
		script += "; exit 3"
		desc += " exit 3"
	}
	l := limits.Set{MaxRetry: r.rng.IntN(3), RetryBackoff: time.Duration(50+r.rng.IntN(250)) * time.Millisecond, RetryBackoffMax: 600 * time.Millisecond}
	return r.submitJob(ctx, "shell", map[string]any{"script": script}, l, desc)
}

func (r *invRound) submitJob(ctx context.Context, command string, c map[string]any, l limits.Set, desc string) string {
	raw, err := json.Marshal(c)
	if err != nil {
		r.t.Fatalf("encoding a context: %v", err)
	}
	j, _, err := r.h.st.Submit(ctx, store.SubmitParams{Command: command, Plugin: command, Context: raw, Submitter: "invariant", Limits: l})
	if err != nil {
		r.note("submitting %s: %v", desc, err)
		return desc + " (not submitted)"
	}
	r.jobs = append(r.jobs, j.ID)
	r.submitted[j.ID] = time.Now()
	return fmt.Sprintf("%s [%s, max_retry %d]", j.ID, desc, l.MaxRetry)
}

// startAgent starts an agent under name (without failing the test if it
// does not come up: that is logged as a note) with a random drain handoff.
func (r *invRound) startAgent(ctx context.Context, name string) (*agentProc, *client.Client, string) {
	handoff := ""
	switch p := r.rng.Float64(); {
	case p < 0.15:
		handoff = "deadline"
	case p < 0.25:
		handoff = "never"
	}
	var env []string
	if handoff != "" {
		env = append(env, "TETHER_DRAIN_HANDOFF="+handoff)
	}
	a := r.h.spawnAgent(name, env...)
	addr, err := r.waitUp(ctx, a)
	if a.gen != "" { // registered: it may have claimed jobs
		r.agents[a.cmd.Process.Pid] = invAgent{Name: name, Generation: a.gen}
	}
	if err != nil {
		r.note("agent %s did not come up: %v\n%s", name, err, a.out.tail(3000))
		if !a.exited() {
			r.h.kill9(a)
		}
		return nil, nil, ""
	}
	c, err := client.New("http://" + addr)
	if err != nil {
		r.t.Fatalf("client for %s: %v", addr, err)
	}
	return a, c, handoff
}

// waitUp waits for the agent's registration and API address.
func (r *invRound) waitUp(ctx context.Context, a *agentProc) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a.exited() {
			return "", fmt.Errorf("exited (%v)", a.waitEr)
		}
		out := a.out.String()
		if a.gen == "" && strings.Contains(out, "agent registered") {
			var gen string
			if err := r.h.pool.QueryRow(ctx, `SELECT generation FROM agents WHERE name = $1`, a.name).Scan(&gen); err == nil &&
				strings.Contains(out, "generation="+gen) {
				a.gen = gen
			}
		}
		if a.gen != "" {
			for _, line := range strings.Split(out, "\n") {
				if !strings.Contains(line, "API listening") {
					continue
				}
				for _, f := range strings.Fields(line) {
					if addr, ok := strings.CutPrefix(f, "addr="); ok {
						return addr, nil
					}
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", errors.New("not registered and listening within 30s")
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func (r *invRound) startNew(ctx context.Context) {
	r.nextName++
	name := fmt.Sprintf("inv-%d", r.nextName)
	a, c, handoff := r.startAgent(ctx, name)
	r.actions["start new"]++
	if a == nil {
		return
	}
	r.slots = append(r.slots, &invSlot{name: name, proc: a, state: "live", since: time.Now(), api: c, handoff: handoff})
	r.logf("started %s (gen %s, pid %d, handoff %q)", name, short(a.gen), a.cmd.Process.Pid, handoff)
}

func (r *invRound) restart(ctx context.Context, s *invSlot) {
	a, c, handoff := r.startAgent(ctx, s.name)
	r.actions["restart same name"]++
	if a == nil {
		return
	}
	r.logf("restarted %s (gen %s → %s, pid %d, handoff %q)", s.name, short(s.proc.gen), short(a.gen), a.cmd.Process.Pid, handoff)
	s.proc, s.api, s.handoff, s.state, s.since = a, c, handoff, "live", time.Now()
}

func (r *invRound) kill9(s *invSlot) {
	r.actions["kill -9 agent"]++
	r.h.kill9(s.proc)
	s.state, s.since = "dead", time.Now()
	r.logf("kill -9 %s (gen %s, pid %d)", s.name, short(s.proc.gen), s.proc.cmd.Process.Pid)
}

func (r *invRound) drain(s *invSlot) {
	r.actions["SIGTERM drain"]++
	r.h.signal(s.proc, syscall.SIGTERM)
	s.state, s.since = "draining", time.Now()
	r.logf("SIGTERM %s (gen %s, handoff %q)", s.name, short(s.proc.gen), s.handoff)
}

// killPlugin kill -9s one plugin process of the agent (mostly the
// resumable one), found through /proc.
func (r *invRound) killPlugin(s *invSlot) {
	name := "tether-plugin-resumable"
	if r.rng.Float64() < 0.2 {
		name = "tether-plugin-shell"
	}
	r.actions["kill -9 plugin"]++
	for _, pid := range childrenOf(s.proc.cmd.Process.Pid) {
		if filepath.Base(argv0(pid)) != name {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			r.logf("kill -9 %s of %s (pid %d): %v", name, s.name, pid, err)
			return
		}
		r.logf("kill -9 %s of %s (pid %d)", name, s.name, pid)
		return
	}
	r.logf("kill -9 plugin: %s has no %s process now", s.name, name)
}

// jobsIn lists the round's jobs in one of statuses.
func (r *invRound) jobsIn(ctx context.Context, statuses ...string) []string {
	rows, err := r.h.pool.Query(ctx, `SELECT id FROM jobs WHERE id = ANY($1) AND status = ANY($2) ORDER BY id`, r.jobs, statuses)
	if err != nil {
		r.note("listing jobs: %v", err)
		return nil
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if rows.Scan(&id) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func (r *invRound) anyAPI() *client.Client {
	live := r.inState("live")
	if len(live) == 0 {
		return nil
	}
	return r.pick(live).api
}

func (r *invRound) cancel(ctx context.Context) {
	ids := r.jobsIn(ctx, "queued", "accepted", "running", "canceling")
	if len(ids) == 0 || r.rng.Float64() < 0.1 {
		ids = r.jobs // now and then a job that may have ended: a 409
	}
	c := r.anyAPI()
	if len(ids) == 0 || c == nil {
		return
	}
	id := ids[r.rng.IntN(len(ids))]
	r.actions["cancel"]++
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	j, err := c.Cancel(cctx, id, "invariant chaos: cancel")
	if err != nil {
		r.logf("cancel %s: %v", id, err)
		return
	}
	r.logf("cancel %s: now %s", id, j.Status)
}

func (r *invRound) requeue(ctx context.Context) {
	var ids []string
	for _, id := range r.jobsIn(ctx, "failed", "canceled") {
		if r.requeues[id] < 2 {
			ids = append(ids, id)
		}
	}
	c := r.anyAPI()
	if len(ids) == 0 || c == nil {
		return
	}
	id := ids[r.rng.IntN(len(ids))]
	r.keys++
	r.actions["operator requeue"]++
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.Requeue(cctx, id, api.RequeueRequest{Reason: "invariant chaos: requeue", Key: fmt.Sprintf("inv-%d-%d", r.seed, r.keys), Submitter: "invariant"})
	if err != nil {
		r.logf("requeue %s: %v", id, err)
		return
	}
	r.requeues[id]++
	r.logf("requeue %s: now %s, attempt %d", id, res.Job.Status, res.Job.Attempt)
}

// outage stops PostgreSQL for a short while (well below the self-fence
// point, nothing should fail) or a long one (above stale_job: every
// agent self-fences), acting on agents and plugins meanwhile.
func (r *invRound) outage(ctx context.Context, long bool) {
	down := time.Duration(200+r.rng.IntN(800)) * time.Millisecond
	kind := "short"
	if long {
		down = r.tm.StaleJob + time.Duration(1000+r.rng.IntN(2000))*time.Millisecond
		kind = "long"
		r.lastLong = time.Now()
	}
	r.actions["database outage ("+kind+")"]++
	offline := r.rng.IntN(3) // steps while the database is away
	at := make([]time.Duration, offline)
	for i := range at {
		at[i] = time.Duration(r.rng.Int64N(int64(down)))
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	begin := time.Now()
	r.logf("database outage (%s): down for %s, %d step(s) meanwhile", kind, down, offline)
	if err := r.cluster.StopServer(ctx); err != nil {
		r.t.Fatalf("stopping PostgreSQL: %v", err)
	}
	stopped := time.Now()
	for _, d := range at {
		sleep(ctx, time.Until(stopped.Add(d)))
		live := r.inState("live")
		if len(live) == 0 {
			continue
		}
		if r.rng.IntN(2) == 0 {
			r.kill9(r.pick(live))
		} else {
			r.killPlugin(r.pick(live))
		}
	}
	sleep(ctx, time.Until(stopped.Add(down)))
	if err := r.cluster.StartServer(ctx); err != nil {
		r.t.Fatalf("starting PostgreSQL: %v", err)
	}
	r.h.pool.Reset()
	r.lastOutage = time.Now()
	took := time.Since(begin)
	selfFence := r.tm.StaleJob - 2*r.tm.Keepalive - r.tm.KillGrace
	r.logf("database back after %s (self-fencing at %s, stale_job %s)", took.Round(time.Millisecond), selfFence, r.tm.StaleJob)
	if !long && took >= selfFence {
		r.note("the short outage took %s, not below self-fencing (%s): stopping/starting PostgreSQL was slow", took.Round(time.Millisecond), selfFence)
	}
}

// ---- after the chaos ----

// settle lets every job end. Drains finish, at least two agents run, and
// jobs get up to within to become terminal.
func (r *invRound) settle(ctx context.Context, within time.Duration) {
	r.logf("chaos over: %d jobs; settling", len(r.jobs))
	for deadline := time.Now().Add(25 * time.Second); len(r.inState("draining")) > 0 && time.Now().Before(deadline); {
		r.reap()
		sleep(ctx, 50*time.Millisecond)
	}
	r.reap()
	for tries := 0; len(r.inState("live")) < 2 && tries < 5; tries++ {
		if dead := r.inState("dead"); len(dead) > 0 {
			r.restart(ctx, r.pick(dead))
		} else {
			r.startNew(ctx)
		}
	}
	began := time.Now()
	deadline := began.Add(within)
	for {
		open := r.jobsIn(ctx, "queued", "accepted", "running", "canceling")
		if len(open) == 0 {
			r.logf("every job ended")
			return
		}
		if time.Since(began) > 5*time.Second && len(r.waitingForCleanup(ctx, open)) == len(open) {
			r.logf("the %d jobs still open wait for Cleanups not due yet", len(open))
			return
		}
		r.reap()
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.logf("%d jobs still open after %s", len(open), within)
			return
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// waitingForCleanup returns which of ids wait (a retry gated on it, or a
// cancel the janitor finishes after it) for a Cleanup that is not due yet —
// the fallback queued after an agent's write, when that agent died before
// its own Cleanup ended — or that a worker claimed and then died with (the
// claim lapses after about cleanup_timeout), with a description. By design,
// not a violation.
func (r *invRound) waitingForCleanup(ctx context.Context, ids []string) map[string]string {
	out := map[string]string{}
	rows, err := r.h.pool.Query(ctx, `SELECT job_id, next_at, coalesce(claimed_by, ''), claimed_until, claimed_until > now() FROM cleanups
		WHERE job_id = ANY($1) AND (next_at > now() OR claimed_until > now())`, ids)
	if err != nil {
		r.note("reading pending Cleanups: %v", err)
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var id, by string
		var due time.Time
		var until *time.Time
		var claimed *bool
		if err := rows.Scan(&id, &due, &by, &until, &claimed); err != nil {
			r.note("reading pending Cleanups: %v", err)
			return out
		}
		out[id] = fmt.Sprintf("it waits for a Cleanup due at %s", clock(due))
		if claimed != nil && *claimed {
			out[id] += fmt.Sprintf(", claimed by %s until %s", by, clock(*until))
		}
	}
	return out
}

// collect reads what happened: jobs rows, events, journals, and which work
// still runs.
func (r *invRound) collect(ctx context.Context) invData {
	d := invData{Now: time.Now(), Agents: r.agents, Losses: r.losses}
	byID := map[string]*invJob{}
	for _, id := range r.jobs {
		byID[id] = &invJob{ID: id, Missing: true, Alive: map[int]bool{}}
	}
	rows, err := r.h.pool.Query(ctx, `SELECT id, command, status, attempt, coalesce(error, ''), coalesce(error_class, ''), context->>'script' FROM jobs WHERE id = ANY($1)`, r.jobs)
	if err != nil {
		r.t.Fatalf("reading jobs: %v", err)
	}
	for rows.Next() {
		var j invJob
		var script *string
		if err := rows.Scan(&j.ID, &j.Command, &j.Status, &j.Attempt, &j.Error, &j.ErrorClass, &script); err != nil {
			r.t.Fatalf("reading jobs: %v", err)
		}
		if script != nil {
			if m := shellLinesRE.FindStringSubmatch(*script); m != nil {
				j.Lines, _ = strconv.Atoi(m[1])
			}
		}
		j.Alive = map[int]bool{}
		byID[j.ID] = &j
	}
	rows.Close()

	rows, err = r.h.pool.Query(ctx, `SELECT job_id, id, at, kind, coalesce(agent, ''), coalesce(generation, ''), coalesce(lease, 0), message
		FROM job_timeline WHERE job_id = ANY($1) ORDER BY job_id, id`, r.jobs)
	if err != nil {
		r.t.Fatalf("reading events: %v", err)
	}
	for rows.Next() {
		var id string
		var e event
		if err := rows.Scan(&id, &e.ID, &e.At, &e.Kind, &e.Agent, &e.Generation, &e.Lease, &e.Message); err != nil {
			r.t.Fatalf("reading events: %v", err)
		}
		byID[id].Events = append(byID[id].Events, e)
	}
	rows.Close()

	for id, why := range r.waitingForCleanup(ctx, r.jobs) {
		if j := byID[id]; !finalKinds[j.Status] {
			j.Open = why
		}
	}

	for _, id := range r.jobs {
		j := byID[id]
		j.Submitted = r.submitted[id]
		if !j.Missing {
			out := strings.TrimSuffix(r.h.stdout(ctx, id), "\n")
			if out != "" {
				j.Stdout = strings.Split(out, "\n")
			}
		}
		j.Ticks = r.readTicks(id)
		j.Journal = r.readJournal(id)
		for _, l := range j.Journal {
			if l.Event == "start" && workAlive(l.PID, id) {
				j.Alive[l.PID] = true
			}
		}
		d.Jobs = append(d.Jobs, *j)
	}
	return d
}

// shellLinesRE finds how many lines a shell job of submitShell prints.
var shellLinesRE = regexp.MustCompile(`-le (\d+); do`)

// readTicks reads the ticks a shell job's runs appended to its file.
func (r *invRound) readTicks(id string) []shellTick {
	b, err := os.ReadFile(filepath.Join(r.h.pidDir, id+".ticks"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatalf("reading the ticks of %s: %v", id, err)
	}
	var out []shellTick
	for _, line := range strings.Split(string(b), "\n") {
		var tk shellTick
		var ns int64
		if _, err := fmt.Sscanf(line, "%d %d %d", &tk.Attempt, &tk.PID, &ns); err != nil {
			continue // a line being written when the run was killed
		}
		tk.At = time.Unix(0, ns)
		out = append(out, tk)
	}
	return out
}

func (r *invRound) readJournal(id string) []invJournalLine {
	b, err := os.ReadFile(filepath.Join(r.h.workDir, id+".journal"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatalf("reading the journal of %s: %v", id, err)
	}
	var out []invJournalLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l invJournalLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			r.t.Errorf("job %s: journal line %q: %v", id, sc.Text(), err)
			continue
		}
		out = append(out, l)
	}
	return out
}

func (r *invRound) report(d invData, vs []violation) {
	statuses := map[string]int{}
	var starts, retries, resumes, released, leaseLost, requeued, unrecorded, historyLost int
	for _, j := range d.Jobs {
		statuses[j.Command+" "+j.Status]++
		for _, e := range j.Events {
			switch {
			case e.Kind == "retry_scheduled":
				retries++
			case e.Kind == "resumed":
				resumes++
			case e.Kind == "released":
				released++
			case e.Kind == "lease_lost":
				leaseLost++
			case e.Kind == "database_history_lost":
				historyLost++
			case operatorRequeue(e):
				requeued++
			}
		}
		for _, w := range workRuns(j, d.Now) {
			starts++
			if w.how == "unrecorded" {
				unrecorded++
			}
		}
		if j.Open != "" && !finalKinds[j.Status] {
			r.note("job %s is still %s: %s", j.ID, j.Status, j.Open)
		}
	}
	r.logf("actions: %s", sortedCounts(r.actions))
	r.logf("jobs: %s", sortedCounts(statuses))
	r.logf("timeline: %d work starts, %d retries, %d releases, %d resumes, %d lease_lost, %d operator requeues, %d database_history_lost", starts, retries, released, resumes, leaseLost, requeued, historyLost)
	for _, j := range d.Jobs {
		if j.Missing && inLoss(d.Losses, j.Submitted) {
			r.note("job %s was submitted while the standby was away and is gone with the lost history", j.ID)
		}
	}
	if unrecorded > 0 {
		r.note("%d work process(es) ended without an end or kill on record (taken as ended at their start)", unrecorded)
	}

	byJob := map[string][]violation{}
	perInv := map[int]int{}
	for _, v := range vs {
		byJob[v.Job] = append(byJob[v.Job], v)
		perInv[v.Invariant]++
	}
	for _, j := range d.Jobs {
		jv := byJob[j.ID]
		if len(jv) == 0 {
			continue
		}
		var b strings.Builder
		for _, v := range jv {
			fmt.Fprintf(&b, "\n  violates %s", v)
		}
		r.t.Errorf("seed %d, job %s:%s\n  %s", r.seed, j.ID, b.String(), summarize(j, d.Now))
	}
	if len(vs) == 0 {
		r.logf("seed %d: no violation in %d jobs", r.seed, len(d.Jobs))
		return
	}
	var parts []string
	for inv := 1; inv <= 7; inv++ {
		if perInv[inv] > 0 {
			parts = append(parts, fmt.Sprintf("(%d)×%d", inv, perInv[inv]))
		}
	}
	r.t.Errorf("seed %d: %d violations in %d of %d jobs: %s", r.seed, len(vs), len(byJob), len(d.Jobs), strings.Join(parts, " "))
}

// killWork kills work processes the journals say still run (a job's pid
// file names only its latest work).
func (r *invRound) killWork() {
	for _, id := range r.jobs {
		for _, l := range r.readJournal(id) {
			if l.Event == "start" && workAlive(l.PID, id) {
				_ = syscall.Kill(-l.PID, syscall.SIGKILL)
			}
		}
	}
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ---- /proc ----

// procStat returns a process's state and parent pid.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

// childrenOf lists the live children of pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := procStat(p); ok && ppid == pid && state != "Z" && state != "X" {
			out = append(out, p)
		}
	}
	return out
}

func argv0(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// workAlive reports whether pid runs (not a zombie) and is job id's
// resumable work, not a process that reused the pid.
func workAlive(pid int, id string) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X" && cmdlineHas(pid, "resumable-"+id)
}
