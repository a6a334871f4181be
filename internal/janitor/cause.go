package janitor

import "github.com/tetherjobs/tether/internal/lifecycle"

// Cause is why the janitor acted, from a small fixed set. It is the cause
// label of tether_janitor_actions_total (Action.Reason is free text and would
// make the label set unbounded).
type Cause string

// The causes.
const (
	CauseAgentGone      Cause = "agent_gone"      // the owner's agents row is gone
	CauseAgentStopped   Cause = "agent_stopped"   // the owner said it stopped
	CauseAgentRestarted Cause = "agent_restarted" // the owner's name has a newer generation
	CauseAgentDead      Cause = "agent_dead"      // the liveness check found the owner dead
	CauseAgentSilent    Cause = "agent_silent"    // the owner's lease went stale
	CauseTimeout        Cause = "timeout"         // pending, awol or active timeout
	CauseCanceled       Cause = "canceled"        // a cancel with no live owner
	CauseNone           Cause = "none"
)

// actionCauses are the (action, cause) pairs CauseOf gives: the label
// values of tether_janitor_actions_total, exported at 0 from the start.
func actionCauses() [][2]string {
	var out [][2]string
	add := func(k Kind, causes ...Cause) {
		for _, c := range causes {
			out = append(out, [2]string{string(k), string(c)})
		}
	}
	add(Cancel, CauseCanceled)
	for _, k := range []Kind{FailPending, FailUnclaimed, FailAWOL, FailActiveTimeout} {
		add(k, CauseTimeout)
	}
	for _, k := range []Kind{Requeue, Release, Fail} {
		add(k, CauseAgentGone, CauseAgentStopped, CauseAgentRestarted, CauseAgentDead, CauseAgentSilent)
	}
	return out
}

// CauseOf classifies the action Decide chose for in.
func CauseOf(k Kind, in Input) Cause {
	if c := kindRules[k].cause; c != "" {
		return c
	}
	if loss, lost := ownerLosses[in.owner()]; lost {
		return loss.cause
	}
	if in.Owner.Dead {
		return CauseAgentDead
	}
	return CauseAgentSilent
}

// kindRule is what an action kind stands for outside Decide.
type kindRule struct {
	stop      lifecycle.Cause // the outcome table's cause (lifecycle.Stopped)
	resumable bool            // Decide released the job rather than failed it
	cause     Cause           // the metrics label, or "" to count by the holder's condition
}

// kindRules has a row for every kind. None changes nothing, so it has no
// outcome.
var kindRules = map[Kind]kindRule{
	None:              {cause: CauseNone},
	Requeue:           {stop: lifecycle.CauseOwnerLostUnstarted},
	Release:           {stop: lifecycle.CauseOwnerLost, resumable: true},
	Fail:              {stop: lifecycle.CauseOwnerLost},
	FailAWOL:          {stop: lifecycle.CauseNotResumed, cause: CauseTimeout},
	FailActiveTimeout: {stop: lifecycle.CauseActiveTimeout, cause: CauseTimeout},
	FailPending:       {stop: lifecycle.CausePendingTimeout, cause: CauseTimeout},
	FailUnclaimed:     {stop: lifecycle.CauseUnclaimed, cause: CauseTimeout},
	Cancel:            {stop: lifecycle.CauseCancelRequested, cause: CauseCanceled},
}
