package claim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// end stores how the attempt ended, through the one transition, and then
// runs the Cleanup the plan calls for. Retries, Cleanup and the cancel rule
// are decided by internal/lifecycle (and, for a cancel racing the write, by
// the statement). The write waits for the database if it must. The runner
// stays registered meanwhile, so its lease is renewed and still fences it.
func (e *executor) end(o store.Outcome) {
	c := e.j.claimed
	o = sanitize(o)
	in := lifecycle.Input{Status: o.Status, ErrorClass: o.ErrorClass, Attempt: c.Job.Attempt, Levers: limits.Set(c.Job.Limits),
		PluginCalled: e.called, HasCleanup: e.j.hasCleanup, Jitter: rand.Float64()}
	end := store.End{JobID: c.Job.ID, Lease: c.Lease, HolderGeneration: e.holder.Generation, Actor: e.holder, Outcome: o,
		Plan: lifecycle.Decide(in), CleanupBy: e.holder.Name, CleanupHold: e.cleanupTimeout + e.finalTimeout}
	ended, err := e.storeEnd(&end, in)
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		e.recordLeaseLost(metrics.LeaseLostWrite, "its outcome was: "+describe(o))
		return
	case errors.Is(err, store.ErrOutputGap):
		// The database lost output it had acknowledged. The end would seal
		// the gap. The resume reads that output again and reports the
		// outcome again.
		e.log.Warn("the database lost output of the job it had acknowledged; releasing it to be resumed from its checkpoint", "status", o.Status, "err", err)
		e.release(metrics.ReleaseHistoryLost, historyResumeReason)
		return
	case err != nil:
		e.log.Error("could not record the job's end; the janitor settles it after stale_job", "status", o.Status, "err", err)
		signal(e.signals.Ended, Ended{JobID: c.Job.ID, Lease: c.Lease, Status: "unrecorded", Error: err.Error()})
		return
	}
	e.afterEnd(end, ended, o)
}

// storeEnd writes end until it lands or is refused for good. An outcome
// the database refuses as data is replaced, once, by a truthful permanent
// failure (with its own plan), rather than retried forever.
func (e *executor) storeEnd(end *store.End, in lifecycle.Input) (store.Ended, error) {
	o := end.Outcome
	unsure := false // a try of the end failed after it was sent: it may have landed
	for refused := false; ; refused = true {
		ended, err := e.writeEnd(*end, &unsure)
		var de *store.DataError
		if refused || !errors.As(err, &de) {
			return ended, err
		}
		e.log.Error("the database refused the job's outcome; recording a permanent failure instead", "status", o.Status, "err", err)
		in.Status, in.ErrorClass = store.StatusFailed, plugin.Permanent
		end.Outcome = sanitize(failed(plugin.Permanent,
			fmt.Sprintf("tether could not store the job's outcome (%s: %s): %v", o.Status, firstLine(o.Error), de.Err)))
		end.Plan = lifecycle.Decide(in)
	}
}

// writeEnd sends end, with the job's output before it, waiting for the
// database if it must. unsure is set once a try failed after it was sent.
// A lease found lost after such a try may be the earlier try's own
// success, so the database is asked (priorEnd).
func (e *executor) writeEnd(end store.End, unsure *bool) (store.Ended, error) {
	var ended store.Ended
	err := e.retryWrite("writing final status", func(ctx context.Context) error {
		settle, err := e.outputForEnd(ctx, &end)
		if err != nil {
			return err
		}
		ended, err = e.sendEnd(ctx, end)
		settle(err)
		return mayHaveLanded(err, unsure)
	})
	if errors.Is(err, store.ErrLeaseLost) && *unsure {
		// Sent again after an answer was lost. The fence is gone because the
		// earlier try landed, or because the lease really was lost.
		if _, prior, ok := e.priorEnd(end.CleanupBy); ok {
			e.log.Warn("the job's end had been stored by an earlier try whose answer was lost", "status", prior.Status)
			return prior, nil
		}
	}
	return ended, err
}

