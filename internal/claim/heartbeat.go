package claim

import (
	"context"
	"sync"
	"time"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

// heartbeatLoop renews this agent's row, and with it every lease it holds,
// once per keepalive (or at once when kicked), in one statement on the
// liveness store's own connection. It does nothing else, and nothing it
// cannot bound by a keepalive. Final writes, Cleanup, orphan detaches and the
// self-fence run elsewhere, so neither a job nor a stuck write of another
// kind makes the agent look dead.
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
	leases := s.heldLeases()
	res, began, ok := s.beatRegistered(ctx, leases)
	if !ok {
		return
	}
	s.beats.beat(began)
	s.signalBeat(ctx, res)
	if !res.Registered {
		s.log.Error("another process registered under this agent's name; stopping", "name", s.cfg.Holder.Name)
		s.supersededOnce.Do(func() { close(s.superseded) })
		return
	}
	if res.DrainRequested {
		s.drainOnce.Do(func() { close(s.drainRequested) })
	}
	// A database that lost its history answers for what it remembers. The
	// reconcile, not this answer, decides about the leases (it may give a
	// lost one back).
	s.cfg.History.Observe(res.Position)
	select {
	case <-s.cfg.History.Pending():
	default:
		return
	}
	s.reportOrphans(res.Orphans)
	s.stopUnheld(leases, res.Held)
}

// heldLeases are the leases of the jobs whose end is not stored yet.
func (s *Service) heldLeases() []store.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	leases := make([]store.Lease, 0, len(s.jobs))
	for k, j := range s.jobs {
		if !j.ended.Load() {
			leases = append(leases, store.Lease{JobID: k.ID, Lease: k.Lease})
		}
	}
	return leases
}

// beatRegistered sends one heartbeat for leases. When the agents row is
// missing, it registers again and renews at once. ok is false when no
// heartbeat renewed anything (logged, or signalled).
func (s *Service) beatRegistered(ctx context.Context, leases []store.Lease) (res store.HeartbeatResult, began time.Time, ok bool) {
	res, began, ok = s.beatOnce(ctx, leases)
	if !ok || !res.Missing {
		return res, began, ok
	}
	s.signalBeat(ctx, res)
	// That answer renewed nothing and listed no lease. It says nothing about
	// them. Register again, then renew at once. Leases a janitor released
	// meanwhile (an owner without a row is gone) come back lost as usual.
	if !s.registerAgain(ctx) {
		return res, began, false
	}
	if res, began, ok = s.beatOnce(ctx, leases); !ok {
		return res, began, false
	}
	if res.Missing {
		s.signalBeat(ctx, res)
		return res, began, false // deleted again: the next tick tries again
	}
	return res, began, true
}

// stopUnheld stops the jobs whose lease the heartbeat did not renew, and
// those whose cancel it found requested.
func (s *Service) stopUnheld(leases []store.Lease, renewed []store.Held) {
	held := make(map[jobKey]jobstate.JobStatus, len(renewed))
	for _, h := range renewed {
		held[jobKey{h.JobID, h.Lease}] = h.Status
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range leases {
		k := jobKey{l.JobID, l.Lease}
		j := s.jobs[k]
		if j == nil || j.ended.Load() {
			continue // its end was stored while the heartbeat ran
		}
		status, ok := held[k]
		switch {
		case !ok:
			j.cancel(errLeaseLost)
		case status == store.StatusCanceling:
			j.cancel(errCancelRequested)
		}
	}
}

// beatOnce sends one heartbeat for leases. ok is false when the statement
// failed (logged). began is when it was sent.
func (s *Service) beatOnce(ctx context.Context, leases []store.Lease) (res store.HeartbeatResult, began time.Time, ok bool) {
	hctx, cancel := context.WithTimeout(ctx, s.cfg.Keepalive)
	defer cancel()
	began = time.Now()
	res, err := s.cfg.Liveness.Heartbeat(hctx, s.cfg.Holder, leases)
	s.cfg.Metrics.HeartbeatTime.Observe(time.Since(began).Seconds())
	if err != nil {
		s.cfg.Metrics.Heartbeats.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			s.log.Warn("heartbeat failed", "err", err)
		}
		return res, began, false
	}
	s.cfg.Metrics.Heartbeats.WithLabelValues("ok").Inc()
	return res, began, true
}

