package janitor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/queries"
)

// candidate is one locked active row with what Decide needs.
type candidate struct {
	JobID   string
	Command string
	Lease   int64
	Input   Input
	// SelfRegistered: this process has its agents row, which the query
	// already counted among the live agents (or not, when it is draining).
	SelfRegistered bool
}

func scanCandidates(rows pgx.Rows) ([]candidate, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		var hbAge, relAge, seenAge, pending, queuedAge, active, attemptAge float64
		in := &c.Input
		err := r.Scan(&c.JobID, &in.Status, &in.Plugin, &c.Command, &in.Started,
			&in.AgentName, &in.AgentGeneration, &c.Lease,
			&hbAge, &in.Released, &relAge,
			&in.Owner.Exists, &in.Owner.Generation, &in.Owner.State, &seenAge,
			&in.Served, &in.PluginLoaded, &in.Resumable,
			&pending, &queuedAge, &active, &attemptAge,
			&c.SelfRegistered, &in.Owner.Dead)
		in.Command = c.Command
		in.PendingTimeout, in.QueuedAge = secondsDuration(pending), secondsDuration(queuedAge)
		in.ActiveTimeout, in.AttemptAge = secondsDuration(active), secondsDuration(attemptAge)
		in.HeartbeatAge = secondsDuration(hbAge)
		in.ReleasedAge = secondsDuration(relAge)
		in.Owner.LastSeenAge = secondsDuration(seenAge)
		return c, err
	})
}

func secondsDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

func secs(d time.Duration) float64 { return d.Seconds() }

// apply writes one decided action inside tx, fenced by (job_id, lease,
// status). It reports whether the fence held. What the action writes, and
// with which status and class, is the outcome table's (lifecycle.Stopped).
// Every action that ends an attempt goes through the one transition
// (store.EndAttempt), with the retry and Cleanup decided by
// lifecycle.Decide.
func apply(ctx context.Context, tx pgx.Tx, actor store.Holder, c candidate, a Action) (bool, error) {
	if a.Kind == None {
		return false, nil
	}
	cause, resumable, ok := a.stop()
	if !ok {
		return false, fmt.Errorf("unknown janitor action %q", a.Kind)
	}
	var n int
	var err error
	switch e := lifecycle.Stopped(cause, resumable); e.Write {
	case lifecycle.WriteRequeue:
		err = tx.QueryRow(ctx, queries.Get("janitor_requeue"), c.JobID, c.Lease, c.Input.Status,
			actor.Name, actor.Generation, a.Reason).Scan(&n)
	case lifecycle.WriteRelease:
		msg := fmt.Sprintf("released: %s (was held by %s)", a.Reason, c.Input.AgentName)
		err = tx.QueryRow(ctx, queries.Get("janitor_release"), c.JobID, c.Lease, c.Input.Status,
			actor.Name, actor.Generation, a.Reason, msg).Scan(&n)
	case lifecycle.WriteEnd:
		return end(ctx, tx, actor, c, a, e)
	default:
		err = fmt.Errorf("the outcome of %s writes nothing", cause)
	}
	if err != nil {
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	return n > 0, nil
}

// stop is the outcome table's cause of an action that changes the job, and
// whether the job can be resumed (Decide released it rather than failed it).
func (a Action) stop() (cause lifecycle.Cause, resumable, ok bool) {
	switch a.Kind {
	case Requeue:
		return lifecycle.CauseOwnerLostUnstarted, false, true
	case Release:
		return lifecycle.CauseOwnerLost, true, true
	case Fail:
		return lifecycle.CauseOwnerLost, false, true
	case FailAWOL:
		return lifecycle.CauseNotResumed, false, true
	case FailActiveTimeout:
		return lifecycle.CauseActiveTimeout, false, true
	case FailPending:
		return lifecycle.CausePendingTimeout, false, true
	case FailUnclaimed:
		return lifecycle.CauseUnclaimed, false, true
	case Cancel:
		return lifecycle.CauseCancelRequested, false, true
	}
	return lifecycle.CauseUnknown, false, false
}

// end applies an action that ends the attempt as e says: the levers are
// read under the row lock the candidate query took, the plan decided in Go,
// and the transition stores it. The Cleanup, when due, is queued for any
// worker.
func end(ctx context.Context, tx pgx.Tx, actor store.Holder, c candidate, a Action, e lifecycle.Ending) (bool, error) {
	attempt, levers, err := store.Levers(ctx, tx, c.JobID)
	if err != nil {
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	o := store.Outcome{Status: e.Status, Error: a.Reason, ErrorClass: e.ErrorClass, EventKind: string(e.Status)}
	plan := lifecycle.Decide(lifecycle.Input{
		Status: o.Status, ErrorClass: o.ErrorClass, Attempt: attempt, Levers: levers, NoRetry: e.NoRetry,
		// The janitor's own rules say when remote work may exist.
		PluginCalled: a.Cleanup, HasCleanup: a.Cleanup, Jitter: rand.Float64(),
	})
	_, err = store.EndAttempt(ctx, tx, store.End{
		JobID: c.JobID, Lease: c.Lease, ExpectStatus: c.Input.Status, Actor: actor,
		EventLease: c.Lease + 1, Outcome: o, Plan: plan,
	})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	return true, nil
}
