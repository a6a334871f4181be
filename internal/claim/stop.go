package claim

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// Why a job's context was cancelled.
var (
	errCancelRequested = errors.New("cancel requested")
	errLeaseLost       = errors.New("lease lost")
	errShutdown        = errors.New("agent shut down before the job finished")
	errSuperseded      = errors.New("another process registered under this agent's name")
	errSelfFenced      = errors.New("self-fenced: the agent could not renew its leases")
	errHandoff         = errors.New("handed off to another agent")
	errDetached        = errors.New("detached at shutdown; left to the janitor")
	errActiveTimeout   = errors.New("active_timeout exceeded")
)

// stopReason is why an attempt's context ended, as far as its outcome
// depends on it.
type stopReason int

const (
	stopUnknown         stopReason = iota
	stopLeaseLost                  // errLeaseLost, errSuperseded
	stopHistoryLost                // errHistoryLost
	stopHistoryResume              // errHistoryResume
	stopActiveTimeout              // errActiveTimeout
	stopCancelRequested            // errCancelRequested
	stopDetached                   // errHandoff, errDetached
	stopSelfFenced                 // errSelfFenced (either fence)
	stopShutdown                   // errShutdown
)

// reasonOf is the stopReason of a job context's cause.
func reasonOf(cause error) stopReason {
	for _, r := range [...]struct {
		err    error
		reason stopReason
	}{
		{errHistoryResume, stopHistoryResume},
		{errHistoryLost, stopHistoryLost},
		{errLeaseLost, stopLeaseLost},
		{errSuperseded, stopLeaseLost},
		{errActiveTimeout, stopActiveTimeout},
		{errCancelRequested, stopCancelRequested},
		{errHandoff, stopDetached},
		{errDetached, stopDetached},
		{errSelfFenced, stopSelfFenced},
		{errShutdown, stopShutdown},
	} {
		if errors.Is(cause, r.err) {
			return r.reason
		}
	}
	return stopUnknown
}

// stopAction is what the executor does about a stopped attempt.
type stopAction int

const (
	// actNone writes nothing. The janitor settles the job after stale_job.
	actNone stopAction = iota
	// actLeaseLost records lease_lost and writes nothing else. Someone
	// else owns the job now, so there is no Cleanup either.
	actLeaseLost
	// actHistoryLost writes nothing. The reconcile recorded why.
	actHistoryLost
	// actEnd stores Outcome through the one transition.
	actEnd
	// actRelease releases the job for another agent to resume.
	actRelease
	// actDetach stops watching. The remote work goes on, and whoever
	// releases the lease (HandOff, or the janitor) lets another resume it.
	actDetach
)

// stopInput is what decides a stopped attempt's outcome.
type stopInput struct {
	Cause         error // the job context's cause (the plugin's, for a fence it noticed first)
	Resumable     bool  // the plugin can reattach: stopping means detaching
	Agent         string
	ActiveTimeout time.Duration
}

// stopDecision is what a stopped attempt comes to.
type stopDecision struct {
	Action        stopAction
	Outcome       store.Outcome // for actEnd
	ReleaseWhy    string        // for actRelease: the metrics reason (metrics.Release*)
	ReleaseReason string        // for actRelease: the event's text
	// Log, if set, is logged at Level with the cause.
	Log   string
	Level slog.Level
}