// outputForEnd readies the runner's output for its end. A runner that
// cannot be resumed stores it first. A resumable runner's output goes in
// the end's own transaction (end.Output), fenced against a gap the
// database's lost history left (end.LogAfter): if the end does not land,
// neither does the output, and the resume writes it once. settle takes the
// end's result.
func (e *executor) outputForEnd(ctx context.Context, end *store.End) (settle func(error), err error) {
	if !e.j.resumable {
		return func(error) {}, e.logs.flush(ctx)
	}
	lb, settle, err := e.logs.takeForEnd(e.j.key)
	if err != nil {
		return nil, err
	}
	end.Output, end.OutputLimit, end.LogAfter = lb, e.logs.max, lb.After
	return settle, nil
}

// sendEnd tries the end once. It goes alone when it carries more than the
// batch stores (store.FinalBatchable), else in the finals batch.
func (e *executor) sendEnd(ctx context.Context, end store.End) (store.Ended, error) {
	if !store.FinalBatchable(end) {
		return e.store.EndAttempt(ctx, end)
	}
	// The plugin call is over, so the next claim may have the slot while
	// this end waits for its batch. An end the database refuses is stored
	// again, Cleanup included, still without its slot. The 2 × capacity
	// bound on held leases still holds.
	e.freeSlot(e.j)
	r, err := e.finals.do(ctx, end) // the hot path: shares a statement
	if err != nil {
		return store.Ended{}, err
	}
	return r.ended, r.err
}

// afterEnd finishes an attempt whose end is stored. It records the end for
// the reconcile, counts and logs it, and runs the Cleanup the transition
// handed this agent. o is the outcome before any refusal replaced it.
func (e *executor) afterEnd(end store.End, ended store.Ended, o store.Outcome) {
	c := e.j.claimed
	e.j.ended.Store(true)
	e.remember(e.j, &end)
	e.observeEnd(ended)
	if ended.Retried {
		e.metrics.JobsFinished.WithLabelValues(metrics.FinishedRetried).Inc()
		e.log.Info("attempt failed; retry scheduled", "error", o.Error, "next_attempt", ended.Attempt, "run_after", ended.RunAfter, "after_cleanup", end.Plan.Cleanup)
	} else {
		e.metrics.JobsFinished.WithLabelValues(string(ended.Status)).Inc()
		e.log.Info("job finished", "status", ended.Status, "error", end.Outcome.Error)
	}
	if ended.Cleanup.Held() {
		e.cleanup(ended.Cleanup)
	}
	signal(e.signals.Ended, Ended{JobID: c.Job.ID, Lease: c.Lease, Status: string(ended.Status), Error: end.Outcome.Error})
}

// observeEnd records the durations of an attempt whose end is stored:
// the database's ages at claim plus the time held since.
func (e *executor) observeEnd(ended store.Ended) {
	c, held := e.j.claimed, e.now().Sub(e.j.claimedAt)
	outcome := ended.Status
	if ended.Retried {
		outcome = "retried"
	}
	e.metrics.AttemptDuration.WithLabelValues(c.Job.Command, string(outcome)).Observe((c.AttemptAge + held).Seconds())
	if store.Terminal(ended.Status) {
		e.metrics.JobDuration.WithLabelValues(c.Job.Command, string(ended.Status)).Observe((c.JobAge + held).Seconds())
	}
}

