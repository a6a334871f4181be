package claim

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// runtime is the host side of plugin.Runtime for one executor. It records
// the plugin's descriptions of its handles too (plugin.DescribedCheckpointer).
type runtime struct {
	e              *executor
	stdout, stderr *jobWriter
}

func (e *executor) newRuntime() *runtime {
	return &runtime{e: e, stdout: e.logs.writer(e.j.ctx, e.j.key, stdoutStream), stderr: e.logs.writer(e.j.ctx, e.j.key, stderrStream)}
}

func (r *runtime) Stdout() io.Writer { return r.stdout }
func (r *runtime) Stderr() io.Writer { return r.stderr }

// Checkpoint stores the handle with the output written since the last one,
// fenced by the job's lease. While the database cannot be reached it waits
// and tries again, until the job's context ends (the self-fence ends it).
// A database outage is the host's business, never a job error.
func (r *runtime) Checkpoint(ctx context.Context, handle []byte) error {
	return r.checkpoint(ctx, handle, nil)
}

// CheckpointDescribed is Checkpoint, also recording under the same fence
// the resources the plugin said handle points at (a remote event of the
// job, when they changed).
func (r *runtime) CheckpointDescribed(ctx context.Context, handle []byte, resources []plugin.Resource) error {
	c := r.e.j.claimed
	d := &store.Described{Holder: r.e.holder, Attempt: c.Job.Attempt, Resources: cleanResources(resources)}
	return r.checkpoint(ctx, handle, d)
}

func (r *runtime) checkpoint(ctx context.Context, handle []byte, described *store.Described) error {
	j := r.e.j
	c := j.claimed
	stop, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(j.ctx, func() { cancel(context.Cause(j.ctx)) })()
	log := r.e.agentLog.With("job", c.Job.ID, "lease", c.Lease)
	err := r.e.untilWritten(stop, log, "checkpoint", func(wctx context.Context) error {
		return r.e.logs.checkpoint(wctx, j.key, handle, described)
	})
	switch {
	case err == nil:
		j.setHandle(handle)
		signal(r.e.signals.Checkpointed, Checkpointed{JobID: c.Job.ID, Lease: c.Lease})
		return nil
	case errors.Is(err, store.ErrLeaseLost):
		j.cancel(errLeaseLost)
		return plugin.Errorf(plugin.Retriable, "checkpoint of job %s rejected: lease %d lost", c.Job.ID, c.Lease)
	case errors.Is(err, store.ErrOutputGap):
		// Prepared before the database lost its history, stored after: it
		// would point past the lost output. Resume from the one it kept.
		j.cancel(errHistoryResume)
		return plugin.Errorf(plugin.Retriable, "checkpoint of job %s rejected: %v", c.Job.ID, err)
	}
	return plugin.Errorf(plugin.Retriable, "checkpoint of job %s: %v", c.Job.ID, err)
}

func (r *runtime) Handle() []byte { return r.e.j.lastHandle() }

// LeaseDeadline is how long the job's lease is good from now. It lasts until
// the self-fence point, SelfFenceAfter after the last successful heartbeat
// was sent. It is 0 when self-fencing is off, and negative once that point
// has passed.
func (r *runtime) LeaseDeadline() time.Duration {
	after := r.e.selfFenceAfter
	if after <= 0 {
		return 0
	}
	if d := time.Until(r.e.beats.lastAt().Add(after)); d != 0 {
		return d
	}
	return -1 // exactly at the point: already passed, never "no deadline"
}
