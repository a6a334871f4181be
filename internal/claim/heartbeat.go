package claim

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// heartbeatLoop renews every lease this agent holds, once per keepalive (or at
// once when kicked), in one statement. It runs apart from plugin calls so a
// slow plugin never delays it.
func (s *Service) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Keepalive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.beat:
		}
		s.heartbeat(ctx)
	}
}

func (s *Service) heartbeat(ctx context.Context) {
	s.mu.Lock()
	leases := make([]store.Lease, 0, len(s.jobs))
	for id, j := range s.jobs {
		leases = append(leases, store.Lease{JobID: id, Lease: j.claimed.Lease})
	}
	s.mu.Unlock()

	hctx, cancel := context.WithTimeout(ctx, s.cfg.Keepalive)
	defer cancel()
	began := time.Now()
	defer s.checkFence(began)
	res, err := s.store.Heartbeat(hctx, s.cfg.Holder, leases)
	s.cfg.Metrics.HeartbeatTime.Observe(time.Since(began).Seconds())
	if err != nil {
		s.cfg.Metrics.Heartbeats.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			s.log.Warn("heartbeat failed", "err", err)
		}
		return
	}
	s.cfg.Metrics.Heartbeats.WithLabelValues("ok").Inc()
	s.mu.Lock()
	s.lastBeat = began
	s.mu.Unlock()
	s.runDeferred(ctx)
	if s.TestSignals.Heartbeat != nil {
		select {
		case s.TestSignals.Heartbeat <- res:
		case <-ctx.Done():
		}
	}
	if !res.Registered {
		s.log.Error("another process registered under this agent's name; stopping", "name", s.cfg.Holder.Name)
		s.supersededOnce.Do(func() { close(s.superseded) })
		return
	}
	held := make(map[string]string, len(res.Held))
	for _, h := range res.Held {
		held[h.JobID] = h.Status
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range leases {
		j := s.jobs[l.JobID]
		if j == nil {
			continue // finished while the heartbeat ran
		}
		status, ok := held[l.JobID]
		switch {
		case !ok:
			// The job may have finished between the snapshot and the
			// statement; a finished job's runner is already gone from s.jobs
			// or about to be, and its cancel is harmless.
			j.cancel(errLeaseLost)
		case status == store.StatusCanceling:
			j.cancel(errCancelRequested)
		}
	}
}

// checkFence stops every job once no heartbeat has succeeded for
// SelfFenceAfter, so this agent never acts on a lease the janitor may already
// have handed to someone else.
func (s *Service) checkFence(now time.Time) {
	if s.cfg.SelfFenceAfter <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	silent := now.Sub(s.lastBeat)
	if silent < s.cfg.SelfFenceAfter || len(s.jobs) == 0 {
		return
	}
	s.log.Error("no heartbeat succeeded; stopping every job before its lease can expire",
		"silent", silent.Round(time.Millisecond), "self_fence_after", s.cfg.SelfFenceAfter, "jobs", len(s.jobs))
	for _, j := range s.jobs {
		j.cancel(errSelfFenced)
	}
}

// deferredWrite is a fenced write that waits for the database.
type deferredWrite struct {
	claimed store.Claimed
	release bool   // release the job (resumable), else finish it with outcome
	reason  string // for release
	outcome store.Outcome
	plugin  string
	cleanup bool
	job     *plugin.Job
}

func (s *Service) deferWrite(w deferredWrite) {
	s.mu.Lock()
	s.deferred = append(s.deferred, w)
	s.mu.Unlock()
}

// runDeferred applies the writes that waited for the database. A write the
// lease no longer allows becomes a lease_lost event; other errors keep it for
// the next heartbeat.
func (s *Service) runDeferred(ctx context.Context) {
	s.mu.Lock()
	pending := s.deferred
	s.deferred = nil
	s.mu.Unlock()
	var keep []deferredWrite
	for _, w := range pending {
		c := w.claimed
		var err error
		var fin store.Finished
		s.logs.flushNow(ctx) // output kept since the outage goes first
		if w.release {
			err = s.store.Release(ctx, s.cfg.Holder, c.Job.ID, c.Lease, w.reason)
		} else {
			o := w.outcome
			o.Jitter = rand.Float64()
			fin, err = s.store.FinishAttempt(ctx, s.cfg.Holder, c.Job.ID, c.Lease, o)
		}
		log := s.log.With("job", c.Job.ID, "lease", c.Lease)
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			s.logs.untrack(c.Job.ID)
		}
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			s.cfg.Metrics.LeasesLost.Inc()
			if err := s.store.RecordEvent(ctx, s.cfg.Holder, c.Job.ID, c.Lease, "lease_lost",
				"agent "+s.cfg.Holder.Name+" was fenced off while the database was unreachable"); err != nil {
				log.Warn("recording lease_lost event", "err", err)
			}
		case err != nil:
			keep = append(keep, w)
		case !w.release && w.cleanup:
			cctx, cancel := context.WithTimeout(ctx, s.cfg.CleanupTimeout)
			kind, msg := "cleanup_ok", ""
			if err := s.plugins.Cleanup(cctx, w.plugin, w.job); err != nil {
				kind, msg = "cleanup_failed", err.Error()
				s.cfg.Metrics.CleanupFailures.Inc()
				if s.cfg.EnqueueCleanup != nil {
					if qerr := s.cfg.EnqueueCleanup(ctx, c.Job.ID, "cleanup after the job ended failed: "+err.Error()); qerr != nil {
						log.Error("queueing cleanup for retry", "err", qerr)
					}
				}
			}
			cancel()
			if err := s.store.RecordEvent(ctx, s.cfg.Holder, c.Job.ID, c.Lease, kind, msg); err != nil {
				log.Warn("recording cleanup event", "err", err)
			}
			if kind == "cleanup_ok" && fin.Retried {
				if err := s.store.CleanupFinished(ctx, c.Job.ID); err != nil {
					log.Warn("releasing the retry after Cleanup; the queued Cleanup will release it", "err", err)
				}
			}
		}
	}
	if len(keep) > 0 {
		s.mu.Lock()
		s.deferred = append(keep, s.deferred...)
		s.mu.Unlock()
	}
}
