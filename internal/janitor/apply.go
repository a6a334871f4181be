package janitor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/store"
)

// candidate is one locked active row with what Decide needs.
type candidate struct {
	JobID string
	Lease int64
	Input Input
	// SelfRegistered says this process has its agents row, which the query
	// already counted among the live agents (or not, when it is draining).
	SelfRegistered bool
}

// candidateOf is the janitor's view of a locked row.
func candidateOf(r store.JanitorCandidate) candidate {
	return candidate{JobID: r.JobID, Lease: r.Lease, SelfRegistered: r.SelfRegistered, Input: Input{
		Status: r.Status, Command: r.Command, Plugin: r.Plugin, Started: r.Started,
		AgentName: r.AgentName, AgentGeneration: r.AgentGeneration,
		HeartbeatAge: r.HeartbeatAge, Released: r.Released, ReleasedAge: r.ReleasedAge, Owner: r.Owner,
		Served: r.Served, PluginLoaded: r.PluginLoaded, Resumable: r.Resumable,
		PendingTimeout: r.PendingTimeout, QueuedAge: r.QueuedAge,
		ActiveTimeout: r.ActiveTimeout, AttemptAge: r.AttemptAge,
	}}
}

// fence is what the candidate's write is fenced by. It is the lease and
// status read under lock.
func (c candidate) fence() store.JanitorFence {
	return store.JanitorFence{JobID: c.JobID, Lease: c.Lease, Status: c.Input.Status}
}

// apply writes one decided action inside tx, fenced by (job_id, lease,
// status). It reports whether the fence held. What the action writes, and
// with which status and class, is the outcome table's (lifecycle.Stopped).
// Every action that ends an attempt goes through the one transition
// (store.EndAttempt), with the retry and Cleanup decided by
// lifecycle.Decide.
func apply(ctx context.Context, tx store.JanitorTx, actor store.Holder, c candidate, a Action) (bool, error) {
	if a.Kind == None {
		return false, nil
	}
	rule, ok := kindRules[a.Kind]
	if !ok {
		return false, fmt.Errorf("unknown janitor action %q", a.Kind)
	}
	var held bool
	var err error
	switch e := lifecycle.Stopped(rule.stop, rule.resumable); e.Write {
	case lifecycle.WriteRequeue:
		held, err = tx.Requeue(ctx, c.fence(), actor, a.Reason)
	case lifecycle.WriteRelease:
		msg := fmt.Sprintf("released: %s (was held by %s)", a.Reason, c.Input.AgentName)
		held, err = tx.Release(ctx, c.fence(), actor, a.Reason, msg)
	case lifecycle.WriteEnd:
		held, err = end(ctx, tx, actor, c, a, e)
	default:
		err = fmt.Errorf("the outcome of %s writes nothing", rule.stop)
	}
	if err != nil {
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	return held, nil
}

// end applies an action that ends the attempt as e says. The levers are read
// under the row lock the candidate query took, the plan is decided in Go, and
// the transition stores it. The Cleanup, when due, is queued for any worker.
func end(ctx context.Context, tx store.JanitorTx, actor store.Holder, c candidate, a Action, e lifecycle.Ending) (bool, error) {
	attempt, levers, err := tx.Levers(ctx, c.JobID)
	if err != nil {
		return false, err
	}
	o := store.Outcome{Status: e.Status, Error: a.Reason, ErrorClass: e.ErrorClass, EventKind: string(e.Status)}
	plan := lifecycle.Decide(lifecycle.Input{
		Status: o.Status, ErrorClass: o.ErrorClass, Attempt: attempt, Levers: levers, NoRetry: e.NoRetry,
		// The janitor's own rules say when remote work may exist.
		PluginCalled: a.Cleanup, HasCleanup: a.Cleanup, Jitter: rand.Float64(),
	})
	_, err = tx.EndAttempt(ctx, store.End{
		JobID: c.JobID, Lease: c.Lease, ExpectStatus: c.Input.Status, Actor: actor,
		EventLease: c.Lease + 1, Outcome: o, Plan: plan,
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return false, nil
	}
	return err == nil, err
}