// decideStop maps why an attempt whose plugin call was under way stopped
// to what it comes to. Pure: every cause is in its table test.
func decideStop(in stopInput) stopDecision {
	switch reasonOf(in.Cause) {
	case stopHistoryResume:
		return either(in.Resumable,
			stopDecision{Action: actRelease, ReleaseWhy: metrics.ReleaseHistoryLost, ReleaseReason: historyResumeReason},
			historyLost())
	case stopHistoryLost:
		return historyLost()
	case stopLeaseLost:
		return stopDecision{Action: actLeaseLost}
	case stopActiveTimeout:
		// It fails retriably (and is retried if the job has retries left)
		// once Cleanup has stopped what the attempt left behind.
		return stopDecision{Action: actEnd, Log: "active_timeout exceeded; stopped the plugin call", Level: slog.LevelInfo,
			Outcome: failed(plugin.Retriable, "active_timeout of "+limits.Format(in.ActiveTimeout)+" exceeded")}
	case stopCancelRequested:
		return stopDecision{Action: actEnd, Outcome: store.Outcome{Status: store.StatusCanceled, Error: "canceled by request"}}
	case stopDetached:
		// Output past the last checkpoint is the next holder's to produce.
		return stopDecision{Action: actDetach, Log: "stopped watching resumable job", Level: slog.LevelInfo}
	case stopSelfFenced:
		return either(in.Resumable,
			stopDecision{Action: actRelease, ReleaseWhy: metrics.ReleaseSelfFenced, ReleaseReason: selfFencedReason(in.Agent, in.Cause),
				Log: "self-fenced: detached from resumable job; releasing it when the database returns", Level: slog.LevelWarn},
			stopDecision{Action: actEnd, Outcome: failed(plugin.Retriable, selfFencedError(in.Agent, in.Cause)),
				Log: "self-fenced: stopped the job; recording it failed when the database returns", Level: slog.LevelWarn})
	case stopShutdown:
		// A resumable job's remote work goes on: hand it to another agent at once.
		return either(in.Resumable,
			stopDecision{Action: actRelease, ReleaseWhy: metrics.ReleaseHandoff, ReleaseReason: "handoff: agent " + in.Agent + " shutting down"},
			stopDecision{Action: actEnd, Outcome: failed(plugin.Retriable, errShutdown.Error())})
	}
	return stopDecision{Action: actNone, Log: "job context ended for an unknown reason", Level: slog.LevelError}
}

// historyLost is the decision for a job the database lost with its history.
func historyLost() stopDecision {
	return stopDecision{Action: actHistoryLost, Log: "stopped the job: the database lost this agent's lease with its history", Level: slog.LevelWarn}
}

// historyResumeReason is the release reason of a resumable job whose
// checkpoint or output the database lost.
const historyResumeReason = "database history lost: resuming from the checkpoint it kept"

// decideStopBeforeCall is decideStop for an attempt stopped after it was
// marked running but before its plugin was called. Nothing ran.
func decideStopBeforeCall(cause error) stopDecision {
	switch reasonOf(cause) {
	case stopLeaseLost:
		return stopDecision{Action: actLeaseLost}
	case stopCancelRequested:
		return stopDecision{Action: actEnd, Outcome: store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"}}
	}
	return stopDecision{Action: actEnd, Outcome: failed(plugin.Retriable, "stopped before its plugin was called: "+cause.Error())}
}

func either[T any](cond bool, yes, no T) T {
	if cond {
		return yes
	}
	return no
}

// afterCancel ends an attempt whose context was cancelled, by cause.
func (e *executor) afterCancel() {
	cause := context.Cause(e.j.ctx)
	d := decideStop(stopInput{Cause: e.fenceCause(cause), Resumable: e.j.resumable, Agent: e.holder.Name,
		ActiveTimeout: e.j.claimed.ActiveTimeout})
	e.apply(d, cause, "while its plugin call ran")
}

// beforeCall ends an attempt stopped after it was marked running but
// before its plugin was called.
func (e *executor) beforeCall(cause error) {
	e.apply(decideStopBeforeCall(cause), cause, "before its plugin was called")
}

// apply carries out d for an attempt stopped by cause. account is the
// runner's own account of the job, for a lease_lost event.
func (e *executor) apply(d stopDecision, cause error, account string) {
	if d.Log != "" {
		e.log.Log(context.Background(), d.Level, d.Log, "why", cause)
	}
	switch d.Action {
	case actLeaseLost:
		e.recordLeaseLost(metrics.LeaseLostHeartbeat, account)
	case actHistoryLost:
		e.logs.drop(e.j.key)
		signal(e.signals.Ended, Ended{JobID: e.j.claimed.Job.ID, Lease: e.j.claimed.Lease, Status: "history_lost", Error: cause.Error()})
	case actEnd:
		e.end(d.Outcome)
	case actRelease:
		e.release(d.ReleaseWhy, d.ReleaseReason)
	case actDetach:
		e.logs.drop(e.j.key)
	}
}