func (s *Service) signalBeat(ctx context.Context, res store.HeartbeatResult) {
	if s.cfg.TestSignals.Heartbeat != nil {
		select {
		case s.cfg.TestSignals.Heartbeat <- res:
		case <-ctx.Done():
		}
	}
}

// registerAgain writes this process's agents row again, with the data it
// registered at start and its current state, after the row was deleted. It
// reports whether the caller should renew at once. It reports false after an
// error, which is logged, and the next tick tries again. A name another
// process took meanwhile is not overwritten. The next heartbeat finds this
// one superseded.
func (s *Service) registerAgain(ctx context.Context) bool {
	state := "running"
	if s.draining.Load() {
		state = "draining"
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Keepalive)
	defer cancel()
	written, err := s.cfg.Liveness.RegisterAgain(rctx, s.cfg.Registration, state)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("agent row was deleted; registering again failed", "err", err)
		}
		return false
	}
	if written {
		s.log.Warn("agent row was deleted (by an operator or agent retention); registered again",
			"generation", s.cfg.Holder.Generation, "state", state)
	}
	return true
}

// beatClock is when the last successful heartbeat was sent (monotonic),
// and a channel the next one closes. The database stamped that beat no
// earlier, so fencing on it is safe. Writes waiting for the database, the
// self-fence timer and the renewals watch the channel.
type beatClock struct {
	mu   sync.Mutex
	last time.Time
	ok   chan struct{}
}

func newBeatClock(now time.Time) *beatClock {
	return &beatClock{last: now, ok: make(chan struct{})}
}

// beat records a successful heartbeat sent at began and wakes its waiters.
func (b *beatClock) beat(began time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = began
	close(b.ok)
	b.ok = make(chan struct{})
}

// state is the last beat and the channel the next one closes, read together.
func (b *beatClock) state() (time.Time, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last, b.ok
}

// lastAt is when the last successful heartbeat was sent.
func (b *beatClock) lastAt() time.Time {
	last, _ := b.state()
	return last
}

// next returns a channel closed by the next successful heartbeat.
func (b *beatClock) next() <-chan struct{} {
	_, ok := b.state()
	return ok
}

// fenceLoop stops every job once no heartbeat has succeeded for
// SelfFenceAfter, on its own timer. The agent stops acting on its leases
// before the janitor may hand them to someone else (stale_job after the last
// renewal), whatever the heartbeat or the jobs are doing.
func (s *Service) fenceLoop(ctx context.Context) {
	if s.cfg.SelfFenceAfter <= 0 {
		return
	}
	t := time.NewTimer(s.cfg.SelfFenceAfter)
	defer t.Stop()
	for {
		last, back := s.beats.state()
		deadline := last.Add(s.cfg.SelfFenceAfter)
		t.Reset(time.Until(deadline))
		select {
		case <-ctx.Done():
			return
		case <-back:
			t.Stop() // Go ≥ 1.23 timers: no stale tick survives Stop/Reset
			continue
		case <-t.C:
		}
		s.selfFence()
		select { // fenced until a heartbeat gets through again
		case <-ctx.Done():
			return
		case <-back:
		}
	}
}

func (s *Service) selfFence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	silent := time.Since(s.beats.lastAt())
	n := 0
	for _, j := range s.jobs {
		if !j.ended.Load() && context.Cause(j.ctx) == nil {
			j.cancel(errSelfFenced)
			n++
		}
	}
	if n > 0 {
		s.log.Error("no heartbeat succeeded; stopping every job before its lease can expire",
			"silent", silent.Round(time.Millisecond), "self_fence_after", s.cfg.SelfFenceAfter, "jobs", n)
	}
	select { // a nil channel (production) takes the default
	case s.cfg.TestSignals.SelfFenced <- silent:
	default:
	}
}

// DrainRequested is closed once a heartbeat finds that an operator asked
// this agent to drain (tether agent drain). The agent then drains as on
// SIGTERM: the request rides on the heartbeat, one statement per agent per
// keepalive however many agents there are.
func (s *Service) DrainRequested() <-chan struct{} { return s.drainRequested }