// release gives the job up for another agent to resume, waiting for the
// database if it must. Output past the last checkpoint is dropped. The next
// holder reads it again from the remote side. why is the metrics reason
// (metrics.Release*), reason the event's text.
func (e *executor) release(why, reason string) {
	j := e.j
	e.logs.drop(j.key)
	unsure := false // a try failed after it was sent: it may have landed
	err := e.retryWrite("releasing job", func(ctx context.Context) error {
		return mayHaveLanded(e.store.Release(ctx, e.holder, j.claimed.Job.ID, j.claimed.Lease, reason), &unsure)
	})
	if errors.Is(err, store.ErrLeaseLost) && unsure {
		if kind, _, _ := e.priorEnd(""); kind == "released" { // kind is "" when none was found
			e.log.Warn("the release had been stored by an earlier try whose answer was lost")
			err = nil
		}
	}
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		e.recordLeaseLost(metrics.LeaseLostWrite, "it had detached from the job to release it ("+reason+")")
	case err != nil:
		e.log.Warn("releasing resumable job; the janitor will release it after stale_job", "err", err)
	default:
		j.ended.Store(true)
		e.remember(j, nil)
		e.metrics.Releases.WithLabelValues(why).Inc()
		e.log.Info("released resumable job", "reason", reason)
		signal(e.signals.Ended, Ended{JobID: j.claimed.Job.ID, Lease: j.claimed.Lease, Status: "released", Error: reason})
	}
}

// mayHaveLanded sets *unsure when a try of a write failed after it was sent,
// so it may have landed. Only the fence's answer (ErrLeaseLost) says it did
// not. It returns err.
func mayHaveLanded(err error, unsure *bool) error {
	if err != nil && !errors.Is(err, store.ErrLeaseLost) {
		*unsure = true
	}
	return err
}

// priorEnd asks whether this runner's own earlier try of an end or a
// release landed (store.PriorEnd), waiting for the database like a write.
// ok is false when it did not, or when the database could not tell before
// the agent gave up (logged). The lease is then taken as lost.
func (e *executor) priorEnd(cleanupBy string) (kind string, ended store.Ended, ok bool) {
	j := e.j
	err := e.retryWrite("reading whether the end was stored", func(ctx context.Context) error {
		var err error
		kind, ended, ok, err = e.store.PriorEnd(ctx, e.holder, j.claimed.Job.ID, j.claimed.Lease, cleanupBy)
		return err
	})
	if err != nil {
		e.log.Warn("could not tell whether an earlier try of the write landed; taking the lease as lost", "err", err)
		return "", store.Ended{}, false
	}
	return kind, ended, ok
}

// recordLeaseLost notes that this runner was fenced off, with its own account
// of the job, and drops what output it still held. how is the metrics reason.
// It says where the loss was noticed.
func (e *executor) recordLeaseLost(how, account string) {
	j := e.j
	e.logs.drop(j.key)
	if errors.Is(context.Cause(j.ctx), errHistoryLost) {
		// The database lost this lease with its history and may have handed
		// its number to another holder. An event under it would claim that
		// holder's lease. The reconcile recorded why (database_history_lost).
		e.log.Warn("stopped the job without writing: the database lost this agent's lease with its history", "account", account)
		signal(e.signals.Ended, Ended{JobID: j.claimed.Job.ID, Lease: j.claimed.Lease, Status: "history_lost", Error: account})
		return
	}
	e.metrics.LeasesLost.WithLabelValues(how).Inc()
	e.log.Warn("lease lost; stopped the job without writing", "account", account)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), e.finalTimeout)
	defer cancel()
	msg := "agent " + e.holder.Name + " was fenced off (its lease was taken over); " + account
	if err := e.store.RecordEvent(ctx, e.holder, j.claimed.Job.ID, j.claimed.Lease, "lease_lost", msg); err != nil {
		e.log.Warn("recording lease_lost event", "err", err)
	}
	signal(e.signals.Ended, Ended{JobID: j.claimed.Job.ID, Lease: j.claimed.Lease, Status: "lease_lost", Error: account})
}

// describe is an outcome in a few words, for the record.
func describe(o store.Outcome) string {
	if o.Error == "" {
		return string(o.Status)
	}
	return string(o.Status) + ": " + firstLine(o.Error)
}
