package janitor

import (
	"time"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/store"
)

// FreeLock is one agent holding work whose name lock the liveness check saw
// free, as of that check.
type FreeLock = store.FreeLock

// DeadAgent is one agent generation the watch found dead.
type DeadAgent struct {
	Name       string
	Generation string
	// FreeSince is when its lock was first seen free (database clock). It has
	// not heartbeat since.
	FreeSince time.Time
	LastSeen  time.Time
	// Silence is now - last_seen at the check that found it dead.
	Silence time.Duration
	// First says this is the first check that found this generation dead.
	First bool
}

type agentKey struct{ name, generation string }

type watchEntry struct {
	since     time.Time     // first seen free, or last restarted by a heartbeat
	deadAfter time.Duration // the agent is judged by (fleet.Judge)
	reported  bool
}

// lockWatch is the first-free memory of the fleet for one check. It is
// pure. The caller seeds it with what the previous check stored (recall),
// feeds it the check's database time and free set, and stores its memory.
//
// An agent is dead when, at a later check, its lock is still free, at least
// dead_after has passed since the first check that saw it free (F), and its
// last_seen is not after F, so it has not heartbeat since. Requiring a second
// look and a silence since F is what keeps a database restart (every lock
// freed at once) from releasing anything. The agents re-take their locks and
// heartbeat within a keepalive, well inside dead_after.
//
// The dead_after is the larger of the checker's own (own) and the one the
// agent announced (fleet.Judge). An agent with a longer keepalive than the
// checker's heartbeats that much less often, and must not be taken for dead
// between two of its heartbeats.
type lockWatch struct {
	own  fleet.Timings
	seen map[agentKey]watchEntry
}

func newLockWatch(own fleet.Timings) *lockWatch {
	return &lockWatch{own: own, seen: map[agentKey]watchEntry{}}
}

// observe records one check at now that found free, and returns the agents
// dead as of it. Agents no longer in free (lock taken again, no work left,
// row gone) are forgotten. One that heartbeat since F starts over at now.
func (w *lockWatch) observe(now time.Time, free []FreeLock) []DeadAgent {
	next := make(map[agentKey]watchEntry, len(free))
	var dead []DeadAgent
	for _, f := range free {
		k := agentKey{f.Name, f.Generation}
		e, ok := w.seen[k]
		if !ok || f.LastSeen.After(e.since) {
			e = watchEntry{since: now}
		}
		e.deadAfter = fleet.Judge(w.own, f.Timings).DeadAfter
		if now.Sub(e.since) >= e.deadAfter {
			dead = append(dead, DeadAgent{
				Name: f.Name, Generation: f.Generation, FreeSince: e.since, LastSeen: f.LastSeen,
				Silence: now.Sub(f.LastSeen), First: !e.reported,
			})
			e.reported = true
		}
		next[k] = e
	}
	w.seen = next
	return dead
}

// due returns how long after now the first remembered agent not yet found
// dead may be found dead (its F + deadAfter), and false when none is
// pending. The caller checks again then instead of at the next keepalive, so
// detection does not lose a keepalive to the check's own timing.
func (w *lockWatch) due(now time.Time) (time.Duration, bool) {
	var first time.Time
	for _, e := range w.seen {
		if e.reported {
			continue
		}
		if at := e.since.Add(e.deadAfter); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(first.Sub(now), 0), true
}

// recall seeds the watch with the memory the previous check stored in the
// agents rows, which may have been another agent's check.
func (w *lockWatch) recall(free []FreeLock) {
	for _, f := range free {
		if !f.FreeSince.IsZero() {
			w.seen[agentKey{f.Name, f.Generation}] = watchEntry{since: f.FreeSince, reported: f.FoundDead}
		}
	}
}

// memory is what the check stores for the next one, whichever agent runs it.
func (w *lockWatch) memory() []store.LockMemory {
	out := make([]store.LockMemory, 0, len(w.seen))
	for k, e := range w.seen {
		out = append(out, store.LockMemory{Name: k.name, Generation: k.generation, FreeSince: e.since, FoundDead: e.reported})
	}
	return out
}

// forgets reports whether a check that took turn must start without the
// stored memory. A restart or failover since the previous check freed
// every lock and stopped every heartbeat, and so does a gap in the checks
// longer than two of this checker's keepalives (the database was
// unreachable, or no agent checked): the agents could not heartbeat
// through it either, so a silence across it proves nothing. An agent that
// checks steadily takes the turn within its period plus a keepalive of the
// previous check, whoever ran it, so the bound never voids a memory that
// steady checks kept.
func forgets(turn store.LivenessTurn, keepalive time.Duration) bool {
	return turn.ServerChanged || turn.PrevChecked.IsZero() || turn.Now.Sub(turn.PrevChecked) > 2*keepalive
}

// remembered is how many agents the watch holds a first-free time for.
func (w *lockWatch) remembered() int { return len(w.seen) }
