package claim

import (
	"context"
	"time"

	"github.com/tetherjobs/tether/internal/store"
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
