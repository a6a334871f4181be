package fleet

import (
	"fmt"
	"time"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
)

// Liveness is what the fleet's rule says of one agent. Every view of an
// agent (tether agents, tether commands, the console, the
// tether_command_live_agents gauge) and the janitor's count of live agents
// come from Classify.
type Liveness string

// The liveness values, as the API's liveness field carries them.
// They are the API's (pkg/api's Liveness constants), which clients compare
// with.
const (
	Live     Liveness = api.LivenessLive     // running and heartbeating
	Draining Liveness = api.LivenessDraining // draining and heartbeating: claims nothing more
	Late     Liveness = api.LivenessLate     // silent past lateKeepalives of its keepalive, not yet stale or dead
	Stale    Liveness = api.LivenessStale    // silent past stale_job: its running jobs are the janitor's
	Dead     Liveness = api.LivenessDead     // the liveness check found its name lock free and it silent past dead_after
	Stopped  Liveness = api.LivenessStopped  // it stopped cleanly (state stopped)
)

// lateKeepalives is how many of its keepalives an agent may be silent
// before it shows late: the default offline_after, after which its
// accepted jobs are requeued.
const lateKeepalives = offlineKeepalives

// Seen is what the database holds of one agent: its agents row and the
// liveness check's memory of its name lock.
type Seen struct {
	State     string        // running, draining, stopped
	LastSeen  time.Time     // database clock
	SilentFor time.Duration // now() - last_seen, database clock
	Timings   Timings       // announced; zero: not announced
	// LockFreeSince is when the liveness check first saw its name lock
	// free (agents.lock_free_since); zero when it was held at the last
	// check, or never checked.
	LockFreeSince time.Time
	// FoundDead says the check found it dead (agents.lock_free_since and
	// lock_found_dead).
	FoundDead bool
}

// Verdict is Classify's answer: the liveness and why, in words.
type Verdict struct {
	Liveness Liveness
	Reason   string
}

// Counts reports whether the agent counts among the live agents of the
// commands it announces: not stopped, dead or stale. A late agent still
// counts, as the janitor counts it until stale_job.
func (v Verdict) Counts() bool {
	switch v.Liveness {
	case Live, Draining, Late:
		return true
	}
	return false
}

// Classify says what an agent is, as a checker whose own timings are own
// judges it: by the larger of own and the agent's announced ones (Judge),
// as the janitor does. In order: stopped (the process said so), dead (the
// liveness check found its name lock free and it silent past dead_after
// since, and it has not heartbeat since), stale (silent past stale_job),
// late (silent past three of its own keepalives, with its lock held:
// frozen or cut off; or free: it may be dying), else live or draining.
func Classify(own Timings, s Seen) Verdict {
	j := Judge(own, s.Timings)
	keepalive := s.Timings.Keepalive
	if keepalive <= 0 {
		keepalive = own.Keepalive
	}
	silent := s.SilentFor.Round(time.Second)
	lockFree := !s.LockFreeSince.IsZero()
	switch {
	case s.State == "stopped":
		return Verdict{Stopped, "stopped cleanly"}
	case s.FoundDead && lockFree && !s.LastSeen.After(s.LockFreeSince):
		return Verdict{Dead, fmt.Sprintf("name lock free since %s, silent %s (dead_after %s)",
			s.LockFreeSince.UTC().Format(time.RFC3339), silent, j.DeadAfter)}
	case j.StaleJob > 0 && s.SilentFor >= j.StaleJob:
		return Verdict{Stale, fmt.Sprintf("silent %s, past stale_job (%s)", silent, j.StaleJob)}
	case keepalive > 0 && s.SilentFor >= lateKeepalives*keepalive:
		if lockFree {
			return Verdict{Late, fmt.Sprintf("name lock free, silent %s (keepalive %s)", silent, keepalive)}
		}
		return Verdict{Late, fmt.Sprintf("name lock held, silent %s (keepalive %s): frozen or cut off from the database", silent, keepalive)}
	}
	l, why := Live, "heartbeating"
	if s.State == "draining" {
		l, why = Draining, "draining, heartbeating"
	}
	if lockFree {
		why += "; name lock free (re-taken within a keepalive)"
	}
	return Verdict{l, why}
}

// SeenOf is an agents row as Classify takes it.
func SeenOf(a store.AgentSeen) Seen {
	return Seen{State: a.State, LastSeen: a.LastSeen, SilentFor: a.SilentFor, Timings: a.Timings,
		LockFreeSince: a.LockFreeSince, FoundDead: a.FoundDead}
}

// LiveNames is the names of the agents that count as live (Verdict.Counts)
// as a checker with own judges them.
func LiveNames(own Timings, agents []store.AgentSeen) []string {
	names := []string{}
	for _, a := range agents {
		if Classify(own, SeenOf(a)).Counts() {
			names = append(names, a.Name)
		}
	}
	return names
}
