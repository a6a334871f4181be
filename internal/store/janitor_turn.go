package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tetherjobs/tether/queries"
)

// JanitorTurn is a janitor turn taken (queries/janitor_turn_take.sql).
type JanitorTurn struct {
	Now        time.Time // the database clock
	PrevPassed time.Time // when the previous pass began; zero: never
	// ServerChanged says the server restarted, or another took over, since
	// the previous pass.
	ServerChanged bool
}

// TakeJanitorTurn takes the fleet's janitor turn when the last pass began at
// least period ago. false means another agent passes this interval.
func (s *Store) TakeJanitorTurn(ctx context.Context, selfName string, period time.Duration) (JanitorTurn, bool, error) {
	st := queries.Named("janitor_turn_take")
	row := s.pool.QueryRow(ctx, st.SQL, st.Args(map[string]any{"self_name": selfName, "period": period.Seconds()})...)
	now, prev, changed, took, err := scanTurn(row)
	if err != nil {
		return JanitorTurn{}, false, fmt.Errorf("taking the janitor turn: %w", err)
	}
	return JanitorTurn{Now: now, PrevPassed: prev, ServerChanged: changed}, took, nil
}

// scanTurn reads what a turn statement (liveness_turn.sql,
// janitor_turn_take.sql) returns: the database clock, the previous turn's
// time (zero: never) and whether the server changed since. took is false
// when another agent has the turn (no row).
func scanTurn(row pgx.Row) (now, prev time.Time, changed, took bool, err error) {
	var p pgtype.Timestamptz
	err = row.Scan(&now, &p, &changed)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, time.Time{}, false, false, nil
	}
	if err != nil {
		return time.Time{}, time.Time{}, false, false, err
	}
	if p.Valid && p.InfinityModifier == pgtype.Finite {
		prev = p.Time
	}
	return now, prev, changed, true, nil
}

// PublishClusterStats stores the cluster gauges a turn's pass measured, as
// JSON, for every agent to export.
func (s *Store) PublishClusterStats(ctx context.Context, stats any) error {
	raw, err := json.Marshal(stats)
	if err != nil {
		return fmt.Errorf("encoding the cluster gauges: %w", err)
	}
	st := queries.Named("janitor_stats_publish")
	if _, err := s.pool.Exec(ctx, st.SQL, st.Args(map[string]any{"stats": string(raw)})...); err != nil {
		return fmt.Errorf("publishing the cluster gauges: %w", err)
	}
	return nil
}

// ClusterStats reads the cluster gauges the last turn's pass published into
// into, and returns their age. ok is false when none was published yet.
func (s *Store) ClusterStats(ctx context.Context, into any) (age time.Duration, ok bool, err error) {
	st := queries.Named("janitor_stats_read")
	var raw []byte
	var secs *float64
	if err := s.pool.QueryRow(ctx, st.SQL).Scan(&raw, &secs); err != nil {
		return 0, false, fmt.Errorf("reading the cluster gauges: %w", err)
	}
	if raw == nil || secs == nil {
		return 0, false, nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return 0, false, fmt.Errorf("decoding the cluster gauges: %w", err)
	}
	return secondsDuration(*secs), true, nil
}
