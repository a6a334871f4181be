package claim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tetherjobs/tether/internal/jobctx"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// runningJob is one job this agent holds a lease on.
type runningJob struct {
	claimed  store.Claimed
	ctx      context.Context
	cancelFn context.CancelCauseFunc

	resumable bool          // the plugin can reattach: stopping means detaching
	deferred  bool          // its final write waits for the database; keep its output
	done      chan struct{} // closed when its runner has returned

	mu     sync.Mutex
	handle []byte
}

// cancel stops the plugin call. The first cause wins: a lease lost after a
// cancel request still counts as a cancel request, and vice versa.
func (j *runningJob) cancel(cause error) { j.cancelFn(cause) }

// run takes one claimed job to its end under its lease.
func (s *Service) run(j *runningJob) {
	c := j.claimed
	log := s.log.With("job", c.Job.ID, "command", c.Job.Command, "lease", c.Lease)
	j.handle = c.Handle

	cmd, ok := s.cfg.Commands[c.Job.Command]
	if !ok { // claim filters by command, so only a config change mid-flight gets here
		s.finish(j, log, store.Outcome{Status: store.StatusFailed, Error: fmt.Sprintf("command %q is not configured on agent %s", c.Job.Command, s.cfg.Holder.Name), ErrorClass: string(plugin.Retriable)})
		return
	}
	pluginName := c.Job.Plugin
	if pluginName == "" {
		pluginName = cmd.Plugin
	}
	info, loaded := s.plugins.Info(pluginName)

	jobCtx, err := jobctx.Merge(cmd.Context, c.Job.Context)
	if err != nil {
		s.finish(j, log, store.Outcome{Status: store.StatusFailed, Error: err.Error(), ErrorClass: string(plugin.Permanent)})
		return
	}
	pj := &plugin.Job{ID: c.Job.ID, Command: c.Job.Command, Attempt: c.Job.Attempt, Context: jobCtx}
	rt := &runtime{svc: s, job: j, stdout: s.logs.writer(c.Job.ID, stdoutStream), stderr: s.logs.writer(c.Job.ID, stderrStream)}

	var call func(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error)
	switch {
	case !loaded:
		s.finish(j, log, store.Outcome{Status: store.StatusFailed, Error: fmt.Sprintf("plugin %q is not loaded on agent %s", pluginName, s.cfg.Holder.Name), ErrorClass: string(plugin.Retriable)})
		return
	case c.Resume && !info.Has(plugin.CapResume):
		s.finish(j, log, store.Outcome{Status: store.StatusFailed, Error: "awol: job is stale, marking failed", ErrorClass: string(plugin.Retriable)})
		return
	case c.Resume:
		if err := s.store.RecordEvent(j.ctx, s.cfg.Holder, c.Job.ID, c.Lease, "resumed", "resumed by "+s.cfg.Holder.Name); err != nil {
			log.Warn("recording resumed event", "err", err)
		}
		call = s.plugins.Resume
	default:
		status, err := s.store.MarkRunning(j.ctx, s.cfg.Holder, c.Job.ID, c.Lease, "attempt "+fmt.Sprint(c.Job.Attempt)+" on "+s.cfg.Holder.Name)
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			s.recordLeaseLost(j, log)
			return
		case err != nil && context.Cause(j.ctx) != nil:
			s.afterCancel(j, log, pluginName, info, pj)
			return
		case err != nil:
			log.Error("marking job running", "err", err)
			s.finish(j, log, store.Outcome{Status: store.StatusFailed, Error: "marking job running: " + err.Error(), ErrorClass: string(plugin.Retriable)})
			return
		case status == store.StatusCanceling:
			// Canceled before the plugin was called: nothing ran, nothing to clean.
			s.finish(j, log, store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"})
			return
		}
		call = s.plugins.Execute
	}

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

	log.Debug("calling plugin", "plugin", pluginName, "resume", c.Resume)
	res, err := call(j.ctx, pluginName, pj, rt)

	// Work that finished counts, even if a cancel raced with its end; the
	// fenced write still refuses it if the lease was lost.
	if err != nil && context.Cause(j.ctx) != nil {
		s.afterCancel(j, log, pluginName, info, pj)
		return
	}
	if err != nil {
		o := store.Outcome{Status: store.StatusFailed, Error: err.Error(), ErrorClass: string(plugin.ClassOf(err))}
		if c.Resume && info.Has(plugin.CapCleanup) {
			// Nothing else will stop remote work a failed Resume left behind.
			s.finishThenClean(j, log, o, pluginName, pj)
			return
		}
		s.finish(j, log, o)
		return
	}
	out := store.Outcome{Status: store.StatusSucceeded}
	if res != nil {
		out.Result, out.Message = res.Output, res.Message
	}
	s.finish(j, log, out)
}

