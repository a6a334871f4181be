package janitor

import (
	"fmt"
	"time"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
)

// Kind is what the janitor does to one job.
type Kind string

// Actions. The string values are the metric labels.
const (
	None     Kind = "none"
	Requeue  Kind = "requeue"   // back to queued: the plugin was never called
	Release  Kind = "release"   // claimable again, status stays running: another agent resumes it
	Fail     Kind = "fail"      // failed (retriable), then Cleanup
	FailAWOL Kind = "fail_awol" // released and not resumed within awol_timeout: failed, then Cleanup
	Cancel   Kind = "cancel"    // canceling with no live owner: canceled, then Cleanup if the plugin ran
	// FailPending is for a job queued past its pending_timeout. It is failed
	// (permanent, never retried), with no Cleanup (nothing ran).
	FailPending Kind = "fail_pending"
	// FailActiveTimeout is for a job running past active_timeout + grace
	// under a live owner that did not stop it. It is failed (retriable,
	// retried if allowed), then Cleanup runs.
	FailActiveTimeout Kind = "fail_active_timeout"
	// FailUnclaimed is for a queued job, due for awol_timeout, with no
	// pending_timeout, whose command no live agent serves. It is failed
	// (permanent, never retried), with no Cleanup (nothing ran).
	FailUnclaimed Kind = "fail_unclaimed"
)

// Action is the janitor's decision for one job.
type Action struct {
	Kind Kind
	// Reason is the release reason (release), the job's error (fail,
	// fail_awol, cancel) or the event message (requeue).
	Reason string
	// Cleanup queues a plugin Cleanup in the transaction that writes the
	// terminal status.
	Cleanup bool
}

// Owner is the agents row of a job's holder, as the database saw it.
type Owner = store.JobOwner

// Rules are the timeouts the decision depends on.
type Rules struct {
	StaleJob     time.Duration // running jobs of a silent owner are released or failed
	OfflineAfter time.Duration // accepted jobs of a silent owner are requeued
	// AWOLTimeout is when a released job not resumed by then is failed. So is
	// a queued job (without a pending_timeout) of a command no live agent
	// serves that has been due that long.
	AWOLTimeout time.Duration
	// ActiveTimeoutGrace is how long past a job's active_timeout the janitor
	// waits for the owner to enforce it itself (2×keepalive + clean_interval).
	ActiveTimeoutGrace time.Duration
}

// judging returns the rules by which a janitor with rules r judges the jobs
// of an owner that announced theirs: stale_job the larger of the two,
// offline_after no sooner than three of the owner's keepalives
// (internal/fleet). The candidates query reads by the same bounds.
func (r Rules) judging(theirs store.Timings) Rules {
	r.StaleJob = fleet.Judge(store.Timings{StaleJob: r.StaleJob}, theirs).StaleJob
	r.OfflineAfter = fleet.OfflineAfter(r.OfflineAfter, theirs)
	return r
}

// Input is everything Decide looks at for one job. Ages come from the
// database clock.
type Input struct {
	Status  jobstate.JobStatus
	Command string
	Plugin  string
	Started bool // jobs.started_at is set: the plugin was called at least once

	// The active row.
	AgentName       string // "" = unowned (claimable)
	AgentGeneration string
	HeartbeatAge    time.Duration // now() - when the holder was last heard for this lease (its agents row renews it unless detached)
	Released        bool          // released_at is set
	ReleasedAge     time.Duration // now() - released_at

	Owner Owner

	// What the live agents serve. "Live" means state running (not draining,
	// not stopped) and seen within stale_job. This janitor's own agent
	// counts for the commands it serves.
	// Served says a live agent serves the job's command (it would claim it).
	// PluginLoaded says one of those has the job's plugin.
	// Resumable says one of those's copy of the plugin declares resume.
	Served       bool
	PluginLoaded bool
	Resumable    bool

	// The job's stamped timeouts (0 = off) and the ages they bound:
	// QueuedAge = now() - run_after (how long a queued job has been due),
	// AttemptAge = now() - attempt_started_at.
	PendingTimeout time.Duration
	QueuedAge      time.Duration
	ActiveTimeout  time.Duration
	AttemptAge     time.Duration

	Rules Rules
}

// ownerCondition classifies the holder of an owned job.
type ownerCondition int

