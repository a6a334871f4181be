package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// The drain's view of the service. See internal/drain for the sequence.

// StopClaiming makes the service take no more jobs. Heartbeats, log flushes
// and running jobs go on. A claim already past its check may be in flight.
// It waits for that claim, up to a keepalive, so the jobs it took are
// registered before the hand-off looks for them. Else a job the hand-off
// had just released could be claimed again by its draining agent. A hung
// database must not hold the drain, hence the bound.
func (s *Service) StopClaiming() {
	s.draining.Store(true)
	settled := make(chan struct{})
	go func() {
		s.claimMu.Lock()
		s.claimMu.Unlock() // empty on purpose: it only waits for the claim in flight
		close(settled)
	}()
	t := time.NewTimer(s.cfg.Keepalive)
	defer t.Stop()
	select {
	case <-settled:
	case <-t.C:
	}
}

// Counts returns how many held jobs are resumable and how many are not.
func (s *Service) Counts() (resumable, other int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		// A job whose end is stored is no longer resumable. Its Cleanup may
		// still be running.
		if j.resumable && !j.ended.Load() {
			resumable++
		} else {
			other++
		}
	}
	return resumable, other
}

// detachResumable stops watching every resumable job and waits, bounded by
// ctx, for their runners to return. It runs no Cleanup, because their remote
// work goes on. It returns their leases.
func (s *Service) detachResumable(ctx context.Context, cause error) []store.Lease {
	s.mu.Lock()
	var leases []store.Lease
	var done []chan struct{}
	for k, j := range s.jobs {
		if !j.resumable || j.ended.Load() {
			continue
		}
		j.cancel(cause)
		leases = append(leases, store.Lease{JobID: k.ID, Lease: k.Lease})
		done = append(done, j.done)
	}
	s.mu.Unlock()
	// A runner slow to return still cannot write. The release bumps the lease.
	waitAll(ctx, done)
	return leases
}

// waitAll waits until every channel in done is closed, or ctx ends. It
// reports whether they all closed.
func waitAll(ctx context.Context, done []chan struct{}) bool {
	for _, d := range done {
		select {
		case <-d:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// HandOff releases every resumable job in one fenced statement after this
// agent stopped watching them, so another agent resumes them within a claim
// interval. It returns how many it released.
func (s *Service) HandOff(ctx context.Context, reason string) (int, error) {
	wait, cancel := context.WithTimeout(ctx, s.cfg.FinalTimeout)
	leases := s.detachResumable(wait, errHandoff)
	cancel()
	if len(leases) == 0 {
		return 0, nil
	}
	released, err := s.store.ReleaseMany(ctx, s.cfg.Holder, leases, reason)
	if err != nil {
		return 0, fmt.Errorf("handing off %d resumable jobs (the janitor will release them): %w", len(leases), err)
	}
	s.cfg.Metrics.Releases.WithLabelValues(metrics.ReleaseHandoff).Add(float64(len(released)))
	for _, l := range leases {
		if !released[l.JobID] {
			s.cfg.Metrics.LeasesLost.WithLabelValues(metrics.LeaseLostHandoff).Inc()
			if err := s.store.RecordEvent(ctx, s.cfg.Holder, l.JobID, l.Lease, "lease_lost", "handoff found the lease already taken over"); err != nil {
				s.log.Warn("recording lease_lost event", "job", l.JobID, "err", err)
			}
		}
	}
	s.log.Info("handed off resumable jobs", "released", len(released), "reason", reason)
	return len(released), nil
}

// Detach stops watching every resumable job without releasing it. The janitor
// releases them (at once, once this agent is marked stopped).
func (s *Service) Detach(ctx context.Context) int {
	wait, cancel := context.WithTimeout(ctx, s.cfg.FinalTimeout)
	defer cancel()
	return len(s.detachResumable(wait, errDetached))
}

// WaitIdle returns nil when the service holds no jobs (resumable ones count
// only if includeResumable), or ctx's error.
func (s *Service) WaitIdle(ctx context.Context, includeResumable bool) error {
	t := time.NewTicker(time.Second) // a safety net; job ends kick s.changed
	defer t.Stop()
	for {
		r, o := s.Counts()
		if o == 0 && (!includeResumable || r == 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.changed:
		case <-t.C:
		}
	}
}

// StopJobs cancels every remaining job as "agent shut down before the job
// finished" and waits for their final writes, bounded by ctx.
func (s *Service) StopJobs(ctx context.Context) error {
	s.mu.Lock()
	var done []chan struct{}
	for _, j := range s.jobs {
		j.cancel(errShutdown)
		done = append(done, j.done)
	}
	s.mu.Unlock()
	if !waitAll(ctx, done) {
		return errors.New("jobs still stopping when the drain ran out of time")
	}
	return nil
}
