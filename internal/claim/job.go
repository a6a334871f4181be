package claim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherjobs/tether/internal/cleanups"
	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/jobctx"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// runningJob is one job this agent holds under one lease.
type runningJob struct {
	key       jobKey
	claimed   store.Claimed
	claimedAt time.Time // local clock, for the durations in the metrics
	ctx       context.Context
	cancelFn  context.CancelCauseFunc

	resumable  bool          // the plugin can reattach: stopping means detaching
	hasCleanup bool          // the plugin declares Cleanup
	done       chan struct{} // closed when its runner has returned
	// ended is set once the attempt's end is stored: the lease is gone, so
	// the heartbeat stops renewing it (a Cleanup may still be running).
	ended atomic.Bool
	// ending: the job's slot is free, its final write queued (Service.mu).
	ending bool

	// called is set once its plugin is called (or a resume claimed it):
	// what the database was told, for the reconcile.
	called atomic.Bool

	mu     sync.Mutex
	handle []byte // the last checkpoint the database acknowledged
}

// cancel stops the plugin call. The first cause wins: a lease lost after a
// cancel request still counts as a cancel request, and vice versa.
func (j *runningJob) cancel(cause error) { j.cancelFn(cause) }

// attempt is what the runner knows about the attempt while ending it.
type attempt struct {
	j      *runningJob
	log    *slog.Logger
	plugin string
	job    *plugin.Job
	called bool // Execute or Resume was called: remote work may exist
	// fenced is set when the plugin's SDK stopped the call at its lease
	// deadline (a pluginFencedError): its account of a self-fence.
	fenced error
}

