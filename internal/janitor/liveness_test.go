package janitor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/queries"
)

const (
	testKeepalive = 200 * time.Millisecond
	testDeadAfter = 500 * time.Millisecond
)

var (
	goneReason    = `^agent gone \(name lock free, silent \d+s\)$`
	requeueReason = `^requeued: agent %s gone \(name lock free, silent \d+s\); the job never started$`
)

// nameLock takes name's lock with the agent's own statement, on a
// connection of its own, as internal/agent does. It retries while the lock
// is still held by a connection being closed (its backend exits a moment
// after the client hangs up).
func (f *fixture) nameLock(name string) *pgx.Conn {
	f.t.Helper()
	conn, err := pgx.ConnectConfig(f.ctx, f.pool.Config().ConnConfig.Copy())
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.Eventually(f.t, func() bool {
		var ok bool
		require.NoError(f.t, conn.QueryRow(f.ctx, queries.Get("agent_name_lock"), name).Scan(&ok))
		return ok
	}, 5*time.Second, 10*time.Millisecond, "taking the name lock of %s", name)
	return conn
}

// probe is a running Liveness's test signals.
type probe struct {
	t       *testing.T
	checked chan Checked
	acted   chan Acted
}

func (f *fixture) startLiveness(holder store.Holder, m *metrics.Metrics, cfg LivenessConfig) *probe {
	f.t.Helper()
	p := &probe{t: f.t, checked: make(chan Checked), acted: make(chan Acted, 1000)}
	cfg.TestSignals = LivenessSignals{Checked: p.checked, Acted: p.acted}
	jan := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: holder, Metrics: m,
		Keepalive: cfg.Keepalive, StaleJob: time.Minute})
	lv := NewLiveness(jan, cfg)
	require.NoError(f.t, lv.Start(f.ctx))
	f.t.Cleanup(lv.Stop)
	return p
}

// next waits for the next check this agent ran (it took the fleet's turn)
// and returns it with the actions it took.
func (p *probe) next() (Checked, []Acted) {
	p.t.Helper()
	select {
	case c := <-p.checked:
		if !c.Turn {
			return p.next()
		}
		var acted []Acted
		for {
			select {
			case a := <-p.acted:
				acted = append(acted, a)
			default:
				return c, acted
			}
		}
	case <-time.After(10 * time.Second):
		p.t.Fatal("no liveness check within 10s")
		return Checked{}, nil
	}
}

// checksFor reads checks until d has passed, asserting each with fn.
func (p *probe) checksFor(d time.Duration, fn func(Checked, []Acted)) {
	p.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		fn(p.next())
	}
}

func freeNames(c Checked) []string {
	var out []string
	for _, f := range c.Free {
		out = append(out, f.Name)
	}
	return out
}

// heartbeats renews h and its leases every keepalive, with the agent's own
// statement, until the returned stop is called.
func (f *fixture) heartbeats(h store.Holder, leases []store.Lease) (stop func()) {
	return f.heartbeatsEvery(testKeepalive, h, leases)
}

var bothPlugins = map[string][]string{"res": resCaps, "sh": shCaps}

