// Package fleet holds the rules by which one agent judges another. Agents of
// one fleet may be configured differently (several services, a rolling
// change of agent.keepalive), and every agent announces its own timings in
// its agents row (schema v15). It is pure: the callers read the rows and
// store what they decide.
package fleet

import (
	"time"

	"github.com/tetherjobs/tether/internal/store"
)

// Timings are the intervals an agent announces (store.Timings). Zero is
// not announced.
type Timings = store.Timings

// offlineKeepalives is agent.offline_after's default in keepalives. An
// agent does not announce its offline_after; a checker requeues the
// accepted jobs of another agent no sooner than this many of that agent's
// keepalives.
const offlineKeepalives = 3

// Judge returns the timings by which a checker whose own are own judges an
// agent that announced theirs: for each, the larger of the two. One the
// agent did not announce (an agent older than schema v15) is the checker's.
//
// The larger, because either agent may be the slow one. An agent is only
// late when it is silent past its own keepalive (its heartbeats are that far
// apart), and a checker that compared it with a shorter dead_after or
// stale_job of its own would take it for dead between two of its
// heartbeats. A checker with the longer setting keeps it: the operator chose
// it for the whole fleet's view, and no agent is judged sooner than its own
// configuration says.
func Judge(own, theirs Timings) Timings {
	return Timings{
		Keepalive:      max(own.Keepalive, theirs.Keepalive),
		DeadAfter:      max(own.DeadAfter, theirs.DeadAfter),
		StaleJob:       max(own.StaleJob, theirs.StaleJob),
		SelfFenceAfter: max(own.SelfFenceAfter, theirs.SelfFenceAfter),
	}
}

// OfflineAfter is when a checker whose own offline_after is own requeues the
// accepted jobs of an agent that announced theirs: own, but no sooner than
// three of the agent's keepalives (offline_after's default), since
// offline_after itself is not announced.
func OfflineAfter(own time.Duration, theirs Timings) time.Duration {
	return max(own, offlineKeepalives*theirs.Keepalive)
}