// run takes one claimed job to its end under its lease.
func (s *Service) run(j *runningJob) {
	c := j.claimed
	log := s.log.With("job", c.Job.ID, "command", c.Job.Command, "lease", c.Lease)
	j.handle = c.Handle
	// A job claimed to be resumed has remote work already.
	a := &attempt{j: j, log: log, plugin: c.Job.Plugin, called: c.Resume}
	j.called.Store(c.Resume)

	cmd, ok := s.cfg.Commands[c.Job.Command]
	if !ok { // claim filters by command, so only a config change mid-flight gets here
		s.end(a, store.Outcome{Status: store.StatusFailed, Error: fmt.Sprintf("command %q is not configured on agent %s", c.Job.Command, s.cfg.Holder.Name), ErrorClass: plugin.Retriable})
		return
	}
	if a.plugin == "" {
		a.plugin = cmd.Plugin
	}
	info, loaded := s.plugins.Info(a.plugin)
	if !loaded && c.Resume {
		j.hasCleanup = true // unknown here: let the queue's workers find out
	}
	jobCtx, err := jobctx.Merge(cmd.Context, c.Job.Context)
	if err != nil {
		s.end(a, store.Outcome{Status: store.StatusFailed, Error: err.Error(), ErrorClass: plugin.Permanent})
		return
	}
	a.job = &plugin.Job{ID: c.Job.ID, Command: c.Job.Command, Attempt: c.Job.Attempt, Context: jobCtx}
	rt := &runtime{svc: s, job: j, stdout: s.logs.writer(j.key, stdoutStream), stderr: s.logs.writer(j.key, stderrStream)}

	call := s.plugins.Execute
	switch {
	case !loaded:
		s.end(a, store.Outcome{Status: store.StatusFailed, Error: fmt.Sprintf("plugin %q is not loaded on agent %s", a.plugin, s.cfg.Holder.Name), ErrorClass: plugin.Retriable})
		return
	case c.Resume && !info.Has(plugin.CapResume):
		// The claim takes such a job only where the plugin can Resume; a
		// plugin replaced since is the only way here. Fail it truthfully,
		// with Cleanup, and never Execute it beside its remote work.
		s.end(a, store.Outcome{Status: store.StatusFailed, ErrorClass: plugin.Retriable,
			Error: fmt.Sprintf("cannot resume: plugin %q on agent %s lacks the resume capability", a.plugin, s.cfg.Holder.Name)})
		return
	case c.Resume:
		if err := s.store.RecordEvent(j.ctx, s.cfg.Holder, c.Job.ID, c.Lease, "resumed", "resumed by "+s.cfg.Holder.Name); err != nil {
			log.Warn("recording resumed event", "err", err)
		}
		call = s.plugins.Resume
	default:
		var status jobstate.JobStatus
		err := s.retryWrite(j, log, "marking job running", func(ctx context.Context) error {
			r, err := s.running.do(ctx, store.Running{JobID: c.Job.ID, Lease: c.Lease, Generation: s.cfg.Holder.Generation,
				Message: "attempt " + fmt.Sprint(c.Job.Attempt) + " on " + s.cfg.Holder.Name})
			if err == nil {
				status, err = r.status, r.err
			}
			return err
		})
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			s.recordLeaseLost(j, log, metrics.LeaseLostWrite, "before its plugin was called")
			return
		case err != nil && context.Cause(j.ctx) != nil:
			s.afterCancel(a)
			return
		case err != nil:
			log.Error("marking job running; the janitor will requeue it", "err", err)
			return
		case status == store.StatusCanceling:
			// Canceled before the plugin was called: nothing ran, nothing to clean.
			s.end(a, store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"})
			return
		}
		if cause := context.Cause(j.ctx); cause != nil {
			// Stopped (self-fence, shutdown, …) while the write waited:
			// never call the plugin with a dead context. Nothing ran.
			s.beforeCall(a, cause)
			return
		}
	}
	a.called = true
	j.called.Store(true)

	if c.ActiveTimeout > 0 {
		// Per attempt, from when the plugin was first called for it: a
		// resumed attempt has only what is left.
		left := c.ActiveTimeout
		if c.Resume {
			left -= c.AttemptAge
		}
		t := time.AfterFunc(max(left, 0), func() { j.cancel(errActiveTimeout) })
		defer t.Stop()
	}

	log.Debug("calling plugin", "plugin", a.plugin, "resume", c.Resume)
	res, err := call(j.ctx, a.plugin, a.job, rt)
	for try := 1; err != nil && j.resumable && plugin.IsBroken(err) && context.Cause(j.ctx) == nil && try <= reattachTries; try++ {
		// The plugin process crashed or the call broke: the remote work is
		// most likely still going. Resume the same attempt from its last
		// handle (the host restarts the plugin) rather than fail it and run
		// the work again beside itself.
		wait := time.Duration(1<<(try-1)) * 500 * time.Millisecond
		log.Warn("plugin call broke; resuming the same attempt", "err", err, "try", try, "in", wait)
		if !sleepCtx(j.ctx, wait) {
			break
		}
		// Output the broken call wrote after its last checkpoint is held,
		// not stored; the resumed call copies it again from that handle.
		s.logs.drop(j.key)
		msg := fmt.Sprintf("resumed by %s in the same attempt after the plugin call broke (%s)", s.cfg.Holder.Name, firstLine(err.Error()))
		if err := s.store.RecordEvent(j.ctx, s.cfg.Holder, c.Job.ID, c.Lease, "resumed", msg); err != nil {
			log.Warn("recording resumed event", "err", err)
		}
		res, err = s.plugins.Resume(j.ctx, a.plugin, a.job, rt)
	}

	if cause := pluginFenced(err); cause != nil {
		// The plugin's SDK stopped the call: a self-fence, whatever the
		// plugin returned (first cause wins, as for the agent's own fence).
		a.fenced = cause
		j.cancel(cause)
	}
	// Work that finished counts, even if a cancel raced with its end; the
	// fenced write still refuses it if the lease was lost.
	if err != nil && context.Cause(j.ctx) != nil {
		s.afterCancel(a)
		return
	}
	if err != nil {
		s.end(a, store.Outcome{Status: store.StatusFailed, Error: err.Error(), ErrorClass: plugin.ClassOf(err)})
		return
	}
	out := store.Outcome{Status: store.StatusSucceeded}
	if res != nil {
		out.Result, out.Message = res.Output, res.Message
	}
	s.end(a, out)
}

