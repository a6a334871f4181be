package e2e

import (
	"context"
	"syscall"
	"time"

	"github.com/tetherjobs/tether/internal/pgcluster"
)

// The randomized invariant test's faults between "up" and "down". A hung
// database, an agent frozen while its plugins run on, and failovers to the
// standby with and without lost history.

// lossWindow is a span whose commits the database lost. The standby was
// away from from, the primary died at to.
type lossWindow struct{ from, to time.Time }

// freezeDatabase SIGSTOPs the whole cluster (postmaster and every backend)
// and SIGCONTs it later. Statements wait. The agents' bounded writes give
// up and are sent again, the first copies committing at the thaw. Short:
// below the log flush's 5 s bound. Long: past it (and past the self-fence
// point: the agents stop their jobs as in a long outage).
func (r *invRound) freezeDatabase(ctx context.Context, long bool) {
	d := time.Duration(300+r.rng.IntN(1700)) * time.Millisecond
	kind := "short"
	if long {
		d = time.Duration(5500+r.rng.IntN(1500)) * time.Millisecond
		kind = "long"
	}
	r.actions["database SIGSTOP ("+kind+")"]++
	r.logf("database SIGSTOP (%s) for %s", kind, d)
	if err := r.cluster.Freeze(ctx); err != nil {
		r.t.Fatalf("freezing PostgreSQL: %v", err)
	}
	sleep(ctx, d)
	if err := r.cluster.Thaw(ctx); err != nil {
		r.t.Fatalf("thawing PostgreSQL: %v", err)
	}
	r.h.pool.Reset()
	r.lastOutage = time.Now()
	r.logf("database SIGCONT")
}

// freezeAgent SIGSTOPs one agent process alone (its plugins and their work
// run on) for up to a little past stale_job, then SIGCONTs it. Its plugins
// must stop their work at the self-fence point, before another agent may
// take the jobs over.
func (r *invRound) freezeAgent(ctx context.Context, s *invSlot) {
	d := time.Duration(500+r.rng.Int64N(int64(r.tm.StaleJob+2*time.Second)/int64(time.Millisecond))) * time.Millisecond
	r.actions["agent SIGSTOP"]++
	r.logf("SIGSTOP %s (gen %s, pid %d) for %s (stale_job %s)", s.name, short(s.proc.gen), s.proc.cmd.Process.Pid, d.Round(time.Millisecond), r.tm.StaleJob)
	r.h.signal(s.proc, syscall.SIGSTOP)
	s.state, s.since = "frozen", time.Now()
	sleep(ctx, d)
	r.h.signal(s.proc, syscall.SIGCONT)
	s.state, s.since = "live", time.Now()
	r.logf("SIGCONT %s", s.name)
}

// failover stops the primary at once and promotes the standby, with lost
// history (the standby stopped first while the primary kept committing)
// or without (the standby caught up first). Then a new standby of the new
// primary takes the old primary's port, so the agents' multi-host URL keeps
// naming both.
func (r *invRound) failover(ctx context.Context, lose bool) {
	kind := "no loss"
	if lose {
		kind = "history lost"
	}
	r.actions["failover ("+kind+")"]++
	r.lastFailover = time.Now()
	oldPort := r.cluster.Port()
	if lose {
		// The standby is asynchronous: from the moment its shutdown
		// begins, commits the primary acknowledges may never reach it
		// (its WAL receiver can stop before they stream), so the loss
		// window opens here, not when the shutdown returns.
		from := time.Now()
		if err := r.standby.StopServer(ctx); err != nil {
			r.t.Fatalf("stopping the standby: %v", err)
		}
		d := time.Duration(500+r.rng.IntN(2000)) * time.Millisecond
		r.logf("failover (%s): standby stopped; the primary commits alone for %s", kind, d)
		sleep(ctx, d)
		if err := r.cluster.StopServerImmediate(ctx); err != nil {
			r.t.Fatalf("stopping the primary: %v", err)
		}
		r.losses = append(r.losses, lossWindow{from: from, to: time.Now()})
		if err := r.standby.StartServer(ctx); err != nil {
			r.t.Fatalf("starting the standby: %v", err)
		}
	} else {
		_, lsn, err := r.cluster.CurrentWAL(ctx)
		if err == nil {
			err = r.standby.WaitReplayed(ctx, lsn)
		}
		if err != nil {
			r.t.Fatalf("letting the standby catch up: %v", err)
		}
		if err := r.cluster.StopServerImmediate(ctx); err != nil {
			r.t.Fatalf("stopping the primary: %v", err)
		}
		r.logf("failover (%s): the standby had replayed everything", kind)
	}
	if err := r.standby.Promote(ctx); err != nil {
		r.t.Fatalf("promoting the standby: %v", err)
	}
	r.h.pool.Reset()
	old := r.cluster
	r.cluster = r.standby
	next, err := r.cluster.StartStandby(ctx, pgcluster.StandbyOptions{Port: oldPort})
	if err != nil {
		r.t.Fatalf("starting a new standby on port %d: %v", oldPort, err)
	}
	r.standby = next
	r.t.Cleanup(func() { _ = next.Stop(context.Background()) })
	_ = old.Stop(ctx) // its server is gone; this removes its directory
	r.lastOutage = time.Now()
	r.logf("failover (%s): new primary on port %d, new standby on port %d", kind, r.cluster.Port(), oldPort)
}