// An agent whose process died (its lock connection closed, no heartbeat
// since) has its resumable running job released and its accepted job requeued
// after dead_after, long before stale_job. Its running job nobody can resume
// waits for stale_job.
func TestLivenessSettlesADeadAgentsJobsEarly(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", bothPlugins)
	victim := f.agent("v1", "v1-g1", bothPlugins)
	lock := f.nameLock("v1")
	res, resLease := f.claimed(victim, "c", "res", true)
	acc, _ := f.claimed(victim, "c", "res", false)
	sh, shLease := f.claimed(victim, "c", "sh", true)

	m := metrics.New()
	p := f.startLiveness(live, m, LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter})
	for range 2 {
		c, _ := p.next()
		assert.Empty(t, c.Free, "the lock is held: the check sees it")
	}

	require.NoError(t, lock.Close(f.ctx))
	died := time.Now()
	var acted []Acted
	for len(acted) == 0 {
		c, a := p.next()
		acted = a
		if len(a) == 0 {
			assert.Less(t, time.Since(died), testDeadAfter+2*testKeepalive+time.Second, "not settled in time")
			assert.Empty(t, c.Dead)
		}
	}
	// Dead at the first check at or after F + dead_after, F being the first
	// check after the lock freed. That is within a keepalive + dead_after.
	assert.GreaterOrEqual(t, time.Since(died), testDeadAfter, "not before dead_after")
	assert.Less(t, time.Since(died), testKeepalive+testDeadAfter+500*time.Millisecond, "the follow-up check runs at F + dead_after")
	assert.Equal(t, []Acted{{Agent: "v1", Generation: "v1-g1", Released: 1, Requeued: 1}}, acted)

	r, ok := f.active(res)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "released")
	assert.True(t, r.Released)
	require.NotNil(t, r.Reason)
	assert.Regexp(t, goneReason, *r.Reason)
	assert.Equal(t, resLease+1, r.Lease)
	assert.Equal(t, store.StatusRunning, f.job(res).Status)

	assert.Equal(t, store.StatusQueued, f.job(acc).Status)
	evs := f.events(acc, "requeued")
	require.Len(t, evs, 1)
	assert.Regexp(t, `^requeued: agent v1 gone \(name lock free, silent \d+s\); the job never started$`, evs[0].Message)

	r, ok = f.active(sh)
	require.True(t, ok)
	require.NotNil(t, r.Agent, "not resumable: waits for stale_job")
	assert.Equal(t, "v1", *r.Agent)
	assert.Equal(t, shLease, r.Lease)

	assert.Equal(t, 1.0, metricValue(t, m, "tether_agents_dead_total", ""))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_janitor_actions_total", "release"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_janitor_actions_total", "requeue"))
	dead, err := m.Value("tether_janitor_actions_total", map[string]string{"action": "release", "cause": string(CauseAgentDead)})
	require.NoError(t, err)
	assert.Equal(t, 1.0, dead, "the release is counted under the liveness check's cause")

	// Still dead while it holds the job nobody can resume. It is counted
	// once, and nothing more is done.
	for range 2 {
		c, a := p.next()
		require.Len(t, c.Dead, 1)
		assert.False(t, c.Dead[0].First)
		assert.Equal(t, []Acted{{Agent: "v1", Generation: "v1-g1"}}, a)
	}
	assert.Equal(t, 1.0, metricValue(t, m, "tether_agents_dead_total", ""))
	r, _ = f.active(sh)
	assert.Equal(t, shLease, r.Lease)
}

// A stopped process (SIGSTOP, with its connection alive, lock held, silent)
// is not dead. Nothing happens before stale_job.
func TestLivenessLeavesASilentAgentHoldingItsLock(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", bothPlugins)
	victim := f.agent("v1", "v1-g1", bothPlugins)
	f.nameLock("v1")
	res, resLease := f.claimed(victim, "c", "res", true)
	acc, accLease := f.claimed(victim, "c", "res", false)
	// Silent longer than dead_after, by the database clock.
	f.silence(res, 10*time.Second)
	f.silence(acc, 10*time.Second)
	f.agentSilence("v1", 10*time.Second)

	p := f.startLiveness(live, metrics.New(), LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter})
	p.checksFor(testDeadAfter+3*testKeepalive, func(c Checked, a []Acted) {
		assert.Empty(t, c.Free)
		assert.Empty(t, c.Dead)
		assert.Empty(t, a)
	})
	r, _ := f.active(res)
	assert.Equal(t, resLease, r.Lease)
	r, _ = f.active(acc)
	assert.Equal(t, accLease, r.Lease)
	assert.Equal(t, store.StatusAccepted, f.job(acc).Status)
}