// afterCancel records the end of a job whose context was cancelled, by cause.
func (s *Service) afterCancel(j *runningJob, log *slog.Logger, pluginName string, info plugin.Info, pj *plugin.Job) {
	cause := context.Cause(j.ctx)
	switch {
	case errors.Is(cause, errLeaseLost), errors.Is(cause, errSuperseded):
		// Someone else owns the job now: never write, never clean up.
		s.recordLeaseLost(j, log)
	case errors.Is(cause, errActiveTimeout):
		// The plugin call was stopped; it fails retriably (and is retried
		// if the job has retries left) once Cleanup has stopped what the
		// attempt left behind.
		o := store.Outcome{Status: store.StatusFailed, ErrorClass: string(plugin.Retriable),
			Error: "active_timeout of " + limits.Format(j.claimed.ActiveTimeout) + " exceeded"}
		log.Info("active_timeout exceeded; stopped the plugin call", "active_timeout", j.claimed.ActiveTimeout)
		if info.Has(plugin.CapCleanup) {
			s.finishThenClean(j, log, o, pluginName, pj)
		} else {
			s.finish(j, log, o)
		}
	case errors.Is(cause, errCancelRequested):
		o := store.Outcome{Status: store.StatusCanceled, Error: "canceled by request"}
		if info.Has(plugin.CapCleanup) {
			s.finishThenClean(j, log, o, pluginName, pj)
		} else {
			s.finish(j, log, o)
		}
	case errors.Is(cause, errHandoff), errors.Is(cause, errDetached):
		// Stop watching; the remote work goes on. HandOff releases the lease
		// (or, detached, the janitor does). Keep the output written so far.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.FinalTimeout)
		defer cancel()
		s.logs.flushNow(ctx)
		log.Info("stopped watching resumable job", "why", cause)
	case errors.Is(cause, errSelfFenced):
		// The database is unreachable: write what happened when it returns.
		if info.Has(plugin.CapResume) {
			log.Warn("self-fenced: detached from resumable job; will release it when the database returns")
			j.deferred = true
			s.deferWrite(deferredWrite{claimed: j.claimed, release: true, reason: "self-fenced: agent could not renew its leases"})
			return
		}
		log.Warn("self-fenced: stopped the job; will record it failed when the database returns")
		j.deferred = true
		o := store.Outcome{Status: store.StatusFailed, ErrorClass: string(plugin.Retriable),
			Error: "agent " + s.cfg.Holder.Name + " lost its database connection and stopped the job before its lease could expire"}
		if info.Has(plugin.CapCleanup) {
			o = s.cleanupFirst(o)
		}
		s.deferWrite(deferredWrite{claimed: j.claimed, plugin: pluginName, cleanup: info.Has(plugin.CapCleanup), job: pj, outcome: o})
	case errors.Is(cause, errShutdown):
		if info.Has(plugin.CapResume) {
			// The remote work goes on; hand it to another agent at once.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.FinalTimeout)
			defer cancel()
			err := s.store.Release(ctx, s.cfg.Holder, j.claimed.Job.ID, j.claimed.Lease, "handoff: agent "+s.cfg.Holder.Name+" shutting down")
			switch {
			case errors.Is(err, store.ErrLeaseLost):
				s.recordLeaseLost(j, log)
			case err != nil:
				log.Warn("handing off resumable job; the janitor will release it after stale_job", "err", err)
			default:
				log.Info("handed off resumable job at shutdown")
			}
			return
		}
		o := store.Outcome{Status: store.StatusFailed, Error: errShutdown.Error(), ErrorClass: string(plugin.Retriable)}
		if info.Has(plugin.CapCleanup) {
			s.finishThenClean(j, log, o, pluginName, pj)
		} else {
			s.finish(j, log, o)
		}
	default:
		log.Error("job context ended for an unknown reason", "cause", cause)
	}
}

// finish flushes the job's output, then writes its final state, fenced, on its
// own timeout (the job's context may have ended). It reports whether the write
// landed.
func (s *Service) finish(j *runningJob, log *slog.Logger, o store.Outcome) bool {
	_, ok := s.finishWith(j, log, o, deferredWrite{claimed: j.claimed, outcome: o})
	return ok
}

// finishThenClean writes the job's final state and runs the plugin's Cleanup
// only once that state is committed: results and remote state are never
// deleted before the outcome is durable. When the write has to wait for the
// database, the Cleanup waits with it.
//
// A retry of the job waits for that Cleanup (the write queues a fallback
// Cleanup and holds the next attempt until one of them is done), so the next
// attempt never runs beside what this one left behind.
func (s *Service) finishThenClean(j *runningJob, log *slog.Logger, o store.Outcome, pluginName string, pj *plugin.Job) {
	o = s.cleanupFirst(o)
	if f, ok := s.finishWith(j, log, o, deferredWrite{claimed: j.claimed, outcome: o, plugin: pluginName, cleanup: true, job: pj}); ok {
		if s.cleanup(j, log, pluginName, pj) && f.Retried {
			s.releaseRetry(j.ctx, log, pj.ID)
		}
	}
}

// cleanupFirst marks an outcome whose Cleanup the agent runs after the
// write: a retry waits for it, with a queued fallback due once this agent's
// own Cleanup call would have ended.
func (s *Service) cleanupFirst(o store.Outcome) store.Outcome {
	o.CleanupFirst = true
	o.CleanupHold = s.cfg.CleanupTimeout + s.cfg.FinalTimeout
	return o
}

