package claim

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tetherjobs/tether/internal/lifecycle"
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

// causeOf names the outcome table's cause (lifecycle.Stopped) of a job
// context's cause.
func causeOf(cause error) lifecycle.Cause {
	for _, r := range [...]struct {
		err   error
		cause lifecycle.Cause
	}{
		{errHistoryResume, lifecycle.CauseHistoryResume},
		{errHistoryLost, lifecycle.CauseHistoryLost},
		{errLeaseLost, lifecycle.CauseLeaseLost},
		{errSuperseded, lifecycle.CauseLeaseLost},
		{errActiveTimeout, lifecycle.CauseActiveTimeout},
		{errCancelRequested, lifecycle.CauseCancelRequested},
		{errHandoff, lifecycle.CauseHandedOff},
		{errDetached, lifecycle.CauseHandedOff},
		{errSelfFenced, lifecycle.CauseSelfFenced},
		{errShutdown, lifecycle.CauseShutdown},
	} {
		if errors.Is(cause, r.err) {
			return r.cause
		}
	}
	return lifecycle.CauseUnknown
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

// decideStop maps why an attempt whose plugin call was under way stopped to
// what it comes to. The outcome table (lifecycle.Stopped) decides what is
// written. This function adds the agent's words, its metrics reason and which
// of the writes of nothing it is. It is pure. Every cause is in its table
// test.
func decideStop(in stopInput) stopDecision {
	c := causeOf(in.Cause)
	e := lifecycle.Stopped(c, in.Resumable)
	switch e.Write {
	case lifecycle.WriteEnd:
		return endDecision(c, e, in)
	case lifecycle.WriteRelease:
		return releaseDecision(c, in)
	}
	return nothingDecision(c)
}

// endDecision is the end of an attempt stopped for c, as e says, with the
// error and log line the agent gives it.
func endDecision(c lifecycle.Cause, e lifecycle.Ending, in stopInput) stopDecision {
	d := stopDecision{Action: actEnd, Outcome: store.Outcome{Status: e.Status, ErrorClass: e.ErrorClass}}
	switch c {
	case lifecycle.CauseActiveTimeout:
		// It is retried if the job has retries left, once Cleanup has
		// stopped what the attempt left behind.
		d.Outcome.Error = "active_timeout of " + limits.Format(in.ActiveTimeout) + " exceeded"
		d.Log, d.Level = "active_timeout exceeded; stopped the plugin call", slog.LevelInfo
	case lifecycle.CauseCancelRequested:
		d.Outcome.Error = "canceled by request"
	case lifecycle.CauseSelfFenced:
		d.Outcome.Error = selfFencedError(in.Agent, in.Cause)
		d.Log, d.Level = "self-fenced: stopped the job; recording it failed when the database returns", slog.LevelWarn
	default: // a shutdown's cause is errShutdown itself
		d.Outcome.Error = in.Cause.Error()
	}
	return d
}

// releaseDecision is the release of a resumable attempt stopped for c.
func releaseDecision(c lifecycle.Cause, in stopInput) stopDecision {
	switch c {
	case lifecycle.CauseSelfFenced:
		return stopDecision{Action: actRelease, ReleaseWhy: metrics.ReleaseSelfFenced, ReleaseReason: selfFencedReason(in.Agent, in.Cause),
			Log: "self-fenced: detached from resumable job; releasing it when the database returns", Level: slog.LevelWarn}
	case lifecycle.CauseShutdown:
		// The remote work goes on. It is handed to another agent at once.
		return stopDecision{Action: actRelease, ReleaseWhy: metrics.ReleaseHandoff, ReleaseReason: "handoff: agent " + in.Agent + " shutting down"}
	case lifecycle.CauseHistoryResume:
		return stopDecision{Action: actRelease, ReleaseWhy: metrics.ReleaseHistoryLost, ReleaseReason: historyResumeReason}
	}
	// causeOf names no other cause the table releases for.
	return nothingDecision(lifecycle.CauseUnknown)
}

// nothingDecision is which of the writes of nothing an attempt stopped for
// c comes to.
func nothingDecision(c lifecycle.Cause) stopDecision {
	switch c {
	case lifecycle.CauseLeaseLost:
		return stopDecision{Action: actLeaseLost}
	case lifecycle.CauseHistoryLost, lifecycle.CauseHistoryResume:
		return historyLost()
	case lifecycle.CauseHandedOff:
		// Output past the last checkpoint is the next holder's to produce.
		return stopDecision{Action: actDetach, Log: "stopped watching resumable job", Level: slog.LevelInfo}
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
	switch causeOf(cause) {
	case lifecycle.CauseLeaseLost:
		return stopDecision{Action: actLeaseLost}
	case lifecycle.CauseCancelRequested:
		return stopDecision{Action: actEnd, Outcome: store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"}}
	}
	return stopDecision{Action: actEnd, Outcome: failed(plugin.Retriable, "stopped before its plugin was called: "+cause.Error())}
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
