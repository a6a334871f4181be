package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/queries"
)

// ErrAgentStopped is RequestDrain's answer for an agent that stopped: there
// is nothing to drain.
var ErrAgentStopped = errors.New("agent stopped")

// RequestDrain asks agent name to drain, recording who asked and why. The
// agent reads it back with its next heartbeat and drains as on SIGTERM. It
// reports whether this call made the request (false: one was made before,
// and its time, who and why are kept). ErrNotFound: no such agent;
// ErrAgentStopped: it stopped.
func (s *Store) RequestDrain(ctx context.Context, name, by, reason string) (bool, error) {
	st := queries.Named("agent_drain_request")
	var state string
	var made bool
	err := s.pool.QueryRow(ctx, st.SQL, st.Args(map[string]any{"name": name, "by": by, "reason": reason})...).Scan(&state, &made)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, ErrNotFound
	case err != nil:
		return false, fmt.Errorf("requesting a drain of agent %s: %w", name, err)
	case state == "stopped":
		return false, ErrAgentStopped
	}
	return made, nil
}

// drainScan reads an agents row's drain request columns.
type drainScan struct {
	at         *time.Time
	by, reason string
}

func (d *drainScan) targets() []any { return []any{&d.at, &d.by, &d.reason} }

// request is the drain request read, nil when none was made.
func (d *drainScan) request() *api.DrainRequest {
	if d.at == nil {
		return nil
	}
	return &api.DrainRequest{At: *d.at, By: d.by, Reason: d.reason}
}