const (
	ownerLive      ownerCondition = iota
	ownerGone                     // no agents row
	ownerStopped                  // the process said it stopped
	ownerRestarted                // the name has a newer generation
)

func (in Input) owner() ownerCondition {
	switch {
	case !in.Owner.Exists:
		return ownerGone
	case in.Owner.Generation != in.AgentGeneration:
		return ownerRestarted
	case in.Owner.State == "stopped":
		return ownerStopped
	}
	return ownerLive
}

// ownerLoss is how Decide and CauseOf word a holder that is gone, stopped
// or restarted. The formats take the agent's name.
type ownerLoss struct {
	requeue string // an accepted job's requeue reason (format)
	release string // a running job's release reason
	fail    string // a running job's failure (format), or "" for the release reason
	cause   Cause  // the metrics label
}

// ownerLosses are the conditions in which a job's holder is lost at once,
// whatever its heartbeat says. A restarted holder's jobs fail "agent
// restarted", as ReleasePrevious's do.
var ownerLosses = map[ownerCondition]ownerLoss{
	ownerGone:      {"requeued: agent %s is gone; the job never started", "agent gone", "awol: agent %s gone", CauseAgentGone},
	ownerStopped:   {"requeued: agent %s stopped; the job never started", "agent stopped", "awol: agent %s stopped", CauseAgentStopped},
	ownerRestarted: {"requeued: agent %s restarted; the job never started", "agent restarted", "", CauseAgentRestarted},
}

// failure is the error of a running job of agent, lost as l says.
func (l ownerLoss) failure(agent string) string {
	if l.fail == "" {
		return l.release
	}
	return fmt.Sprintf(l.fail, agent)
}

// Decide returns what the janitor does to one job. It is pure. The caller
// reads the rows under lock, decides, and applies the action in the same
// transaction.
//
// A restarted, stopped or vanished owner is acted on at once. A live owner is
// acted on only once its lease has been silent for offline_after (accepted
// jobs) or stale_job (running and canceling jobs). A dead owner (Owner.Dead,
// with its name lock free and silent for dead_after) has its accepted jobs
// requeued and its resumable running jobs released at once. Its other jobs
// wait as a live owner's do. A running job is released only when a live agent
// serves its command with a copy of its plugin that can resume it — only such
// an agent would claim it. Otherwise it is failed, with the reason, rather
// than released to wait out awol_timeout. A queued job nobody can claim (no
// live agent serves its command) fails after awol_timeout unless its own
// pending_timeout governs.
func Decide(in Input) Action {
	switch in.Status {
	case jobstate.StatusQueued, jobstate.StatusAccepted:
		if in.Status == jobstate.StatusQueued && in.AgentName == "" {
			return decideQueued(in)
		}
		return decideAccepted(in)
	case jobstate.StatusRunning:
		if in.AgentName == "" {
			return decideReleased(in)
		}
		return decideRunning(in)
	case jobstate.StatusCanceling:
		return decideCanceling(in)
	}
	return Action{Kind: None} // terminal, or a status this version does not know
}

// decideQueued decides an unowned queued job, which waits for a claim. Only
// its pending_timeout, or — without one — the lack of any live agent serving
// its command for awol_timeout, ends the wait. A backlog of a served command
// is never failed here.
func decideQueued(in Input) Action {
	switch {
	case in.PendingTimeout > 0:
		if in.QueuedAge >= in.PendingTimeout {
			return Action{Kind: FailPending, Reason: fmt.Sprintf("pending timeout: not started within pending_timeout (%s)", limits.Format(in.PendingTimeout))}
		}
	case !in.Served && in.Rules.AWOLTimeout > 0 && in.QueuedAge >= in.Rules.AWOLTimeout:
		return Action{Kind: FailUnclaimed, Reason: fmt.Sprintf("awol: no agent claimed it within awol_timeout (%s); no live agent serves command %q",
			limits.Format(in.Rules.AWOLTimeout), in.Command)}
	}
	return Action{Kind: None}
}