// An agent whose lock connection was lost (pg_terminate_backend, a pooler
// hiccup) while it still heartbeats is not dead. The memory is dropped once
// it takes its lock again.
func TestLivenessLeavesAHeartbeatingAgentWithoutItsLock(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", bothPlugins)
	victim := f.agent("v1", "v1-g1", bothPlugins)
	lock := f.nameLock("v1")
	res, resLease := f.claimed(victim, "c", "res", true)
	acc, accLease := f.claimed(victim, "c", "res", false)
	stop := f.heartbeats(victim, []store.Lease{{JobID: res, Lease: resLease}, {JobID: acc, Lease: accLease}})
	defer stop()

	p := f.startLiveness(live, metrics.New(), LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter})
	p.next()
	var pid uint32
	require.NoError(t, lock.QueryRow(f.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	f.exec(`SELECT pg_terminate_backend($1)`, pid)

	sawFree := false
	p.checksFor(4*testDeadAfter, func(c Checked, a []Acted) {
		sawFree = sawFree || len(c.Free) == 1
		assert.Empty(t, c.Dead, "it heartbeats")
		assert.Empty(t, a)
	})
	assert.True(t, sawFree, "the check saw the lock free")

	f.nameLock("v1")
	for {
		c, a := p.next()
		assert.Empty(t, a)
		if len(c.Free) == 0 {
			assert.Zero(t, c.Remembered, "forgotten once the lock is held again")
			break
		}
	}
	r, _ := f.active(res)
	assert.Equal(t, resLease, r.Lease)
	r, _ = f.active(acc)
	assert.Equal(t, accLease, r.Lease)
}

// A database restart frees every lock at once. The agents take them again and
// heartbeat within a keepalive, so nothing is released and no lease changes.
func TestLivenessNoStampedeWhenEveryLockFreesAtOnce(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", bothPlugins)
	type sim struct {
		h      store.Holder
		lock   *pgx.Conn
		leases []store.Lease
		stop   func()
	}
	var agents []*sim
	for _, name := range []string{"a", "b", "c"} {
		s := &sim{h: f.agent(name, name+"-g1", bothPlugins), lock: f.nameLock(name)}
		for range 5 {
			id, lease := f.claimed(s.h, "c", "res", true)
			s.leases = append(s.leases, store.Lease{JobID: id, Lease: lease})
		}
		id, lease := f.claimed(s.h, "c", "res", false)
		s.leases = append(s.leases, store.Lease{JobID: id, Lease: lease})
		s.stop = f.heartbeats(s.h, s.leases)
		agents = append(agents, s)
	}

	p := f.startLiveness(live, metrics.New(), LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter})
	p.next()
	// The outage. No heartbeat gets through and every session is gone.
	for _, s := range agents {
		s.stop()
		require.NoError(t, s.lock.Close(f.ctx))
	}
	for {
		if c, _ := p.next(); len(c.Free) == 3 {
			break // the check saw every lock free
		}
	}
	// Back within a keepalive. Locks are re-taken and heartbeats resumed.
	for _, s := range agents {
		s.lock = f.nameLock(s.h.Name)
		s.stop = f.heartbeats(s.h, s.leases)
		defer s.stop()
	}
	p.checksFor(3*testDeadAfter, func(c Checked, a []Acted) {
		assert.Empty(t, c.Dead)
		assert.Empty(t, a)
	})
	var released, requeued, changed int
	for _, s := range agents {
		for _, l := range s.leases {
			released += len(f.events(l.JobID, "released"))
			requeued += len(f.events(l.JobID, "requeued"))
			if r, _ := f.active(l.JobID); r.Lease != l.Lease {
				changed++
			}
		}
	}
	assert.Zero(t, released)
	assert.Zero(t, requeued)
	assert.Zero(t, changed, "lease changes")
}

// simAgent is one simulated agent of the randomized test. It holds its
// sessions and heartbeats, as the checker of the invariants later needs them.
type simAgent struct {
	h       store.Holder
	plan    string // healthy, dies, pauses, flaps
	at, dur time.Duration
	jobs    map[string]string // job → kind: resumable, accepted, other
	leases  []store.Lease

	mu      sync.Mutex
	beats   []interval // each heartbeat: sent .. answered
	held    []interval // the name lock held: taken .. released (zero: still held)
	diedAt  time.Time
	lockErr error
}

type interval struct{ from, to time.Time }

func (s *simAgent) record(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// live reports whether the agent was live at t, with slack for the statement
// in flight. It was when it held its lock over [t-slack, t], or when a
// heartbeat answered before t-slack was sent after t-deadAfter+slack. Its
// last_seen is then after any first-free time a correct check could have
// used.
func (s *simAgent) live(t time.Time, deadAfter, slack time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		if !h.from.After(t.Add(-slack)) && (h.to.IsZero() || !h.to.Before(t)) {
			return true
		}
	}
	for _, b := range s.beats {
		if b.to.Before(t.Add(-slack)) && b.from.After(t.Add(-deadAfter+slack)) {
			return true
		}
	}
	return false
}

