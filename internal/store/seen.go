package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// AgentSeen is one agents row as internal/fleet.Classify judges it.
type AgentSeen struct {
	Name      string
	State     string
	Commands  []string
	LastSeen  time.Time
	SilentFor time.Duration // now() - last_seen, database clock
	Timings   Timings       // announced; zero: not announced
	// LockFreeSince and FoundDead are the liveness check's memory of its
	// name lock (zero, false: held at the last check, or never checked).
	LockFreeSince time.Time
	FoundDead     bool
}

// AgentsSeen reads every agents row as the fleet's liveness rule judges it
// (queries/agents_seen.sql), with JIT off: every agent's janitor pass reads
// it for the gauges (QueryHot).
func AgentsSeen(ctx context.Context, db Batcher) ([]AgentSeen, error) {
	rows, err := QueryHot(ctx, db, queries.Get("agents_seen"))
	if err != nil {
		return nil, fmt.Errorf("reading the agents rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AgentSeen, error) {
		var a AgentSeen
		var silent float64
		t := seenScan{a: &a}
		err := r.Scan(append([]any{&a.Name, &a.State, &a.Commands, &a.LastSeen, &silent}, t.targets()...)...)
		a.SilentFor = secondsDuration(silent)
		t.done()
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the agents rows: %w", err)
	}
	return out, nil
}

// seenScan scans the columns agents_seen.sql and agent_list.sql end with:
// the announced timings and the name lock's memory.
type seenScan struct {
	a                              *AgentSeen
	keepalive, deadAfter, staleJob float64
	since                          *time.Time
}

func (s *seenScan) targets() []any {
	return []any{&s.keepalive, &s.deadAfter, &s.staleJob, &s.since, &s.a.FoundDead}
}

func (s *seenScan) done() {
	s.a.Timings = Timings{Keepalive: secondsDuration(s.keepalive), DeadAfter: secondsDuration(s.deadAfter),
		StaleJob: secondsDuration(s.staleJob)}
	if s.since != nil {
		s.a.LockFreeSince = *s.since
	}
}
