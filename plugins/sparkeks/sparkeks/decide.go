package sparkeks

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// The policy decisions of the plugin, kept pure so they are tested as
// tables. The operator facts they rely on are kubeflow spark-operator
// v2.5.2's: internal/controller/sparkapplication/controller.go (the state
// machine, Reconcile and the reconcile<State>SparkApplication functions),
// pkg/util/sparkapplication.go (ShouldRetry, IsTerminated, IsExpired) and
// api/v1beta2/sparkapplication_types.go (the states; the new state is "").

// spark-operator's application states (api/v1beta2/sparkapplication_types.go).
const (
	stateNew              = "" // ApplicationStateNew is the empty string
	stateNewAlias         = "NEW"
	stateSubmitted        = "SUBMITTED"
	stateRunning          = "RUNNING"
	stateCompleted        = "COMPLETED"
	stateFailed           = "FAILED"
	stateSubmissionFailed = "SUBMISSION_FAILED"
	statePendingRerun     = "PENDING_RERUN"
	stateInvalidating     = "INVALIDATING"
	stateSucceeding       = "SUCCEEDING"
	stateFailing          = "FAILING"
	stateUnknown          = "UNKNOWN"
)

// driverPodNotFound is the errorMessage spark-operator v2.5.2 sets when the
// driver pod of a submitted application is gone (deleted, evicted with its
// node, or never created past driver-pod-creation-grace-period).
// updateDriverState in internal/controller/sparkapplication/controller.go
// sets FAILING with "driver pod not found", and reconcileFailingSparkApplication
// moves it to FAILED (restartPolicy Never) keeping the message. The driver
// may have run the query to its end before it vanished.
const driverPodNotFound = "driver pod not found"

// existingAction is what a run does with an application of an earlier
// attempt of the same job that holds the job's name.
type existingAction int

const (
	// actAdopt follows it to its end as this attempt's outcome. It is (or
	// may be) running the query, or has run it. A retry never deletes it.
	actAdopt existingAction = iota
	// actReplace deletes it (UID precondition) and submits this attempt's.
	// It really failed, and the operator will never run it again.
	actReplace
	// actWaitGone waits until it is gone (it is being deleted, by the
	// previous attempt's Cleanup or by its TTL), then submits.
	actWaitGone
	// actUnsafe ends the job outcome_unknown. A state the plugin cannot
	// follow safely (suspended, a state of a later operator).
	actUnsafe
)

func (a existingAction) String() string { return actionNames[a] }

var actionNames = [...]string{
	actAdopt:    "adopt",
	actReplace:  "replace",
	actWaitGone: "wait until gone",
	actUnsafe:   "outcome unknown",
}

// decideExisting is the adopt-or-replace rule for an earlier attempt's
// application (st its status), and why.
//
//   - Being deleted: wait until it is gone. Its deletion was decided already
//     (the previous attempt's Cleanup, which the host runs before a retry).
//   - FAILED: terminal (pkg/util IsTerminated; reconcileTerminated only ever
//     deletes it on its TTL): replace.
//   - SUBMISSION_FAILED with restartPolicy Never: spark-submit failed, so no
//     driver ran, and reconcileFailedSubmissionSparkApplication moves it to
//     FAILED (ShouldRetry is false for Never): replace. With another policy
//     the operator may submit it again: adopt.
//   - COMPLETED: the query ran to its end: adopt (the job succeeds at once).
//   - "", NEW, SUBMITTED, RUNNING, PENDING_RERUN, SUCCEEDING, INVALIDATING,
//     FAILING, UNKNOWN: it is running, or about to, or its driver's fate is
//     not known yet (FAILING becomes FAILED or PENDING_RERUN; SUCCEEDING
//     becomes COMPLETED or PENDING_RERUN; UNKNOWN is the operator having lost
//     sight of the driver pod): adopt and follow it; the usual rules
//     (unknown_grace, startup_timeout, timeout) apply to it.
//   - anything else (SUSPENDING, SUSPENDED, RESUMING, or a state a later
//     operator adds): outcome_unknown, touching nothing.
func decideExisting(st appStatus) (existingAction, string) {
	if st.Deleting {
		return actWaitGone, "it is being deleted"
	}
	switch st.State {
	case stateFailed:
		return actReplace, "it failed"
	case stateSubmissionFailed:
		// "" is the CRD's default, which the operator treats as Never
		// (ShouldRetry matches only Always and OnFailure).
		if cmp.Or(st.RestartPolicy, RestartPolicyNever) == RestartPolicyNever {
			return actReplace, "its submission failed and restartPolicy Never keeps it failed"
		}
		return actAdopt, fmt.Sprintf("its submission failed but restartPolicy %s lets spark-operator submit it again", st.RestartPolicy)
	case stateCompleted:
		return actAdopt, "it completed"
	case stateNew, stateNewAlias, stateSubmitted, stateRunning, statePendingRerun,
		stateSucceeding, stateInvalidating, stateFailing, stateUnknown:
		return actAdopt, "it is " + cmp.Or(st.State, "new") + " and may run (or have run) the query"
	default:
		return actUnsafe, "its state " + st.State + " is not one the plugin can follow safely"
	}
}