// afterCancel ends an attempt whose context was cancelled, by cause.
func (s *Service) afterCancel(a *attempt) {
	j, log := a.j, a.log
	cause := context.Cause(j.ctx)
	if s.historyAfterCancel(a, cause) {
		return
	}
	switch {
	case errors.Is(cause, errLeaseLost), errors.Is(cause, errSuperseded):
		// Someone else owns the job now: never write, never clean up.
		s.recordLeaseLost(j, log, metrics.LeaseLostHeartbeat, "while its plugin call ran")
	case errors.Is(cause, errActiveTimeout):
		// The plugin call was stopped; it fails retriably (and is retried
		// if the job has retries left) once Cleanup has stopped what the
		// attempt left behind.
		log.Info("active_timeout exceeded; stopped the plugin call", "active_timeout", j.claimed.ActiveTimeout)
		s.end(a, store.Outcome{Status: store.StatusFailed, ErrorClass: plugin.Retriable,
			Error: "active_timeout of " + limits.Format(j.claimed.ActiveTimeout) + " exceeded"})
	case errors.Is(cause, errCancelRequested):
		s.end(a, store.Outcome{Status: store.StatusCanceled, Error: "canceled by request"})
	case errors.Is(cause, errHandoff), errors.Is(cause, errDetached):
		// Stop watching; the remote work goes on. HandOff releases the lease
		// (or, detached, the janitor does). Output past the last checkpoint
		// is the next holder's to produce.
		s.logs.drop(j.key)
		log.Info("stopped watching resumable job", "why", cause)
	case errors.Is(cause, errSelfFenced) && j.resumable:
		log.Warn("self-fenced: detached from resumable job; releasing it when the database returns", "why", cause)
		s.release(a, metrics.ReleaseSelfFenced, s.selfFencedReason(a.fenceCause(cause)))
	case errors.Is(cause, errSelfFenced):
		log.Warn("self-fenced: stopped the job; recording it failed when the database returns", "why", cause)
		s.end(a, store.Outcome{Status: store.StatusFailed, ErrorClass: plugin.Retriable, Error: s.selfFencedError(a.fenceCause(cause))})
	case errors.Is(cause, errShutdown) && j.resumable:
		// The remote work goes on; hand it to another agent at once.
		s.release(a, metrics.ReleaseHandoff, "handoff: agent "+s.cfg.Holder.Name+" shutting down")
	case errors.Is(cause, errShutdown):
		s.end(a, store.Outcome{Status: store.StatusFailed, Error: errShutdown.Error(), ErrorClass: plugin.Retriable})
	default:
		log.Error("job context ended for an unknown reason", "cause", cause)
	}
}

