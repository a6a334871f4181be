package janitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/store"
)

// deadOwner says the liveness check found a1 dead, silent for 11s.
var deadOwner = func(in *Input) { in.Owner.Dead, in.Owner.LastSeenAge = true, 11*time.Second }

func TestDecideDeadOwner(t *testing.T) {
	const stale = 130 * time.Second
	const goneWhy = "agent gone (name lock free, silent 11s)"
	requeued := Action{Kind: Requeue, Reason: "requeued: agent a1 gone (name lock free, silent 11s); the job never started"}
	tests := []struct {
		name string
		in   Input
		want Action
	}{
		// Accepted (and held queued). Nothing ran, so requeue at once.
		{"accepted, dead", with(owned("accepted", time.Second), deadOwner), requeued},
		{"held queued, dead", with(owned("queued", time.Second), deadOwner), requeued},
		{"accepted, dead, lease silent past offline_after", with(owned("accepted", 20*time.Second), deadOwner), requeued},
		{"accepted, dead but restarted: the restart rule", with(owned("accepted", 0), deadOwner, restarted),
			Action{Kind: Requeue, Reason: "requeued: agent a1 restarted; the job never started"}},

		// Running and resumable. Released at once.
		{"running, dead, resumable", with(owned("running", time.Second), deadOwner), Action{Kind: Release, Reason: goneWhy}},
		{"running, dead, draining, resumable", with(owned("running", time.Second), deadOwner, draining), Action{Kind: Release, Reason: goneWhy}},
		{"running, dead, resumable, past active_timeout + grace", with(owned("running", time.Second), deadOwner, activeFor(time.Minute, time.Hour)),
			Action{Kind: Release, Reason: goneWhy}},
		{"running, dead and gone: the gone rule", with(owned("running", 0), deadOwner, gone), Action{Kind: Release, Reason: "agent gone"}},

		// Running and not resumable. Only the self-fence proves a local
		// process stopped, so stale_job still governs.
		{"running, dead, not resumable", with(owned("running", time.Second), deadOwner, notResum), Action{Kind: None}},
		{"running, dead, plugin not loaded", with(owned("running", time.Second), deadOwner, notLoaded), Action{Kind: None}},
		{"running, dead, command unserved", with(owned("running", time.Second), deadOwner, unserved), Action{Kind: None}},
		{"running, dead, not resumable, stale: the stale rule", with(owned("running", stale), deadOwner, notResum),
			Action{Kind: Fail, Reason: noResume("awol: agent a1 silent for 130s"), Cleanup: true}},
		{"running, dead, not resumable, past active_timeout + grace: the backup", with(owned("running", time.Second), deadOwner, notResum, activeFor(time.Minute, time.Hour)),
			Action{Kind: FailActiveTimeout, Cleanup: true, Reason: "active_timeout of 1m0s exceeded (running for 3600s; agent a1 did not stop it, so the janitor failed it)"}},

		// Canceling stays unchanged, under the owner's rules.
		{"canceling, dead", with(owned("canceling", time.Second), deadOwner), Action{Kind: None}},
		{"canceling, dead, never started", with(owned("canceling", time.Second), deadOwner, notStart), Action{Kind: None}},
		{"canceling, dead, stale", with(owned("canceling", stale), deadOwner),
			Action{Kind: Cancel, Reason: "canceled by request; agent a1 stopped answering, so the janitor finished the cancel", Cleanup: true}},

		// A live owner (not dead) is untouched, however its lock looks.
		{"accepted, live, silent 11s", with(owned("accepted", 11*time.Second), func(in *Input) { in.Owner.LastSeenAge = 11 * time.Second }), Action{Kind: None}},
		{"running, live, silent 60s, resumable", owned("running", 60*time.Second), Action{Kind: None}},
		{"running, live, resumable", owned("running", time.Second), Action{Kind: None}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Decide(tt.in))
		})
	}
}

func TestLockWatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	free := func(lastSeen float64) []FreeLock {
		return []FreeLock{{Name: "a1", Generation: "g1", LastSeen: at(lastSeen)}}
	}
	type step struct {
		now      float64
		free     []FreeLock
		dead     bool // a1 dead at this check
		first    bool
		remember int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first sighting is never dead, even long silent", []step{
			{now: 100, free: free(0), remember: 1},
		}},
		{"dead once dead_after has passed since the first sighting", []step{
			{now: 10, free: free(9), remember: 1},
			{now: 15, free: free(9), remember: 1},
			{now: 19.9, free: free(9), remember: 1},
			{now: 20, free: free(9), dead: true, first: true, remember: 1},
			{now: 25, free: free(9), dead: true, first: false, remember: 1},
		}},
		{"a heartbeat since the first sighting starts over", []step{
			{now: 10, free: free(9), remember: 1},
			{now: 15, free: free(14), remember: 1}, // heartbeat at 14: F = 15
			{now: 20, free: free(14), remember: 1},
			{now: 24.9, free: free(14), remember: 1},
			{now: 25, free: free(14), dead: true, first: true, remember: 1},
		}},
		{"heartbeating every keepalive with the lock free is never dead", []step{
			{now: 10, free: free(9.5), remember: 1},
			{now: 15, free: free(14.5), remember: 1},
			{now: 20, free: free(19.5), remember: 1},
			{now: 25, free: free(24.5), remember: 1},
			{now: 30, free: free(29.5), remember: 1},
		}},
		{"lock taken again: forgotten, and a new sighting starts over", []step{
			{now: 10, free: free(9), remember: 1},
			{now: 15, free: nil, remember: 0},
			{now: 20, free: free(9), remember: 1},
			{now: 25, free: free(9), remember: 1},
			{now: 30, free: free(9), dead: true, first: true, remember: 1},
		}},
		{"database restart: every lock free at once, heartbeats within a keepalive", []step{
			{now: 10, free: free(8), remember: 1},
			{now: 15, free: free(12), remember: 1}, // heartbeat got through
			{now: 20, free: nil, remember: 0},      // lock re-taken
		}},
		{"a heartbeat stamped before F does not count; the next one does", []step{
			{now: 10, free: free(9.99), remember: 1},
			{now: 15, free: free(9.99), remember: 1},
			{now: 19, free: free(18), remember: 1}, // F = 19
			{now: 20, free: free(18), remember: 1},
			{now: 28.9, free: free(18), remember: 1},
			{now: 29, free: free(18), dead: true, first: true, remember: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newLockWatch(fleet.Timings{DeadAfter: 10 * time.Second})
			for i, s := range tt.steps {
				dead := w.observe(at(s.now), s.free)
				if s.dead {
					if assert.Len(t, dead, 1, "step %d", i) {
						assert.Equal(t, "a1", dead[0].Name)
						assert.Equal(t, s.first, dead[0].First, "step %d first", i)
						assert.Equal(t, at(s.now).Sub(s.free[0].LastSeen), dead[0].Silence, "step %d silence", i)
					}
				} else {
					assert.Empty(t, dead, "step %d", i)
				}
				assert.Equal(t, s.remember, w.remembered(), "step %d remembered", i)
			}
		})
	}
}

// Each agent generation has its own memory. A new generation under the same
// name starts over, and agents do not affect each other.
func TestLockWatchPerGeneration(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w := newLockWatch(fleet.Timings{DeadAfter: 10 * time.Second})
	old := FreeLock{Name: "a1", Generation: "g1", LastSeen: t0}
	other := FreeLock{Name: "b", Generation: "b1", LastSeen: t0}
	assert.Empty(t, w.observe(t0.Add(time.Second), []FreeLock{old, other}))
	fresh := FreeLock{Name: "a1", Generation: "g2", LastSeen: t0.Add(5 * time.Second)}
	dead := w.observe(t0.Add(11*time.Second), []FreeLock{fresh, other})
	if assert.Len(t, dead, 1) {
		assert.Equal(t, "b", dead[0].Name)
		assert.Equal(t, t0.Add(time.Second), dead[0].FreeSince)
	}
	assert.Equal(t, 2, w.remembered())
}

// The memory a check stores is the next check's, whichever agent runs it:
// a sighting by one checker and a later check by another find the agent dead
// as one checker would have.
func TestLockWatchMemoryMovesBetweenCheckers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	own := fleet.Timings{DeadAfter: 10 * time.Second}
	one := newLockWatch(own)
	free := []FreeLock{{Name: "a1", Generation: "g1", LastSeen: t0}}
	assert.Empty(t, one.observe(t0.Add(time.Second), free))
	mem := one.memory()
	if assert.Len(t, mem, 1) {
		assert.Equal(t, store.LockMemory{Name: "a1", Generation: "g1", FreeSince: t0.Add(time.Second)}, mem[0])
	}
	// The agents rows carry it to the next checker.
	free[0].FreeSince, free[0].FoundDead = mem[0].FreeSince, mem[0].FoundDead
	other := newLockWatch(own)
	other.recall(free)
	assert.Empty(t, other.observe(t0.Add(6*time.Second), free))
	dead := other.observe(t0.Add(11*time.Second), free)
	if assert.Len(t, dead, 1) {
		assert.True(t, dead[0].First)
		assert.Equal(t, t0.Add(time.Second), dead[0].FreeSince)
	}
	// Reported once: the next checker does not count it again.
	free[0].FoundDead = other.memory()[0].FoundDead
	third := newLockWatch(own)
	third.recall(free)
	dead = third.observe(t0.Add(12*time.Second), free)
	if assert.Len(t, dead, 1) {
		assert.False(t, dead[0].First)
	}
}