// run plays the agent's plan from start until ctx ends.
func (s *simAgent) run(ctx context.Context, f *fixture, start time.Time) {
	lock := f.nameLock(s.h.Name)
	s.record(func() { s.held = append(s.held, interval{from: time.Now()}) })
	release := func() {
		_ = lock.Close(context.Background())
		s.record(func() { s.held[len(s.held)-1].to = time.Now() })
	}
	var lastBeat time.Time
	lockFree := false
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		since := time.Since(start)
		inEvent := since >= s.at && since < s.at+s.dur
		switch {
		case s.plan == "dies" && since >= s.at:
			release()
			s.record(func() { s.diedAt = time.Now() })
			return
		case s.plan == "flaps" && inEvent && !lockFree:
			release()
			lockFree = true
		case s.plan == "flaps" && !inEvent && lockFree:
			// Re-take it as watch() does. The old backend may linger a
			// moment.
			conn, err := pgx.ConnectConfig(ctx, f.pool.Config().ConnConfig.Copy())
			if err == nil {
				var ok bool
				err = conn.QueryRow(ctx, queries.Get("agent_name_lock"), s.h.Name).Scan(&ok)
				if err == nil && ok {
					lock, lockFree = conn, false
					s.record(func() { s.held = append(s.held, interval{from: time.Now()}) })
				} else {
					_ = conn.Close(context.Background())
				}
			}
			if err != nil && ctx.Err() == nil {
				s.record(func() { s.lockErr = err })
			}
		}
		paused := s.plan == "pauses" && inEvent
		if !paused && time.Since(lastBeat) >= testKeepalive {
			sent := time.Now()
			if _, err := f.st.Heartbeat(ctx, s.h, s.leases); err != nil {
				if ctx.Err() == nil {
					s.record(func() { s.lockErr = err })
				}
			} else {
				s.record(func() { s.beats = append(s.beats, interval{sent, time.Now()}) })
			}
			lastBeat = sent
		}
		select {
		case <-ctx.Done():
			if !lockFree {
				release()
			}
			return
		case <-tick.C:
		}
	}
}

