package claim

import (
	"context"

	"github.com/tetherjobs/tether/internal/store"
)

// orphanWatch remembers the orphan leases of the last heartbeat: leases the
// database says this process holds that it has no runner for. Only the
// heartbeat goroutine uses it.
type orphanWatch map[jobKey]bool

// orphansToDetach is the policy: a lease is detached when two heartbeats in
// a row report it as an orphan and the process has no runner for it. One
// sighting is not enough: a claim commits before its runner is registered,
// so a heartbeat between the two sees the lease as an orphan once. It
// returns the leases to detach and the watch for the next heartbeat.
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

// detachOrphans applies orphansToDetach to one heartbeat's answer. A failed
// detach is tried again at the next heartbeat (the lease stays an orphan).
func (s *Service) detachOrphans(ctx context.Context, orphans []store.Lease) {
	s.mu.Lock()
	detach, next := orphansToDetach(s.orphans, orphans, func(k jobKey) bool { return s.jobs[k] != nil })
	s.mu.Unlock()
	s.orphans = next
	for _, l := range detach {
		ok, err := s.store.Detach(ctx, s.cfg.Holder, l)
		switch {
		case err != nil:
			s.log.Warn("detaching an orphan lease failed; trying again at the next heartbeat", "job", l.JobID, "lease", l.Lease, "err", err)
			s.orphans[jobKey{l.JobID, l.Lease}] = true
		case ok:
			s.log.Warn("the database says this agent holds a job it does not run (its claim's answer was lost?): left to the janitor",
				"job", l.JobID, "lease", l.Lease)
		}
	}
}
