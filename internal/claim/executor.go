package claim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/jobctx"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// The producer (Service) claims jobs and hands each (job, lease) to an
// executor, which owns it from its start to its final write. The executor
// calls the plugin and decides what a stopped attempt comes to (stop.go).
// It stores the end (final.go) and any Cleanup's result (cleanup.go).

// executorStore is what an executor writes through, beside the batches.
// *store.Store has it.
type executorStore interface {
	RecordEvent(ctx context.Context, h store.Holder, jobID string, lease int64, kind, message string) error
	EndAttempt(ctx context.Context, e store.End) (store.Ended, error)
	Release(ctx context.Context, h store.Holder, jobID string, lease int64, reason string) error
	PriorEnd(ctx context.Context, h store.Holder, jobID string, lease int64, cleanupBy string) (kind string, ended store.Ended, found bool, err error)
	CleanupDone(ctx context.Context, jobID string, claim store.CleanupClaim, generation, kind, msg string) error
	CleanupFailed(ctx context.Context, jobID string, claim store.CleanupClaim, generation string, retryIn time.Duration, cause error) error
}

// executorDeps is what every executor is built with. The producer builds
// it once and shares it among all of them.
type executorDeps struct {
	holder   store.Holder
	commands map[string]Command
	store    executorStore
	plugins  Plugins
	logs     *logFlusher
	running  *batcher[store.Running, markedRunning]
	finals   *batcher[store.End, endResult]
	history  *dbhistory.Tracker
	beats    *beatClock
	metrics  *metrics.Metrics
	agentLog *slog.Logger // each executor's own log adds its job to it
	signals  TestSignals
	now      func() time.Time

	finalTimeout   time.Duration
	cleanupTimeout time.Duration
	cleanupRetryIn time.Duration
	selfFenceAfter time.Duration

	// writes bounds the writes still waiting for the database. It ends
	// FinalTimeout after quit is closed (shutdown began).
	writes context.Context
	quit   <-chan struct{}

	// freeSlot gives a job's slot to the next claim once only its final write
	// is left. remember records an acknowledged end or release (a release
	// passes nil) for the reconcile. Both are the producer's.
	freeSlot func(*runningJob)
	remember func(*runningJob, *store.End)
}

// pluginCall is Plugins.Execute or Plugins.Resume.
type pluginCall func(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error)

// executor runs one job under one lease to its end.
type executor struct {
	*executorDeps
	j      *runningJob
	log    *slog.Logger
	plugin string
	job    *plugin.Job
	called bool // Execute or Resume was called: remote work may exist
	// fenced is set when the plugin's SDK stopped the call at its lease
	// deadline (a pluginFencedError). It is its account of a self-fence.
	fenced error
}

func newExecutor(d *executorDeps, j *runningJob) *executor {
	c := j.claimed
	// A job claimed to be resumed has remote work already.
	return &executor{executorDeps: d, j: j, plugin: c.Job.Plugin, called: c.Resume,
		log: d.agentLog.With("job", c.Job.ID, "command", c.Job.Command, "lease", c.Lease)}
}

// run takes the job to its end under its lease.
func (e *executor) run() {
	c := e.j.claimed
	e.j.handle = c.Handle
	e.j.called.Store(c.Resume)
	if o, ok := e.prepare(); !ok {
		e.end(o)
		return
	}
	rt := e.newRuntime()
	call, ok := e.begin()
	if !ok {
		return
	}
	e.called = true
	e.j.called.Store(true)
	signal(e.signals.Called, Called{JobID: c.Job.ID, Lease: c.Lease, Resume: c.Resume})
	defer e.armActiveTimeout()()
	res, err := e.callPlugin(call, rt)
	e.finish(res, err)
}

// prepare resolves the job's plugin and context. When it cannot (ok
// false), the attempt ends with o and its plugin is never called.
func (e *executor) prepare() (o store.Outcome, ok bool) {
	c := e.j.claimed
	cmd, ok := e.commands[c.Job.Command]
	if !ok { // claim filters by command, so only a config change mid-flight gets here
		return failed(plugin.Retriable, fmt.Sprintf("command %q is not configured on agent %s", c.Job.Command, e.holder.Name)), false
	}
	e.plugin = cmp.Or(e.plugin, cmd.Plugin)
	info, loaded := e.plugins.Info(e.plugin)
	if !loaded && c.Resume {
		e.j.hasCleanup = true // unknown here: let the queue's workers find out
	}
	jobCtx, err := jobctx.Merge(cmd.Context, c.Job.Context)
	if err != nil {
		return failed(plugin.Permanent, err.Error()), false
	}
	e.job = &plugin.Job{ID: c.Job.ID, Command: c.Job.Command, Attempt: c.Job.Attempt, Context: jobCtx}
	switch {
	case !loaded:
		return failed(plugin.Retriable, fmt.Sprintf("plugin %q is not loaded on agent %s", e.plugin, e.holder.Name)), false
	case c.Resume && !info.Has(plugin.CapResume):
		// The claim takes such a job only where the plugin can Resume. A
		// plugin replaced since is the only way here. Fail it truthfully,
		// with Cleanup, and never Execute it beside its remote work.
		return failed(plugin.Retriable, fmt.Sprintf("cannot resume: plugin %q on agent %s lacks the resume capability", e.plugin, e.holder.Name)), false
	}
	return store.Outcome{}, true
}

// failed is a failure of class with message msg.
func failed(class plugin.ErrorClass, msg string) store.Outcome {
	return store.Outcome{Status: store.StatusFailed, Error: msg, ErrorClass: class}
}