func decideAccepted(in Input) Action {
	if in.AgentName == "" {
		return Action{Kind: None} // claimable: the claim loop's business
	}
	if loss, lost := ownerLosses[in.owner()]; lost {
		return Action{Kind: Requeue, Reason: fmt.Sprintf(loss.requeue, in.AgentName)}
	}
	if in.Owner.Dead {
		return Action{Kind: Requeue, Reason: fmt.Sprintf("requeued: agent %s gone (name lock free, silent %s); the job never started", in.AgentName, seconds(in.Owner.LastSeenAge))}
	}
	if in.HeartbeatAge >= in.Rules.OfflineAfter {
		return Action{Kind: Requeue, Reason: fmt.Sprintf("requeued: agent %s offline, silent for %s; the job never started", in.AgentName, seconds(in.HeartbeatAge))}
	}
	return Action{Kind: None}
}

func decideRunning(in Input) Action {
	var why, failMsg string
	loss, lost := ownerLosses[in.owner()]
	switch {
	case lost:
		why, failMsg = loss.release, loss.failure(in.AgentName)
	case in.Owner.Dead && in.resumable():
		// Early, because another agent can take the remote work over. A
		// job nobody can resume waits for stale_job, which the owner's
		// self-fence bounds. A free lock does not prove that a local
		// process stopped.
		return Action{Kind: Release, Reason: in.goneWhy()}
	case in.HeartbeatAge < in.Rules.StaleJob:
		if in.ActiveTimeout > 0 && in.AttemptAge >= in.ActiveTimeout+in.Rules.ActiveTimeoutGrace {
			// The owner is alive but did not enforce it. Back it up.
			return Action{Kind: FailActiveTimeout, Cleanup: true, Reason: fmt.Sprintf(
				"active_timeout of %s exceeded (running for %s; agent %s did not stop it, so the janitor failed it)",
				limits.Format(in.ActiveTimeout), seconds(in.AttemptAge), in.AgentName)}
		}
		return Action{Kind: None} // the owner enforces active_timeout
	default:
		why = "stale for " + seconds(in.HeartbeatAge)
		failMsg = fmt.Sprintf("awol: agent %s silent for %s", in.AgentName, seconds(in.HeartbeatAge))
	}
	if in.resumable() {
		return Action{Kind: Release, Reason: why}
	}
	return Action{Kind: Fail, Reason: failMsg + " (" + whyNotResumable(in) + ", so the job cannot be resumed)", Cleanup: true}
}

// resumable reports whether a live agent would claim the job and resume it.
func (in Input) resumable() bool { return in.Served && in.PluginLoaded && in.Resumable }

// goneWhy is the reason for acting early on a dead owner's job.
func (in Input) goneWhy() string {
	return "agent gone (name lock free, silent " + seconds(in.Owner.LastSeenAge) + ")"
}

// whyNotResumable says which condition of a release is missing.
func whyNotResumable(in Input) string {
	switch {
	case !in.Served:
		return fmt.Sprintf("no live agent serves command %q", in.Command)
	case !in.PluginLoaded:
		return fmt.Sprintf("plugin %q is not loaded by any live agent serving command %q", in.Plugin, in.Command)
	}
	return fmt.Sprintf("plugin %q does not declare resume on any live agent serving command %q", in.Plugin, in.Command)
}

func decideReleased(in Input) Action {
	if in.Released && in.ReleasedAge >= in.Rules.AWOLTimeout {
		return Action{Kind: FailAWOL, Reason: fmt.Sprintf("awol: not resumed within awol_timeout (%s)", in.Rules.AWOLTimeout), Cleanup: true}
	}
	return Action{Kind: None}
}

func decideCanceling(in Input) Action {
	if in.AgentName != "" && in.owner() == ownerLive {
		// A live owner stops the plugin itself. Before the plugin was called
		// (accepted when the cancel came) offline_after is enough.
		limit := in.Rules.StaleJob
		if !in.Started {
			limit = in.Rules.OfflineAfter
		}
		if in.HeartbeatAge < limit {
			return Action{Kind: None}
		}
	}
	msg := "canceled by request; no live agent held the job, so the janitor finished the cancel"
	if in.AgentName != "" {
		msg = fmt.Sprintf("canceled by request; agent %s stopped answering, so the janitor finished the cancel", in.AgentName)
	}
	// Remote work exists only if a plugin was called.
	return Action{Kind: Cancel, Reason: msg, Cleanup: in.Started}
}

// seconds formats a silence as whole seconds, "130s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int64(d/time.Second))
}
