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
	"github.com/tetherjobs/tether/internal/store"
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
	defaults.Fill(&c.Keepalive, defaults.Keepalive)
	defaults.Fill(&c.DeadAfter, deadAfterKeepalives*c.Keepalive)
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
	// Turn says this agent took the fleet's turn and checked. Without it
	// another agent checked this keepalive, and the rest is zero.
	Turn       bool
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
// One agent of the fleet checks per keepalive: every agent tries to take the
// fleet's turn (liveness_turn.sql) every keepalive of its own, and the first
// whose keepalive has passed since the last check lists the agents whose lock
// is free, updates the first-free memory stored in their agents rows
// (lockWatch), and stores it again. It then runs a janitor pass restricted to
// those that stayed silent for dead_after since (each judged by the larger of
// the checker's and its own, fleet.Judge). Their accepted jobs are requeued
// and their resumable running jobs released (Decide with Owner.Dead), long
// before stale_job. The pass is the janitor's own (same candidates query,
// same fenced writes, SKIP LOCKED), so two checks that overlap act on each
// job once.
type Liveness struct {
	jan  *Service
	cfg  LivenessConfig
	log  *slog.Logger
	dead prometheus.Counter

	mu sync.Mutex // one check at a time

	loop *startstop.Loop // runs the checks from Start to Stop

	// afterTurn, if set (tests), runs inside a check's transaction once it
	// took the turn: a test freezes the check there.
	afterTurn func(ctx context.Context)
}

// NewLiveness returns the liveness check of jan's agent. It does nothing
// until Start.
func NewLiveness(jan *Service, cfg LivenessConfig) *Liveness {
	cfg.setDefaults()
	l := &Liveness{
		jan:  jan,
		cfg:  cfg,
		log:  jan.log.With("service", "liveness"),
		dead: jan.cfg.Metrics.AgentsDead,
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

// turnPeriod is how old the last check must be for this agent to take the
// turn: its keepalive, less a fifth so that its own timer's jitter does not
// hand the turn on every other keepalive.
func (c LivenessConfig) turnPeriod() time.Duration { return c.Keepalive - c.Keepalive/5 }

// idleBound is how long the check's transaction may idle between its
// statements (each takes well under a millisecond): a keepalive, at least
// a second, so one GC pause does not end it and a frozen agent holds the
// fleet's turn for no longer than that.
func (l *Liveness) idleBound() time.Duration { return max(l.cfg.Keepalive, time.Second) }

// Check runs one check, if this agent takes the fleet's turn. It reads which
// agents have a free name lock, updates the stored first-free memory, and
// settles the jobs of those found dead.
func (l *Liveness) Check(ctx context.Context) (Checked, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out Checked
	err := l.jan.store.InLivenessTx(ctx, l.idleBound(), func(tx store.LivenessTx) error {
		out = Checked{}
		self := l.jan.cfg.Holder.Name
		turn, ok, err := tx.TakeTurn(ctx, self, l.cfg.turnPeriod())
		if err != nil || !ok {
			return err
		}
		if l.afterTurn != nil {
			l.afterTurn(ctx)
		}
		free, err := tx.FreeNameLocks(ctx, self)
		if err != nil {
			return err
		}
		w := newLockWatch(fleet.Timings{Keepalive: l.cfg.Keepalive, DeadAfter: l.cfg.DeadAfter})
		if !forgets(turn, l.cfg.Keepalive) {
			w.recall(free)
		}
		out = Checked{Turn: true, Now: turn.Now, Free: free}
		out.Dead = w.observe(turn.Now, free)
		out.Remembered = w.remembered()
		out.Due, out.Pending = w.due(turn.Now)
		var dueAt time.Time
		if out.Pending {
			dueAt = turn.Now.Add(out.Due)
		}
		return tx.Remember(ctx, w.memory(), dueAt)
	})
	if err != nil {
		return Checked{}, fmt.Errorf("liveness check: %w", err)
	}
	acted, err := l.settle(ctx, out.Dead, holdingWork(out.Dead, out.Free))
	// Acted comes before Checked, so a test that received a check has its
	// actions.
	for _, a := range acted {
		signal(ctx, l.cfg.TestSignals.Acted, a)
	}
	signal(ctx, l.cfg.TestSignals.Checked, out)
	return out, err
}

// holdingWork is those of dead that hold work, by the check's free list.
func holdingWork(dead []DeadAgent, free []FreeLock) []DeadAgent {
	work := make(map[agentKey]bool, len(free))
	for _, f := range free {
		work[agentKey{f.Name, f.Generation}] = f.HasWork
	}
	var out []DeadAgent
	for _, d := range dead {
		if work[agentKey{d.Name, d.Generation}] {
			out = append(out, d)
		}
	}
	return out
}

// settle runs the janitor's pass over the jobs of the dead agents that hold
// work and logs, once per dead generation, what it did.
func (l *Liveness) settle(ctx context.Context, dead, withWork []DeadAgent) ([]Acted, error) {
	var done []settled
	var err error
	if len(withWork) > 0 {
		done, err = l.jan.batches(ctx, withWork)
	}
	byAgent := tally(withWork, done)
	var out []Acted
	for _, d := range dead {
		if d.First {
			l.dead.Inc()
		}
		a, ok := byAgent[d.Name]
		if !ok {
			if d.First {
				l.log.Info(fmt.Sprintf("agent gone: name lock free, silent %s; it holds no jobs", seconds(d.Silence)),
					"dead_agent", d.Name, "generation", d.Generation, "free_since", d.FreeSince)
			}
			continue
		}
		out = append(out, *a)
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