// startupStates are the states of an application whose driver has not run
// yet: created, submitted (the driver pod pending: image pull, scheduling),
// or waiting for a rerun.
func isStartupState(state string) bool {
	switch state {
	case stateNew, stateNewAlias, stateSubmitted, statePendingRerun:
		return true
	}
	return false
}

// driverStarted reports whether a driver pod got past its startup: it is
// running or has ended, or one of its containers has started. Such a pod's
// application is past startup whatever state the operator still shows.
func driverStarted(p *corev1.Pod) bool {
	if p == nil {
		return false
	}
	switch p.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
		return true
	}
	return slices.ContainsFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool {
		return cs.State.Running != nil || cs.State.Terminated != nil
	})
}

// decideStuck reports whether an application is stuck before RUNNING:
// startup_timeout (0 disables) passed since its creation, it is in a
// startup state and it was never seen running.
func decideStuck(state string, everRunning bool, createdAt, now time.Time, startupTimeout time.Duration) bool {
	if startupTimeout <= 0 || everRunning || createdAt.IsZero() || !isStartupState(state) {
		return false
	}
	return !now.Before(createdAt.Add(startupTimeout))
}

// failedClass is the error class of a job whose application ended FAILED
// or SUBMISSION_FAILED (failedOutcome outcomeFailed). SUBMISSION_FAILED
// under restartPolicy Never, the only policy the plugin submits, means
// spark-submit started no driver and the operator will not submit again
// (reconcileFailedSubmissionSparkApplication). The cause was a full
// ResourceQuota, a webhook down or a refused API call, and nothing of the
// query ran, so the job is retriable (its max_retry bounds it). FAILED means
// the driver ran: permanent.
func failedClass(state string) plugin.ErrorClass {
	if state == stateSubmissionFailed {
		return plugin.Retriable
	}
	return plugin.Permanent
}

// submitFailedPrefix opens the errorMessage spark-operator v2.5.2 records
// when spark-submit failed ("failed to submit spark application: …"); the
// application keeps it when it moves from SUBMISSION_FAILED to FAILED.
const submitFailedPrefix = "failed to submit spark application"

// failedOutcome is the job's outcome of an application that ended FAILED or
// SUBMISSION_FAILED: failed, except when the driver was stopped from
// outside. That is a driver pod that vanished ("driver pod not found"), or
// one deleted or evicted (interrupted says how, "" when not). The driver
// may have done part of the query, or all of it, before, so the outcome is
// unknown, and the query is not to blame.
func failedOutcome(state, errorMessage, interrupted string) string {
	if state == stateFailed && (errorMessage == driverPodNotFound || interrupted != "") {
		return outcomeUnknown
	}
	return outcomeFailed
}

// podEvicted is the pod status reason a kubelet sets on a pod it evicts
// for node pressure (Kubernetes "Node-pressure Eviction": the phase is
// Failed and the reason Evicted).
const podEvicted = "Evicted"

// driverInterrupted says how a driver pod was stopped from outside, or "".
// A deleted pod carries a deletionTimestamp while the kubelet stops its
// containers (SIGTERM, exit 143, then SIGKILL, 137) and records them
// Failed. An evicted pod is Failed with reason Evicted. Either way the
// operator sees a failed driver container, not the query's failure.
func driverInterrupted(p *corev1.Pod) string {
	switch {
	case p == nil:
		return ""
	case p.DeletionTimestamp != nil:
		return "driver pod " + p.Name + " was deleted while it ran"
	case p.Status.Reason == podEvicted:
		return "driver pod " + p.Name + " was evicted: " + p.Status.Message
	}
	return ""
}

// blindAction is what Cleanup does with the application of an attempt
// whose outcome was decided blind (Handle.Blind: the API server refused the
// plugin past auth_grace, so the job ended outcome_unknown while the
// application ran on).
type blindAction int

const (
	// blindDelete deletes it as any Cleanup does: it is gone (or the name
	// is another's now), being deleted, failed, or past its job's timeout.
	blindDelete blindAction = iota
	// blindKeep leaves it alone: it COMPLETED, so the query ran to its
	// end. It is the evidence of the job's success, which a requeue of the
	// job records by adopting it (decideExisting) without running the
	// query again; spark-operator deletes it time_to_live after its end.
	blindKeep
	// blindWait leaves it alone for now and fails Cleanup retriably (the
	// host's queue retries it with backoff): it still runs and may
	// complete.
	blindWait
)

