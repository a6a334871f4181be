package claim

import (
	"context"

	"github.com/tetherjobs/tether/internal/store"
)

// orphanWatch remembers the orphan leases of the last heartbeat the orphan
// loop read. Those are leases the database says this process holds that it
// has no runner for. Only the orphan loop uses it.
type orphanWatch map[jobKey]bool

// orphansToDetach is the policy. A lease is detached when two heartbeats in a
// row report it as an orphan and the process has no runner for it. One
// sighting is not enough. A claim commits before its runner is registered, so
// a heartbeat between the two sees the lease as an orphan once. It returns
// the leases to detach and the watch for the next heartbeat.
func orphansToDetach(prev orphanWatch, orphans []store.Lease, known func(jobKey) bool) ([]store.Lease, orphanWatch) {
	next := make(orphanWatch, len(orphans))
	var detach []store.Lease
	for _, o := range orphans {
		k := jobKey{o.JobID, o.Lease}
		if known(k) {
			continue
		}
		if prev[k] {
			detach = append(detach, o)
			continue
		}
		next[k] = true
	}
	return detach, next
}

// reportOrphans hands one heartbeat's orphan leases to the orphan loop
// without waiting. The heartbeat does nothing it cannot bound by its own
// deadline, and a detach stuck on a row lock must not stop it (the agent
// would self-fence on a healthy database). A report the loop has not read yet
// is replaced by the newer one.
func (s *Service) reportOrphans(orphans []store.Lease) {
	offerNewest(s.orphanReports, orphans)
}

// orphanLoop detaches the orphan leases the heartbeats report, off the
// heartbeat goroutine. Two sightings it reads in a row are two different
// heartbeats, at least a keepalive apart, which is what the policy needs.
func (s *Service) orphanLoop(ctx context.Context) {
	receiveEach(ctx, s.orphanReports, func(orphans []store.Lease) { s.detachOrphans(ctx, orphans) })
}

// detachOrphans applies orphansToDetach to one heartbeat's answer. Each
// detach is bounded by a keepalive. A failed one is tried again at the next
// sighting (the lease stays an orphan).
func (s *Service) detachOrphans(ctx context.Context, orphans []store.Lease) {
	s.mu.Lock()
	detach, next := orphansToDetach(s.orphans, orphans, func(k jobKey) bool { return s.jobs[k] != nil })
	s.mu.Unlock()
	s.orphans = next
	for _, l := range detach {
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Keepalive)
		ok, err := s.store.Detach(dctx, s.cfg.Holder, l)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("detaching an orphan lease failed; trying again at its next sighting", "job", l.JobID, "lease", l.Lease, "err", err)
			s.orphans[jobKey{l.JobID, l.Lease}] = true
		case ok:
			s.log.Warn("the database says this agent holds a job it does not run (its claim's answer was lost?): left to the janitor",
				"job", l.JobID, "lease", l.Lease)
		}
	}
}