// beforeCall ends an attempt stopped after it was marked running but before
// its plugin was called.
func (s *Service) beforeCall(a *attempt, cause error) {
	switch {
	case errors.Is(cause, errLeaseLost), errors.Is(cause, errSuperseded):
		s.recordLeaseLost(a.j, a.log, metrics.LeaseLostHeartbeat, "before its plugin was called")
	case errors.Is(cause, errCancelRequested):
		s.end(a, store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"})
	default:
		s.end(a, store.Outcome{Status: store.StatusFailed, ErrorClass: plugin.Retriable,
			Error: "stopped before its plugin was called: " + cause.Error()})
	}
}

// end stores how the attempt ended, through the one transition, and then
// runs the Cleanup the plan calls for. Retries, Cleanup and the cancel rule
// are decided by internal/lifecycle (and, for a cancel racing the write, by
// the statement). The write waits for the database if it must: the runner
// stays registered meanwhile, so its lease is renewed and still fences it.
func (s *Service) end(a *attempt, o store.Outcome) {
	j, c := a.j, a.j.claimed
	o = sanitize(o)
	in := lifecycle.Input{Status: o.Status, ErrorClass: o.ErrorClass, Attempt: c.Job.Attempt, Levers: c.Job.Limits,
		PluginCalled: a.called, HasCleanup: j.hasCleanup, Jitter: rand.Float64()}
	e := store.End{JobID: c.Job.ID, Lease: c.Lease, HolderGeneration: s.cfg.Holder.Generation, Actor: s.cfg.Holder, Outcome: o, Plan: lifecycle.Decide(in),
		CleanupBy: s.cfg.Holder.Name, CleanupHold: s.cfg.CleanupTimeout + s.cfg.FinalTimeout}
	var ended store.Ended
	refused := false
	unsure := false // a try of the end failed after it was sent: it may have landed
	for {
		err := s.retryWrite(j, a.log, "writing final status", func(ctx context.Context) error {
			if err := s.logs.flush(ctx, &j.key); err != nil { // output before the end
				return err
			}
			var err error
			if !store.FinalBatchable(e) {
				ended, err = s.store.EndAttempt(ctx, e)
			} else {
				// The plugin call is over: the next claim may have the slot
				// while this end waits for its batch. (An end the database
				// refuses is stored again below, Cleanup included, still
				// without its slot: the 2 × capacity bound on held leases
				// still holds.)
				s.freeSlot(j)
				var r endResult
				r, err = s.finals.do(ctx, e) // the hot path: shares a statement
				if err == nil {
					ended, err = r.ended, r.err
				}
			}
			if err != nil && !errors.Is(err, store.ErrLeaseLost) {
				unsure = true
			}
			return err
		})
		if errors.Is(err, store.ErrLeaseLost) && unsure {
			// Sent again after an answer was lost: the fence is gone because
			// the earlier try landed, or because the lease really was lost.
			if _, prior, ok := s.priorEnd(j, a.log, e.CleanupBy); ok {
				a.log.Warn("the job's end had been stored by an earlier try whose answer was lost", "status", prior.Status)
				ended, err = prior, nil
			}
		}
		var de *store.DataError
		switch {
		case errors.As(err, &de) && !refused:
			// Not storable as it is: store a truthful permanent failure
			// instead of retrying something that can never land.
			refused = true
			a.log.Error("the database refused the job's outcome; recording a permanent failure instead", "status", o.Status, "err", err)
			in.Status, in.ErrorClass = store.StatusFailed, plugin.Permanent
			e.Outcome = sanitize(store.Outcome{Status: store.StatusFailed, ErrorClass: plugin.Permanent,
				Error: fmt.Sprintf("tether could not store the job's outcome (%s: %s): %v", o.Status, firstLine(o.Error), de.Err)})
			e.Plan = lifecycle.Decide(in)
			continue
		case errors.Is(err, store.ErrLeaseLost):
			s.recordLeaseLost(j, a.log, metrics.LeaseLostWrite, "its outcome was: "+describe(o))
			return
		case err != nil:
			a.log.Error("could not record the job's end; the janitor settles it after stale_job", "status", o.Status, "err", err)
			signal(s.cfg.TestSignals.Ended, Ended{JobID: c.Job.ID, Lease: c.Lease, Status: "unrecorded", Error: err.Error()})
			return
		}
		break
	}
	j.ended.Store(true)
	s.rememberEnd(j, &e)
	s.observeEnd(j, ended)
	if ended.Retried {
		s.cfg.Metrics.JobsFinished.WithLabelValues("retried").Inc()
		a.log.Info("attempt failed; retry scheduled", "error", o.Error, "next_attempt", ended.Attempt, "run_after", ended.RunAfter, "after_cleanup", e.Plan.Cleanup)
	} else {
		s.cfg.Metrics.JobsFinished.WithLabelValues(string(ended.Status)).Inc()
		a.log.Info("job finished", "status", ended.Status, "error", e.Outcome.Error)
	}
	if ended.Cleanup.Held() {
		s.cleanup(a, ended.Cleanup)
	}
	signal(s.cfg.TestSignals.Ended, Ended{JobID: c.Job.ID, Lease: c.Lease, Status: string(ended.Status), Error: e.Outcome.Error})
}

// observeEnd records the durations of an attempt whose end is stored:
// the database's ages at claim plus the time held since.
func (s *Service) observeEnd(j *runningJob, ended store.Ended) {
	c, held := j.claimed, time.Since(j.claimedAt)
	outcome := ended.Status
	if ended.Retried {
		outcome = "retried"
	}
	s.cfg.Metrics.AttemptDuration.WithLabelValues(c.Job.Command, string(outcome)).Observe((c.AttemptAge + held).Seconds())
	if store.Terminal(ended.Status) {
		s.cfg.Metrics.JobDuration.WithLabelValues(c.Job.Command, string(ended.Status)).Observe((c.JobAge + held).Seconds())
	}
}

// release gives the job up for another agent to resume, waiting for the
// database if it must. Output past the last checkpoint is dropped: the next
// holder reads it again from the remote side. why is the metrics reason
// (metrics.Release*), reason the event's text.
func (s *Service) release(a *attempt, why, reason string) {
	j := a.j
	s.logs.drop(j.key)
	unsure := false // a try failed after it was sent: it may have landed
	err := s.retryWrite(j, a.log, "releasing job", func(ctx context.Context) error {
		err := s.store.Release(ctx, s.cfg.Holder, j.claimed.Job.ID, j.claimed.Lease, reason)
		if err != nil && !errors.Is(err, store.ErrLeaseLost) {
			unsure = true
		}
		return err
	})
	if errors.Is(err, store.ErrLeaseLost) && unsure {
		if kind, _, ok := s.priorEnd(j, a.log, ""); ok && kind == "released" {
			a.log.Warn("the release had been stored by an earlier try whose answer was lost")
			err = nil
		}
	}
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		s.recordLeaseLost(j, a.log, metrics.LeaseLostWrite, "it had detached from the job to release it ("+reason+")")
	case err != nil:
		a.log.Warn("releasing resumable job; the janitor will release it after stale_job", "err", err)
	default:
		j.ended.Store(true)
		s.rememberEnd(j, nil)
		s.cfg.Metrics.Releases.WithLabelValues(why).Inc()
		a.log.Info("released resumable job", "reason", reason)
		signal(s.cfg.TestSignals.Ended, Ended{JobID: j.claimed.Job.ID, Lease: j.claimed.Lease, Status: "released", Error: reason})
	}
}