// A check starts without the stored memory after a restart or failover, or
// after a gap in the checks (the database was unreachable, or no agent
// checked): the agents could not heartbeat through it either.
func TestForgets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const k = 5 * time.Second
	for _, tc := range []struct {
		name string
		turn store.LivenessTurn
		want bool
	}{
		{"steady checks", store.LivenessTurn{Now: t0.Add(k), PrevChecked: t0}, false},
		{"the turn taken late, within two keepalives", store.LivenessTurn{Now: t0.Add(2 * k), PrevChecked: t0}, false},
		{"a gap past two keepalives", store.LivenessTurn{Now: t0.Add(2*k + time.Millisecond), PrevChecked: t0}, true},
		{"the server restarted", store.LivenessTurn{Now: t0.Add(k), PrevChecked: t0, ServerChanged: true}, true},
		{"the first check ever", store.LivenessTurn{Now: t0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, forgets(tc.turn, k))
		})
	}
}

// A checker judges each agent by the larger of its own dead_after and the
// one the agent announced. A fast checker (keepalive 500 ms, dead_after 1 s)
// does not take a slow agent (keepalive 3 s, dead_after 6 s) for dead between
// two of its heartbeats, and still finds it dead after its own dead_after. A
// slow checker keeps its own for a fast agent, and an agent that announced
// nothing is judged by the checker's.
func TestLockWatchJudgesByTheLargerDeadAfter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	fast := fleet.Timings{Keepalive: 500 * time.Millisecond, DeadAfter: time.Second}
	slow := fleet.Timings{Keepalive: 3 * time.Second, DeadAfter: 6 * time.Second}
	for _, tc := range []struct {
		name      string
		own, them fleet.Timings
		deadAt    float64 // seconds after the first sighting at 1
	}{
		{"fast checker, slow agent: the agent's", fast, slow, 6},
		{"slow checker, fast agent: the checker's", slow, fast, 6},
		{"fast checker, agent older than v15: the checker's", fast, fleet.Timings{}, 1},
		{"same configuration", fast, fast, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newLockWatch(tc.own)
			free := []FreeLock{{Name: "a", Generation: "a1", LastSeen: at(0), Timings: tc.them}}
			assert.Empty(t, w.observe(at(1), free))
			d, ok := w.due(at(1))
			assert.True(t, ok)
			assert.Equal(t, time.Duration(tc.deadAt*float64(time.Second)), d)
			for s := 1.5; s < 1+tc.deadAt; s += 0.5 {
				assert.Empty(t, w.observe(at(s), free), "at %.1fs", s)
			}
			assert.Len(t, w.observe(at(1+tc.deadAt), free), 1)
		})
	}
}

func TestLockWatchDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w := newLockWatch(fleet.Timings{DeadAfter: 10 * time.Second})
	_, ok := w.due(t0)
	assert.False(t, ok, "nothing remembered")
	a := FreeLock{Name: "a", Generation: "a1", LastSeen: t0}
	b := FreeLock{Name: "b", Generation: "b1", LastSeen: t0}
	w.observe(t0.Add(time.Second), []FreeLock{a})
	w.observe(t0.Add(4*time.Second), []FreeLock{a, b})
	d, ok := w.due(t0.Add(4 * time.Second))
	assert.True(t, ok)
	assert.Equal(t, 7*time.Second, d, "a's F + dead_after comes first")
	w.observe(t0.Add(11*time.Second), []FreeLock{a, b}) // a found dead
	d, ok = w.due(t0.Add(11 * time.Second))
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d, "a is reported; b is next")
	d, ok = w.due(t0.Add(20 * time.Second))
	assert.True(t, ok)
	assert.Zero(t, d, "overdue: at once")
}
