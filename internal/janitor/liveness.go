package janitor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/startstop"
)

// deadAfterKeepalives is dead_after's default in keepalives. An agent that
// lost its lock with the database (a restart) has heartbeat again by then.
const deadAfterKeepalives = 2

// dueMargin is how long after an agent may be found dead the follow-up check
// runs. It puts the check past F + dead_after by the database clock despite
// the scheduling of the statement.
const dueMargin = 20 * time.Millisecond

// LivenessConfig configures a Liveness. Zero values take the defaults.
type LivenessConfig struct {
	Keepalive time.Duration // period of the check (defaults.Keepalive)
	DeadAfter time.Duration // silence since the lock was seen free (2 × Keepalive)

	// TestSignals let a test observe the service without sleeping.
	TestSignals LivenessSignals
}

func (c *LivenessConfig) setDefaults() {
	if c.Keepalive <= 0 {
		c.Keepalive = defaults.Keepalive
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = deadAfterKeepalives * c.Keepalive
	}
}

// LivenessSignals lets tests observe a Liveness. Each is nil (and costs
// nothing) in production. A set channel must be read, or the check blocks.
type LivenessSignals struct {
	// Checked receives the outcome of every check.
	Checked chan<- Checked
	// Acted receives, per dead agent, what the pass did to its jobs, before
	// Checked receives the check.
	Acted chan<- Acted
}

// Checked is one liveness check.
type Checked struct {
	Now        time.Time // database clock
	Free       []FreeLock
	Dead       []DeadAgent
	Remembered int // agents with a first-free time after the check
	// Pending says a remembered agent may be found dead Due after Now, when
	// the next check then runs (if sooner than a keepalive).
	Pending bool
	Due     time.Duration
}

// Acted is what one check's pass did to a dead agent's jobs.
type Acted struct {
	Agent      string
	Generation string
	Released   int
	Requeued   int
	Other      int // other actions (active_timeout backup) the pass applied
}

// Liveness reads the second liveness signal, an agent's session advisory lock
// on its name, which PostgreSQL frees the moment the agent's connection dies.
// Every keepalive it lists the agents holding work whose lock is free and
// remembers when it first saw each (lockWatch). It then runs a janitor pass
// restricted to those that stayed silent for dead_after since. Their accepted
// jobs are requeued and their resumable running jobs released (Decide with
// Owner.Dead), long before stale_job. The pass is the janitor's own (same
// candidates query, same fenced writes, SKIP LOCKED), so every agent's check
// running side by side acts on each job once.
type Liveness struct {
	jan  *Service
	cfg  LivenessConfig
	log  *slog.Logger
	dead prometheus.Counter

	mu    sync.Mutex // one check at a time owns watch
	watch *lockWatch

	loop *startstop.Loop // runs the checks from Start to Stop
}

// NewLiveness returns the liveness check of jan's agent. It does nothing
// until Start.
func NewLiveness(jan *Service, cfg LivenessConfig) *Liveness {
	cfg.setDefaults()
	l := &Liveness{
		jan:   jan,
		cfg:   cfg,
		log:   jan.log.With("service", "liveness"),
		dead:  jan.cfg.Metrics.AgentsDead,
		watch: newLockWatch(fleet.Timings{Keepalive: cfg.Keepalive, DeadAfter: cfg.DeadAfter}),
	}
	l.loop = startstop.Timer("liveness check", cfg.Keepalive, l.check)
	return l
}

// Start runs a check every keepalive, independent of clean_interval, until
// ctx ends or Stop. Errors are logged and the next check retries.
func (l *Liveness) Start(ctx context.Context) error { return l.loop.Start(ctx) }

// Stop ends the checks and waits for the one in flight.
func (l *Liveness) Stop() { l.loop.Stop() }

// check runs one check and returns when to run the next. That is a keepalive
// later, or sooner when an agent may be found dead before then.
func (l *Liveness) check(ctx context.Context) time.Duration {
	wait := l.cfg.Keepalive
	c, err := l.Check(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		l.log.Warn("liveness check", "err", err)
	case c.Pending:
		// Look again the moment an agent may be dead, not up to a
		// keepalive later.
		wait = min(wait, c.Due+dueMargin)
	}
	return wait
}

// Check runs one check. It reads which agents holding work have a free name
// lock, updates the first-free memory, and settles the jobs of those found
// dead.
func (l *Liveness) Check(ctx context.Context) (Checked, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, free, err := l.freeLocks(ctx)
	if err != nil {
		l.watch.reset()
		return Checked{}, err
	}
	dead := l.watch.observe(now, free)
	out := Checked{Now: now, Free: free, Dead: dead, Remembered: l.watch.remembered()}
	out.Due, out.Pending = l.watch.due(now)
	var acted []Acted
	if len(dead) > 0 {
		acted, err = l.settle(ctx, dead)
	}
	// Acted comes before Checked, so a test that received a check has its
	// actions.
	for _, a := range acted {
		signal(ctx, l.cfg.TestSignals.Acted, a)
	}
	signal(ctx, l.cfg.TestSignals.Checked, out)
	return out, err
}

// freeLocks lists the agents holding work whose name lock is free. With none,
// now is zero. No row carried the clock, and nothing is remembered against
// it.
func (l *Liveness) freeLocks(ctx context.Context) (time.Time, []FreeLock, error) {
	return l.jan.store.FreeNameLocks(ctx, l.jan.cfg.Holder.Name)
}

// settle runs the janitor's pass over the dead agents' jobs and logs, once
// per dead generation, what it did.
func (l *Liveness) settle(ctx context.Context, dead []DeadAgent) ([]Acted, error) {
	done, err := l.jan.batches(ctx, dead)
	byAgent := tally(dead, done)
	out := make([]Acted, 0, len(dead))
	for _, d := range dead {
		a := *byAgent[d.Name]
		out = append(out, a)
		if d.First {
			l.dead.Inc()
		}
		if d.First || a.Released+a.Requeued+a.Other > 0 {
			l.log.Info(fmt.Sprintf("agent gone: name lock free, silent %s; releasing %d resumable jobs, requeueing %d accepted",
				seconds(d.Silence), a.Released, a.Requeued),
				"dead_agent", d.Name, "generation", d.Generation, "free_since", d.FreeSince, "other_actions", a.Other)
		}
	}
	if err != nil {
		return out, fmt.Errorf("settling the jobs of agents whose name lock is free: %w", err)
	}
	return out, nil
}

// tally counts, per dead agent, the actions a pass applied to its jobs.
func tally(dead []DeadAgent, done []settled) map[string]*Acted {
	byAgent := make(map[string]*Acted, len(dead))
	for _, d := range dead {
		byAgent[d.Name] = &Acted{Agent: d.Name, Generation: d.Generation}
	}
	for _, s := range done {
		a, ok := byAgent[s.agent]
		if !ok {
			continue
		}
		switch s.kind {
		case Release:
			a.Released++
		case Requeue:
			a.Requeued++
		default:
			a.Other++
		}
	}
	return byAgent
}

// signal sends v on ch, if set, unless ctx ends first.
func signal[T any](ctx context.Context, ch chan<- T, v T) {
	if ch == nil {
		return
	}
	select {
	case ch <- v:
	case <-ctx.Done():
	}
}