// priorEnd asks whether this runner's own earlier try of an end or a
// release landed (store.PriorEnd), waiting for the database like a write.
// ok is false when it did not, or when the database could not tell before
// the agent gave up (logged): the lease is then taken as lost.
func (s *Service) priorEnd(j *runningJob, log *slog.Logger, cleanupBy string) (kind string, ended store.Ended, ok bool) {
	err := s.retryWrite(j, log, "reading whether the end was stored", func(ctx context.Context) error {
		var err error
		kind, ended, ok, err = s.store.PriorEnd(ctx, s.cfg.Holder, j.claimed.Job.ID, j.claimed.Lease, cleanupBy)
		return err
	})
	if err != nil {
		log.Warn("could not tell whether an earlier try of the write landed; taking the lease as lost", "err", err)
		return "", store.Ended{}, false
	}
	return kind, ended, ok
}

// retryWrite runs one of the runner's fenced writes until it lands, is
// refused, or the agent has been shutting down for FinalTimeout.
func (s *Service) retryWrite(j *runningJob, log *slog.Logger, what string, write func(context.Context) error) error {
	return s.untilWritten(s.writesCtx, log, what, write)
}

// untilWritten runs write, each try bounded by FinalTimeout, while the
// database cannot be reached: it tries again at the next successful
// heartbeat or after a short backoff, until the write lands, its fence
// refuses it (ErrLeaseLost), the database refuses its data (*DataError), or
// stop ends. The one way the host waits out an outage, for final writes,
// releases and checkpoints alike.
func (s *Service) untilWritten(stop context.Context, log *slog.Logger, what string, write func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		// After the database's history changed, nothing is written before
		// the reconcile has compared what it holds (bounded: the fences
		// still hold if it takes longer).
		if err := s.cfg.History.Wait(stop, dbhistory.SettleBound); err != nil && !errors.Is(err, dbhistory.ErrNotSettled) {
			return fmt.Errorf("%s: gave up (%v)", what, context.Cause(stop))
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stop), s.cfg.FinalTimeout)
		err := write(ctx)
		cancel()
		var de *store.DataError
		if err == nil || errors.Is(err, store.ErrLeaseLost) || errors.As(err, &de) {
			return err
		}
		if try == 1 {
			log.Warn(what+"; will retry when the database answers", "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.dbBack():
		case <-t.C:
		case <-stop.Done():
			t.Stop()
			return fmt.Errorf("%s: gave up (%v): %w", what, context.Cause(stop), err)
		}
		t.Stop()
		wait = min(wait*2, writeRetryMax)
	}
}

// cleanup runs the plugin's Cleanup for an attempt whose end is stored,
// under the claim the transition gave this agent, and records the result
// in the queue: done (a retry waiting for it may run), or failed (due again
// for the queue's workers). If this agent dies first, the claim lapses and
// a janitor runs it.
func (s *Service) cleanup(a *attempt, claim store.CleanupClaim) {
	j := a.j
	timeout := s.cfg.CleanupTimeout
	select {
	case <-s.quit:
		// Shutting down: do not hold the exit for long; what does not
		// finish goes back to the queue for another agent.
		timeout = min(timeout, s.cfg.FinalTimeout)
	default:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), timeout)
	job := *a.job
	j.mu.Lock()
	job.Handle = append([]byte(nil), j.handle...)
	j.mu.Unlock()
	err := s.plugins.Cleanup(ctx, a.plugin, &job)
	cancel()
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.FinalTimeout)
	defer wcancel()
	pool, id, gen := s.store.Pool(), j.claimed.Job.ID, s.cfg.Holder.Generation
	if err != nil {
		s.cfg.Metrics.CleanupFailures.Inc()
		a.log.Warn("cleanup failed; queued for retry", "err", err)
		if err := cleanups.Failed(wctx, pool, id, claim, gen, s.cfg.CleanupRetryIn, err); err != nil {
			a.log.Warn("recording failed cleanup; the claim lapses and the queue retries it", "err", err)
		}
		return
	}
	if err := cleanups.Done(wctx, pool, id, claim, gen, "cleanup_ok", "by agent "+s.cfg.Holder.Name); err != nil {
		a.log.Warn("recording cleanup; the claim lapses and the queue runs it again", "err", err)
	}
}

