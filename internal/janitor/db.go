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
// status). It reports whether the fence held. Every action that ends an
// attempt goes through the one transition (store.EndAttempt), with the retry
// and Cleanup decided by internal/lifecycle.
func apply(ctx context.Context, tx pgx.Tx, actor store.Holder, c candidate, a Action) (bool, error) {
	var n int
	var err error
	switch a.Kind {
	case None:
		return false, nil
	case Requeue:
		err = tx.QueryRow(ctx, queries.Get("janitor_requeue"), c.JobID, c.Lease, c.Input.Status,
			actor.Name, actor.Generation, a.Reason).Scan(&n)
	case Release:
		msg := fmt.Sprintf("released: %s (was held by %s)", a.Reason, c.Input.AgentName)
		err = tx.QueryRow(ctx, queries.Get("janitor_release"), c.JobID, c.Lease, c.Input.Status,
			actor.Name, actor.Generation, a.Reason, msg).Scan(&n)
	default:
		o, noRetry, ok := a.outcome()
		if !ok {
			return false, fmt.Errorf("unknown janitor action %q", a.Kind)
		}
		return end(ctx, tx, actor, c, a, o, noRetry)
	}
	if err != nil {
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	return n > 0, nil
}

// outcome is the attempt's end an action records: the status, error class
// and whether a retry is ruled out whatever the levers say.
func (a Action) outcome() (o store.Outcome, noRetry, ok bool) {
	switch a.Kind {
	case Fail, FailAWOL, FailActiveTimeout:
		// Retriable: retried when the job has retries left.
		return store.Outcome{Status: store.StatusFailed, Error: a.Reason, ErrorClass: "retriable", EventKind: "failed"}, false, true
	case FailPending, FailUnclaimed:
		// Waiting longer would not help: never retried.
		return store.Outcome{Status: store.StatusFailed, Error: a.Reason, ErrorClass: "permanent", EventKind: "failed"}, true, true
	case Cancel:
		return store.Outcome{Status: store.StatusCanceled, Error: a.Reason, EventKind: "canceled"}, true, true
	}
	return store.Outcome{}, false, false
}

// end applies an action that ends the attempt: the levers are read under
// the row lock the candidate query took, the plan decided in Go, and the
// transition stores it. The Cleanup, when due, is queued for any worker.
func end(ctx context.Context, tx pgx.Tx, actor store.Holder, c candidate, a Action, o store.Outcome, noRetry bool) (bool, error) {
	attempt, levers, err := store.Levers(ctx, tx, c.JobID)
	if err != nil {
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	plan := lifecycle.Decide(lifecycle.Input{
		Status: o.Status, ErrorClass: o.ErrorClass, Attempt: attempt, Levers: levers, NoRetry: noRetry,
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