// decideBlindCleanup is blindAction for the attempt's application (found:
// it exists and is the attempt's; st its status) at now, given its job's
// deadline (its creation plus timeout; zero: no timeout), and why.
func decideBlindCleanup(found bool, st appStatus, now, deadline time.Time) (blindAction, string) {
	switch ph := phaseOf(st.State); {
	case !found:
		return blindDelete, "it no longer exists"
	case st.Deleting:
		return blindDelete, "it is being deleted"
	case ph == phaseSucceeded:
		return blindKeep, "it completed"
	case ph == phaseFailed:
		return blindDelete, "it ended " + st.State
	case !deadline.IsZero() && !now.Before(deadline):
		return blindDelete, "it is " + cmp.Or(st.State, "new") + " past its job's timeout"
	}
	return blindWait, "it is " + cmp.Or(st.State, "new") + " and may still complete"
}

// sight is what the plugin sees of a job's application when it decides
// the job's outcome.
type sight struct {
	State        string // status.applicationState.state
	ErrorMessage string // status.applicationState.errorMessage
	// Interrupted: the driver pod was seen deleted or evicted while it
	// ran, or was gone from the API server when its application ended
	// FAILED (Handle.Interrupted).
	Interrupted bool
	// Stuck: decideStuck (startup_timeout passed in a startup state, and
	// neither the application nor its driver pod ever got past startup).
	Stuck bool
	// UnknownTooLong: the application has been UNKNOWN for unknown_grace.
	UnknownTooLong bool
	// TimedOut: the job's timeout passed (and the application is not in a
	// terminal state).
	TimedOut bool
	// Gone: the submitted application no longer exists (a GET's 404).
	Gone bool
	// Blind: the API server refused the plugin for auth_grace; nothing
	// else is known.
	Blind bool
}

// rule names the row of the outcome table (README.md, "Outcomes") that
// decided.
type rule string

const (
	ruleRunning        rule = "running"
	ruleBlind          rule = "blind"
	ruleGone           rule = "gone"
	ruleCompleted      rule = "completed"
	ruleDriverVanished rule = "driver pod not found"
	ruleInterrupted    rule = "driver interrupted"
	ruleFailed         rule = "failed"
	ruleTimedOut       rule = "timed out"
	ruleStuck          rule = "stuck"
	ruleUnknown        rule = "unknown too long"
)

// decision is the job's outcome for a sight.
type decision struct {
	Rule    rule
	Outcome string            // "" (follow on), succeeded, failed, outcome_unknown
	Class   plugin.ErrorClass // the job's error class; "" when it goes on or succeeded
	// Delete: the plugin deletes the application (and its ConfigMap).
	Delete bool
}

// decideOutcome is the job's outcome for what the plugin sees. In order:
// nothing seen (blind) or the application gone is outcome_unknown; a
// terminal state decides (COMPLETED succeeded; FAILED failed permanently,
// unless its driver was stopped from outside: outcome_unknown;
// SUBMISSION_FAILED failed retriably: failedOutcome, failedClass); then
// the job's timeout and startup_timeout fail it permanently and delete the
// application; then UNKNOWN past unknown_grace is outcome_unknown;
// anything else goes on.
func decideOutcome(s sight) decision {
	unknown := decision{Outcome: outcomeUnknown, Class: plugin.OutcomeUnknown}
	if s.State == stateFailed && strings.HasPrefix(s.ErrorMessage, submitFailedPrefix) {
		// The operator moves SUBMISSION_FAILED on to FAILED under
		// restartPolicy Never; a plugin that looks only then sees FAILED,
		// but no driver ever ran.
		s.State = stateSubmissionFailed
	}
	ph := phaseOf(s.State)
	switch {
	case s.Blind:
		unknown.Rule = ruleBlind
	case s.Gone:
		unknown.Rule = ruleGone
	case ph == phaseSucceeded:
		return decision{Rule: ruleCompleted, Outcome: outcomeSucceeded}
	case ph == phaseFailed && failedOutcome(s.State, s.ErrorMessage, "") == outcomeUnknown:
		unknown.Rule = ruleDriverVanished
	case ph == phaseFailed && s.Interrupted && failedOutcome(s.State, s.ErrorMessage, "interrupted") == outcomeUnknown:
		unknown.Rule = ruleInterrupted
	case ph == phaseFailed:
		return decision{Rule: ruleFailed, Outcome: outcomeFailed, Class: failedClass(s.State)}
	case s.TimedOut:
		return decision{Rule: ruleTimedOut, Outcome: outcomeFailed, Class: plugin.Permanent, Delete: true}
	case s.Stuck:
		return decision{Rule: ruleStuck, Outcome: outcomeFailed, Class: plugin.Permanent, Delete: true}
	case ph == phaseUnknown && s.UnknownTooLong:
		unknown.Rule = ruleUnknown
	default:
		return decision{Rule: ruleRunning}
	}
	return unknown
}