// recordLeaseLost notes that this runner was fenced off, with its own
// account of the job, and drops what output it still held. how is the
// metrics reason: where the loss was noticed.
func (s *Service) recordLeaseLost(j *runningJob, log *slog.Logger, how, account string) {
	s.logs.drop(j.key)
	if errors.Is(context.Cause(j.ctx), errHistoryLost) {
		// The database lost this lease with its history and may have handed
		// its number to another holder: an event under it would claim that
		// holder's lease. The reconcile recorded why (database_history_lost).
		log.Warn("stopped the job without writing: the database lost this agent's lease with its history", "account", account)
		signal(s.cfg.TestSignals.Ended, Ended{JobID: j.claimed.Job.ID, Lease: j.claimed.Lease, Status: "history_lost", Error: account})
		return
	}
	s.cfg.Metrics.LeasesLost.WithLabelValues(how).Inc()
	log.Warn("lease lost; stopped the job without writing", "account", account)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.FinalTimeout)
	defer cancel()
	msg := "agent " + s.cfg.Holder.Name + " was fenced off (its lease was taken over); " + account
	if err := s.store.RecordEvent(ctx, s.cfg.Holder, j.claimed.Job.ID, j.claimed.Lease, "lease_lost", msg); err != nil {
		log.Warn("recording lease_lost event", "err", err)
	}
	signal(s.cfg.TestSignals.Ended, Ended{JobID: j.claimed.Job.ID, Lease: j.claimed.Lease, Status: "lease_lost", Error: account})
}

// describe is an outcome in a few words, for the record.
func describe(o store.Outcome) string {
	if o.Error == "" {
		return string(o.Status)
	}
	return string(o.Status) + ": " + firstLine(o.Error)
}

// runtime is the host side of plugin.Runtime for one runner. It records
// the plugin's descriptions of its handles too (plugin.DescribedCheckpointer).
type runtime struct {
	svc            *Service
	job            *runningJob
	stdout, stderr *jobWriter
}

func (r *runtime) Stdout() io.Writer { return r.stdout }
func (r *runtime) Stderr() io.Writer { return r.stderr }

// Checkpoint stores the handle with the output written since the last one,
// fenced by the job's lease. While the database cannot be reached it waits
// and tries again, until the job's context ends (the self-fence ends it):
// a database outage is the host's business, never a job error.
func (r *runtime) Checkpoint(ctx context.Context, handle []byte) error {
	return r.checkpoint(ctx, handle, nil)
}

// CheckpointDescribed is Checkpoint, also recording under the same fence
// the resources the plugin said handle points at (a remote event of the
// job, when they changed).
func (r *runtime) CheckpointDescribed(ctx context.Context, handle []byte, resources []plugin.Resource) error {
	c := r.job.claimed
	d := &store.Described{Holder: r.svc.cfg.Holder, Attempt: c.Job.Attempt, Resources: cleanResources(resources)}
	return r.checkpoint(ctx, handle, d)
}

func (r *runtime) checkpoint(ctx context.Context, handle []byte, described *store.Described) error {
	c := r.job.claimed
	stop, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(r.job.ctx, func() { cancel(context.Cause(r.job.ctx)) })()
	log := r.svc.log.With("job", c.Job.ID, "lease", c.Lease)
	err := r.svc.untilWritten(stop, log, "checkpoint", func(wctx context.Context) error {
		return r.svc.logs.checkpoint(wctx, r.job.key, handle, described)
	})
	switch {
	case err == nil:
		r.job.mu.Lock()
		r.job.handle = append([]byte(nil), handle...)
		r.job.mu.Unlock()
		return nil
	case errors.Is(err, store.ErrLeaseLost):
		r.job.cancel(errLeaseLost)
		return plugin.Errorf(plugin.Retriable, "checkpoint of job %s rejected: lease %d lost", c.Job.ID, c.Lease)
	}
	return plugin.Errorf(plugin.Retriable, "checkpoint of job %s: %v", c.Job.ID, err)
}

func (r *runtime) Handle() []byte {
	r.job.mu.Lock()
	defer r.job.mu.Unlock()
	return append([]byte(nil), r.job.handle...)
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
