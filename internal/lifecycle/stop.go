package lifecycle

import (
	"cmp"

	"github.com/tetherjobs/tether/internal/jobstate"
)

// Cause is why an attempt stopped without its plugin's own answer. The agent
// names the cause of a plugin call it stopped, and the janitor the cause of
// an attempt it settled for an owner that no longer looks after it.
type Cause int

// The causes. The Stopped table says how each one ends.
const (
	// CauseUnknown is a stop nobody explained. Nothing is written.
	CauseUnknown Cause = iota
	// CauseCancelRequested means someone asked to cancel the job.
	CauseCancelRequested
	// CauseActiveTimeout means the attempt ran past its active_timeout. The
	// agent stops the call itself, and the janitor backs up a live owner that
	// did not.
	CauseActiveTimeout
	// CauseLeaseLost means the heartbeat found the lease gone, or another
	// process registered under the agent's name.
	CauseLeaseLost
	// CauseSelfFenced means the agent could not renew its leases in time.
	CauseSelfFenced
	// CauseShutdown means the agent shut down before the job finished.
	CauseShutdown
	// CauseHandedOff means a drain or a shutdown stopped watching a resumable
	// job. Its remote work goes on, and the release is the drain's (or,
	// detached, the janitor's).
	CauseHandedOff
	// CauseHistoryLost means the database lost the agent's lease with its
	// history, so the job is not the agent's any more.
	CauseHistoryLost
	// CauseHistoryResume means the database lost the job's latest checkpoint
	// or output with its history.
	CauseHistoryResume
	// CausePluginCrashed means the plugin process crashed or the call to it
	// broke, and resuming the same attempt (for a resumable plugin) is over.
	CausePluginCrashed
	// CauseOwnerLost means the holder is gone, stopped, restarted, dead or
	// silent past stale_job after its plugin was called.
	CauseOwnerLost
	// CauseOwnerLostUnstarted means the holder was lost before it called the
	// plugin. Nothing ran.
	CauseOwnerLostUnstarted
	// CauseNotResumed is for a released job nobody resumed within
	// awol_timeout.
	CauseNotResumed
	// CausePendingTimeout is for a queued job not started within its
	// pending_timeout.
	CausePendingTimeout
	// CauseUnclaimed is for a queued job due for awol_timeout that no live
	// agent serves.
	CauseUnclaimed
)

var causeNames = map[Cause]string{
	CauseUnknown:            "unknown",
	CauseCancelRequested:    "cancel_requested",
	CauseActiveTimeout:      "active_timeout",
	CauseLeaseLost:          "lease_lost",
	CauseSelfFenced:         "self_fenced",
	CauseShutdown:           "shutdown",
	CauseHandedOff:          "handed_off",
	CauseHistoryLost:        "history_lost",
	CauseHistoryResume:      "history_resume",
	CausePluginCrashed:      "plugin_crashed",
	CauseOwnerLost:          "owner_lost",
	CauseOwnerLostUnstarted: "owner_lost_unstarted",
	CauseNotResumed:         "not_resumed",
	CausePendingTimeout:     "pending_timeout",
	CauseUnclaimed:          "unclaimed",
}

// String names the cause for logs and test names.
func (c Cause) String() string {
	return cmp.Or(causeNames[c], "unknown")
}

// Write is what the one acting on a stopped attempt stores.
type Write int

// The writes.
const (
	// WriteNothing means the job is not the actor's to write any more
	// (someone else holds it, or it is being handed on), or the stop is not
	// understood.
	WriteNothing Write = iota
	// WriteEnd means the attempt ends with Ending's status and class, through
	// the one transition (store.EndAttempt), whose retry and Cleanup Decide
	// then plans.
	WriteEnd
	// WriteRelease means the lease is released and the job stays running, so
	// that another agent resumes its remote work.
	WriteRelease
	// WriteRequeue means the job goes back to the queue in the same attempt.
	WriteRequeue
)

// Ending is how an attempt stopped for a cause ends.
type Ending struct {
	Write      Write
	Status     jobstate.JobStatus  // for WriteEnd
	ErrorClass jobstate.ErrorClass // for a failed WriteEnd
	// NoRetry rules a retry out whatever the levers say (Input.NoRetry).
	NoRetry bool
}

var (
	canceled       = Ending{Write: WriteEnd, Status: jobstate.StatusCanceled, NoRetry: true}
	failRetriable  = Ending{Write: WriteEnd, Status: jobstate.StatusFailed, ErrorClass: jobstate.Retriable}
	failPermanent  = Ending{Write: WriteEnd, Status: jobstate.StatusFailed, ErrorClass: jobstate.Permanent, NoRetry: true}
	release        = Ending{Write: WriteRelease}
	requeue        = Ending{Write: WriteRequeue}
	nothingWritten = Ending{Write: WriteNothing}
)

// Stopped returns how an attempt stopped for cause ends. Resumable says
// that a holder can take its remote work over. That holds when the plugin
// declares resume (and, for the janitor, when a live agent serving the
// command would claim it).
//
//	cause                    resumable        not resumable
//	cancel_requested         canceled         canceled
//	active_timeout           failed, retr.    failed, retriable
//	lease_lost               nothing          nothing
//	self_fenced              release          failed, retriable
//	shutdown                 release          failed, retriable
//	handed_off               nothing          nothing
//	history_lost             nothing          nothing
//	history_resume           release          nothing
//	plugin_crashed           failed, retr.    failed, retriable
//	owner_lost               release          failed, retriable
//	owner_lost_unstarted     requeue          requeue
//	not_resumed              failed, retr.    failed, retriable
//	pending_timeout          failed, perm.    failed, permanent
//	unclaimed                failed, perm.    failed, permanent
//	unknown                  nothing          nothing
//
// A retriable failure is retried when the job has retries left (Decide).
// Waiting longer would not help a job that waited too long in the queue, so
// those failures are never retried. A cancel wins over a retry. The rule is
// stored in the one transition (queries/attempt_end.sql), because a cancel
// can arrive while the end is on its way. A retry of a job whose cancel was
// requested is stored as canceled instead.
func Stopped(cause Cause, resumable bool) Ending {
	e := stopEndings[cause]
	if resumable {
		return e.resumable
	}
	return e.notResumable
}

// stopEndings is Stopped's table. A cause it does not list writes nothing.
var stopEndings = map[Cause]struct{ resumable, notResumable Ending }{
	CauseCancelRequested:    {canceled, canceled},
	CauseActiveTimeout:      {failRetriable, failRetriable},
	CauseLeaseLost:          {nothingWritten, nothingWritten},
	CauseSelfFenced:         {release, failRetriable},
	CauseShutdown:           {release, failRetriable},
	CauseHandedOff:          {nothingWritten, nothingWritten},
	CauseHistoryLost:        {nothingWritten, nothingWritten},
	CauseHistoryResume:      {release, nothingWritten},
	CausePluginCrashed:      {failRetriable, failRetriable},
	CauseOwnerLost:          {release, failRetriable},
	CauseOwnerLostUnstarted: {requeue, requeue},
	CauseNotResumed:         {failRetriable, failRetriable},
	CausePendingTimeout:     {failPermanent, failPermanent},
	CauseUnclaimed:          {failPermanent, failPermanent},
	CauseUnknown:            {nothingWritten, nothingWritten},
}