// releaseRetry lets a retry that waited for this agent's Cleanup run.
func (s *Service) releaseRetry(jctx context.Context, log *slog.Logger, jobID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(jctx), s.cfg.FinalTimeout)
	defer cancel()
	if err := s.store.CleanupFinished(ctx, jobID); err != nil {
		log.Warn("releasing the retry after Cleanup; the queued Cleanup will release it", "err", err)
	}
}

func (s *Service) finishWith(j *runningJob, log *slog.Logger, o store.Outcome, later deferredWrite) (store.Finished, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.FinalTimeout)
	defer cancel()
	s.logs.flushNow(ctx)
	o.Jitter = rand.Float64()
	f, err := s.store.FinishAttempt(ctx, s.cfg.Holder, j.claimed.Job.ID, j.claimed.Lease, o)
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		s.recordLeaseLost(j, log)
		return f, false
	case err != nil:
		// Most likely the database is away: keep the outcome (and the
		// output) and write them when a heartbeat gets through again.
		log.Warn("writing final status; will retry when the database answers", "status", o.Status, "err", err)
		j.deferred = true
		s.deferWrite(later)
		return f, false
	}
	if f.Retried {
		s.cfg.Metrics.JobsFinished.WithLabelValues("retried").Inc()
		log.Info("attempt failed; retry scheduled", "error", o.Error, "next_attempt", f.Attempt, "run_after", f.RunAfter)
		return f, true
	}
	s.cfg.Metrics.JobsFinished.WithLabelValues(o.Status).Inc()
	log.Info("job finished", "status", o.Status, "error", o.Error)
	return f, true
}

// cleanup runs the plugin's Cleanup after the terminal status is committed, so
// results are durable before anything is deleted. It reports whether the
// Cleanup succeeded.
func (s *Service) cleanup(j *runningJob, log *slog.Logger, pluginName string, pj *plugin.Job) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.CleanupTimeout)
	defer cancel()
	kind, msg := "cleanup_ok", ""
	if err := s.plugins.Cleanup(ctx, pluginName, pj); err != nil {
		kind, msg = "cleanup_failed", err.Error()
		s.cfg.Metrics.CleanupFailures.Inc()
		log.Warn("cleanup failed; queued for retry", "err", err)
		if s.cfg.EnqueueCleanup != nil {
			if qerr := s.cfg.EnqueueCleanup(ctx, pj.ID, "cleanup after the job ended failed: "+err.Error()); qerr != nil {
				log.Error("queueing cleanup for retry", "err", qerr)
			}
		}
	}
	if err := s.store.RecordEvent(ctx, s.cfg.Holder, pj.ID, j.claimed.Lease, kind, msg); err != nil {
		log.Warn("recording cleanup event", "err", err)
	}
	return kind == "cleanup_ok"
}

func (s *Service) recordLeaseLost(j *runningJob, log *slog.Logger) {
	s.cfg.Metrics.LeasesLost.Inc()
	log.Warn("lease lost; stopped the job without writing")
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.cfg.FinalTimeout)
	defer cancel()
	if err := s.store.RecordEvent(ctx, s.cfg.Holder, j.claimed.Job.ID, j.claimed.Lease, "lease_lost", "agent "+s.cfg.Holder.Name+" stopped the job: its lease was taken over"); err != nil {
		log.Warn("recording lease_lost event", "err", err)
	}
}

// runtime is the host side of plugin.Runtime for one job.
type runtime struct {
	svc            *Service
	job            *runningJob
	stdout, stderr *jobWriter
}

func (r *runtime) Stdout() io.Writer { return r.stdout }
func (r *runtime) Stderr() io.Writer { return r.stderr }

// Checkpoint stores the handle, fenced by the job's lease; a lost lease stops
// the job.
func (r *runtime) Checkpoint(ctx context.Context, handle []byte) error {
	c := r.job.claimed
	// A handle may point past output (a log position): store that output
	// first, or an agent killed in between would resume past lines nobody
	// stored.
	if err := r.svc.logs.flushNow(ctx); err != nil {
		return plugin.Errorf(plugin.Retriable, "checkpoint of job %s: storing its output first: %v", c.Job.ID, err)
	}
	err := r.svc.store.Checkpoint(ctx, c.Job.ID, c.Lease, handle)
	if errors.Is(err, store.ErrLeaseLost) {
		r.job.cancel(errLeaseLost)
		return plugin.Errorf(plugin.Retriable, "checkpoint of job %s rejected: lease %d lost", c.Job.ID, c.Lease)
	}
	if err != nil {
		return err
	}
	r.job.mu.Lock()
	r.job.handle = append([]byte(nil), handle...)
	r.job.mu.Unlock()
	return nil
}

func (r *runtime) Handle() []byte {
	r.job.mu.Lock()
	defer r.job.mu.Unlock()
	return append([]byte(nil), r.job.handle...)
}
