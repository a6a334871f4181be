package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// FreeLock is one agent not stopped whose name lock the liveness check saw
// free, as of that check, with the fleet's first-free memory of it.
type FreeLock struct {
	Name       string
	Generation string
	LastSeen   time.Time // its agents row's last_seen (database clock)
	// Timings are its announced keepalive and dead_after (zero: not
	// announced). A checker judges it by the larger of its own and these.
	Timings Timings
	// FreeSince and FoundDead are what the previous check stored
	// (agents.lock_free_since, lock_found_dead). FreeSince is zero when none
	// was.
	FreeSince time.Time
	FoundDead bool
	// HasWork says it holds an active_jobs row under this generation.
	HasWork bool
}

// LockMemory is the first-free memory of one agent generation, as a check
// stores it.
type LockMemory struct {
	Name       string
	Generation string
	FreeSince  time.Time
	FoundDead  bool
}

// LivenessTurn is the fleet's liveness turn, as the agent that took it
// found it.
type LivenessTurn struct {
	Now         time.Time // the check's database clock
	PrevChecked time.Time // when the previous check ran (zero: never)
	// ServerChanged says the server restarted (or a standby took over)
	// since the previous check.
	ServerChanged bool
}

// LivenessTx is one liveness check's transaction. It holds the fleet's
// turn until it commits.
type LivenessTx struct{ tx pgx.Tx }

// InLivenessTx runs fn in one transaction, committed when fn returns nil.
// It is opened as every store transaction is (queries/tx_begin.sql): no
// JIT, and idle as the bound on idling between its statements. The check holds
// the fleet's liveness turn and writes agents rows, so an agent frozen
// inside it (SIGSTOP, a paused VM) would otherwise stop every agent's
// liveness checks, and the heartbeats that update those rows, until it
// woke.
func (s *Store) InLivenessTx(ctx context.Context, idle time.Duration, fn func(LivenessTx) error) error {
	return s.inTxIdle(ctx, idle, func(tx pgx.Tx) error { return fn(LivenessTx{tx: tx}) })
}

// TakeTurn takes the fleet's liveness turn when the last check is at least
// period old or an agent may be found dead now (queries/liveness_turn.sql).
// false means another agent checks this keepalive.
func (t LivenessTx) TakeTurn(ctx context.Context, selfName string, period time.Duration) (LivenessTurn, bool, error) {
	st := queries.Named("liveness_turn")
	row := t.tx.QueryRow(ctx, st.SQL, st.Args(map[string]any{"self_name": selfName, "period": period.Seconds()})...)
	now, prev, changed, took, err := scanTurn(row)
	if err != nil {
		return LivenessTurn{}, false, fmt.Errorf("taking the liveness turn: %w", err)
	}
	return LivenessTurn{Now: now, PrevChecked: prev, ServerChanged: changed}, took, nil
}

// FreeNameLocks lists the agents not stopped, other than selfName, whose
// name lock is free (queries/agents_lock_free.sql), with their stored
// first-free memory. JIT is off: one agent of the fleet runs it every
// keepalive (QueryHot).
func (t LivenessTx) FreeNameLocks(ctx context.Context, selfName string) ([]FreeLock, error) {
	st := queries.Named("agents_lock_free")
	rows, err := QueryHot(ctx, t.tx, st.SQL, st.Args(map[string]any{"self_name": selfName})...)
	if err != nil {
		return nil, fmt.Errorf("listing agents whose name lock is free: %w", err)
	}
	free, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FreeLock, error) {
		var f FreeLock
		var keepalive, deadAfter float64
		var since *time.Time
		err := r.Scan(&f.Name, &f.Generation, &f.LastSeen, &keepalive, &deadAfter, &since, &f.FoundDead, &f.HasWork)
		f.Timings = Timings{Keepalive: secondsDuration(keepalive), DeadAfter: secondsDuration(deadAfter)}
		if since != nil {
			f.FreeSince = *since
		}
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing agents whose name lock is free: %w", err)
	}
	return free, nil
}

// Remember stores the first-free memory (queries/agents_lock_memory.sql):
// mem for the agents in it, none for every other, and when the next check
// may find an agent dead (zero: none pending).
func (t LivenessTx) Remember(ctx context.Context, mem []LockMemory, due time.Time) error {
	names, gens, since, dead := []string{}, []string{}, []time.Time{}, []bool{}
	for _, m := range mem {
		names, gens = append(names, m.Name), append(gens, m.Generation)
		since, dead = append(since, m.FreeSince), append(dead, m.FoundDead)
	}
	var dueAt *time.Time
	if !due.IsZero() {
		dueAt = &due
	}
	st := queries.Named("agents_lock_memory")
	var kept, cleared int
	err := t.tx.QueryRow(ctx, st.SQL, st.Args(map[string]any{
		"names": names, "generations": gens, "since": since, "dead": dead, "due_at": dueAt,
	})...).Scan(&kept, &cleared)
	if err != nil {
		return fmt.Errorf("storing the liveness check's memory: %w", err)
	}
	return nil
}