// begin readies the database for the plugin call and picks the call:
// Resume for a resumed attempt, else Execute once running is stored. When
// ok is false the attempt has already ended.
func (e *executor) begin() (call pluginCall, ok bool) {
	c := e.j.claimed
	if c.Resume {
		if err := e.store.RecordEvent(e.j.ctx, e.holder, c.Job.ID, c.Lease, "resumed", "resumed by "+e.holder.Name); err != nil {
			e.log.Warn("recording resumed event", "err", err)
		}
		return e.plugins.Resume, true
	}
	return e.plugins.Execute, e.markRunning()
}

// markRunning stores that the plugin is about to be called. It reports
// whether the call may go ahead. When it may not, the attempt has ended.
func (e *executor) markRunning() bool {
	status, err := e.writeRunning()
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		e.recordLeaseLost(metrics.LeaseLostWrite, "before its plugin was called")
		return false
	case err != nil && context.Cause(e.j.ctx) != nil:
		e.afterCancel()
		return false
	case err != nil:
		e.log.Error("marking job running; the janitor will requeue it", "err", err)
		return false
	case status == store.StatusCanceling:
		// Canceled before the plugin was called. Nothing ran, so there is
		// nothing to clean.
		e.end(store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"})
		return false
	}
	if cause := context.Cause(e.j.ctx); cause != nil {
		// Stopped (self-fence, shutdown, …) while the write waited. Never
		// call the plugin with a dead context. Nothing ran.
		e.beforeCall(cause)
		return false
	}
	return true
}

// writeRunning sends the running write through its batch, waiting for the
// database if it must, and returns the job's status it found.
func (e *executor) writeRunning() (status jobstate.JobStatus, err error) {
	c := e.j.claimed
	err = e.retryWrite("marking job running", func(ctx context.Context) error {
		r, err := e.running.do(ctx, store.Running{JobID: c.Job.ID, Lease: c.Lease, Generation: e.holder.Generation,
			Message: "attempt " + fmt.Sprint(c.Job.Attempt) + " on " + e.holder.Name})
		if err == nil {
			status, err = r.status, r.err
		}
		return err
	})
	return status, err
}

// armActiveTimeout stops the plugin call once the attempt's active_timeout
// is spent, counted from when the plugin was first called for the attempt
// (a resumed attempt has only what is left). It returns the disarm.
func (e *executor) armActiveTimeout() (disarm func()) {
	c := e.j.claimed
	if c.ActiveTimeout <= 0 {
		return func() {}
	}
	left := c.ActiveTimeout
	if c.Resume {
		left -= c.AttemptAge
	}
	t := time.AfterFunc(max(left, 0), func() { e.j.cancel(errActiveTimeout) })
	return func() { t.Stop() }
}

// callPlugin makes the plugin call. A resumable job whose plugin process
// crashed (or whose call broke) is resumed in the same attempt from its
// last handle, up to reattachTries times. Its remote work is most likely
// still going, and failing it would run the work again beside itself.
func (e *executor) callPlugin(call pluginCall, rt *runtime) (*plugin.Result, error) {
	c := e.j.claimed
	e.log.Debug("calling plugin", "plugin", e.plugin, "resume", c.Resume)
	res, err := call(e.j.ctx, e.plugin, e.job, rt)
	for try := 1; e.reattach(err, try); try++ {
		wait := time.Duration(1<<(try-1)) * 500 * time.Millisecond
		e.log.Warn("plugin call broke; resuming the same attempt", "err", err, "try", try, "in", wait)
		if !sleepCtx(e.j.ctx, wait) {
			break
		}
		// Output the broken call wrote after its last checkpoint is held,
		// not stored. The resumed call copies it again from that handle.
		e.logs.drop(e.j.key)
		msg := fmt.Sprintf("resumed by %s in the same attempt after the plugin call broke (%s)", e.holder.Name, firstLine(err.Error()))
		if err := e.store.RecordEvent(e.j.ctx, e.holder, c.Job.ID, c.Lease, "resumed", msg); err != nil {
			e.log.Warn("recording resumed event", "err", err)
		}
		res, err = e.plugins.Resume(e.j.ctx, e.plugin, e.job, rt)
	}
	return res, err
}

// reattach reports whether a call that answered err is resumed for the
// try'th time.
func (e *executor) reattach(err error, try int) bool {
	return err != nil && e.j.resumable && plugin.IsBroken(err) && context.Cause(e.j.ctx) == nil && try <= reattachTries
}

// finish ends the attempt with what its plugin call answered.
func (e *executor) finish(res *plugin.Result, err error) {
	if cause := pluginFenced(err); cause != nil {
		// The plugin's SDK stopped the call. It is a self-fence, whatever
		// the plugin returned (first cause wins, as for the agent's own).
		e.fenced = cause
		e.j.cancel(cause)
	}
	// Work that finished counts, even if a cancel raced with its end. The
	// fenced write still refuses it if the lease was lost.
	switch {
	case err != nil && context.Cause(e.j.ctx) != nil:
		e.afterCancel()
	case err != nil:
		e.end(failed(plugin.ClassOf(err), err.Error()))
	case res != nil:
		e.end(store.Outcome{Status: store.StatusSucceeded, Result: res.Output, Message: res.Message})
	default:
		e.end(store.Outcome{Status: store.StatusSucceeded})
	}
}

// sleepCtx waits d or until ctx ends. It reports whether d passed.
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
