package claim

import (
	"context"

	"github.com/tetherjobs/tether/internal/store"
)

// cleanup runs the plugin's Cleanup for an attempt whose end is stored, under
// the claim the transition gave this agent, and records the result in the
// queue. Done means a retry waiting for it may run. Failed means it is due
// again for the queue's workers. If this agent dies first, the claim lapses
// and a janitor runs it.
func (e *executor) cleanup(claim store.CleanupClaim) {
	j := e.j
	timeout := e.cleanupTimeout
	select {
	case <-e.quit:
		// Shutting down, so do not hold the exit for long. What does not
		// finish goes back to the queue for another agent.
		timeout = min(timeout, e.finalTimeout)
	default:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), timeout)
	job := *e.job
	job.Handle = j.lastHandle()
	err := e.plugins.Cleanup(ctx, e.plugin, &job)
	cancel()
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(j.ctx), e.finalTimeout)
	defer wcancel()
	id, gen := j.claimed.Job.ID, e.holder.Generation
	if err != nil {
		e.metrics.CleanupFailures.Inc()
		e.log.Warn("cleanup failed; queued for retry", "err", err)
		if err := e.store.CleanupFailed(wctx, id, claim, gen, e.cleanupRetryIn, err); err != nil {
			e.log.Warn("recording failed cleanup; the claim lapses and the queue retries it", "err", err)
		}
		return
	}
	if err := e.store.CleanupDone(wctx, id, claim, gen, "cleanup_ok", "by agent "+e.holder.Name); err != nil {
		e.log.Warn("recording cleanup; the claim lapses and the queue runs it again", "err", err)
	}
}