// Many agents die, pause, lose and re-take their locks or stay healthy, at
// random times, while two agents' checks run side by side. Afterwards the
// tables must show these. Nothing of a live agent is settled early. Every
// resumable job of a dead agent is released within dead_after + 2×keepalive
// of its death (accepted ones requeued). Each job is acted on at most once.
// Leases are never reused.
func TestLivenessRandomized(t *testing.T) {
	f := newFixture(t)
	seed := time.Now().UnixNano()
	if s := os.Getenv("TETHER_LIVENESS_SEED"); s != "" { // to replay a failure
		var err error
		seed, err = strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (TETHER_LIVENESS_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	const (
		deadAfter = 3 * testKeepalive // margin for late heartbeats on a loaded machine
		slack     = 150 * time.Millisecond
		// The check's tick, the pass and a scheduler hiccup on top of the
		// rule's dead_after + 2×keepalive.
		late = 700 * time.Millisecond
	)
	checkers := []store.Holder{f.agent("live1", "live1-g1", bothPlugins), f.agent("live2", "live2-g1", bothPlugins)}
	plans := []string{"healthy", "dies", "pauses", "flaps"}
	var agents []*simAgent
	for i := range 12 {
		s := &simAgent{
			h:    f.agent(fmt.Sprintf("sim%02d", i), fmt.Sprintf("sim%02d-g1", i), bothPlugins),
			plan: plans[i%len(plans)], jobs: map[string]string{},
			at:  time.Duration(300+rng.IntN(1700)) * time.Millisecond,
			dur: time.Duration(100+rng.IntN(1400)) * time.Millisecond,
		}
		add := func(kind, p string, running bool) {
			id, lease := f.claimed(s.h, "c", p, running)
			s.jobs[id] = kind
			s.leases = append(s.leases, store.Lease{JobID: id, Lease: lease})
		}
		add("resumable", "res", true)
		add("resumable", "res", true)
		add("accepted", "res", false)
		add("other", "sh", true)
		agents = append(agents, s)
	}

	ctx, stop := context.WithCancel(f.ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range agents {
		wg.Go(func() { s.run(ctx, f, start) })
	}
	var probes []*probe
	for _, h := range checkers {
		probes = append(probes, f.startLiveness(h, metrics.New(), LivenessConfig{Keepalive: testKeepalive, DeadAfter: deadAfter}))
	}
	// Drain both checkers until every death is past its bound.
	until := start.Add(2*time.Second + 1500*time.Millisecond + deadAfter + 2*testKeepalive + late)
	var pw sync.WaitGroup
	for _, p := range probes {
		pw.Go(func() {
			for time.Now().Before(until) {
				select {
				case <-p.checked:
				case <-p.acted:
				case <-time.After(10 * time.Second):
					t.Error("no liveness check within 10s")
					return
				}
			}
		})
	}
	pw.Wait()
	stop()
	wg.Wait()

	owner := map[string]*simAgent{}
	for _, s := range agents {
		require.NoError(t, s.lockErr, "agent %s", s.h.Name)
		for id := range s.jobs {
			owner[id] = s
		}
	}
	rows, err := f.pool.Query(f.ctx, `SELECT job_id, kind, coalesce(lease, 0), at, coalesce(message, '') FROM job_timeline ORDER BY job_id, id`)
	require.NoError(t, err)
	type event struct {
		job, kind, msg string
		lease          int64
		at             time.Time
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (event, error) {
		var e event
		return e, r.Scan(&e.job, &e.kind, &e.lease, &e.at, &e.msg)
	})
	require.NoError(t, err)

	acted := map[string][]event{}
	maxLease := map[string]int64{}
	for _, e := range evs {
		if e.kind == "released" || e.kind == "requeued" {
			assert.Greater(t, e.lease, maxLease[e.job], "job %s: %s under a lease already used", e.job, e.kind)
			acted[e.job] = append(acted[e.job], e)
		}
		maxLease[e.job] = max(maxLease[e.job], e.lease)
	}
	settledEarly := 0
	for id, s := range owner {
		var r activeRow
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT agent_name, lease, released_at IS NOT NULL, release_reason FROM active_jobs WHERE job_id = $1`, id).
			Scan(&r.Agent, &r.Lease, &r.Released, &r.Reason))
		assert.GreaterOrEqual(t, r.Lease, maxLease[id], "job %s: the lease went back", id)
		assert.LessOrEqual(t, len(acted[id]), 1, "job %s acted on more than once", id)
		for _, e := range acted[id] {
			settledEarly++
			assert.Contains(t, e.msg, "name lock free", "job %s: only the liveness check acts within stale_job", id)
			assert.False(t, s.live(e.at, deadAfter, slack), "job %s of %s (%s) %s at %s while the agent was live",
				id, s.h.Name, s.plan, e.kind, e.at.Sub(start))
		}
		if s.plan != "dies" {
			if s.plan != "flaps" { // a flapping agent's late heartbeat may truly make it dead
				assert.Empty(t, acted[id], "job %s of %s agent %s", id, s.plan, s.h.Name)
			}
			continue
		}
		switch s.jobs[id] {
		case "resumable", "accepted":
			want := map[string]string{"resumable": "released", "accepted": "requeued"}[s.jobs[id]]
			if assert.Len(t, acted[id], 1, "job %s (%s) of dead agent %s", id, s.jobs[id], s.h.Name) {
				e := acted[id][0]
				assert.Equal(t, want, e.kind)
				assert.LessOrEqual(t, e.at.Sub(s.diedAt), deadAfter+2*testKeepalive+late, "job %s settled late", id)
				assert.GreaterOrEqual(t, e.at.Sub(s.diedAt), deadAfter-slack, "job %s settled before dead_after", id)
			}
		case "other":
			assert.Empty(t, acted[id], "job %s: not resumable, waits for stale_job", id)
			require.NotNil(t, r.Agent)
			assert.Equal(t, s.h.Name, *r.Agent)
		}
	}
	assert.Positive(t, settledEarly, "the run killed agents")
}
