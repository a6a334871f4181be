package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// FreeLock is one agent holding work whose name lock the liveness check saw
// free, as of that check.
type FreeLock struct {
	Name       string
	Generation string
	LastSeen   time.Time // its agents row's last_seen (database clock)
	// Timings are its announced keepalive and dead_after (zero: not
	// announced). A checker judges it by the larger of its own and these.
	Timings Timings
}

// FreeNameLocks lists the agents other than selfName that hold work and whose
// name lock is free (queries/agents_lock_free.sql), with the database clock's
// now. now is zero when the list is empty, because no row carried the clock.
func (s *Store) FreeNameLocks(ctx context.Context, selfName string) (time.Time, []FreeLock, error) {
	// JIT is off, because every agent runs it every keepalive (QueryHot).
	st := queries.Named("agents_lock_free")
	rows, err := QueryHot(ctx, s.pool, st.SQL, st.Args(map[string]any{"self_name": selfName})...)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("listing agents whose name lock is free: %w", err)
	}
	var now time.Time
	free, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FreeLock, error) {
		var f FreeLock
		var keepalive, deadAfter float64
		err := r.Scan(&f.Name, &f.Generation, &f.LastSeen, &keepalive, &deadAfter, &now)
		f.Timings = Timings{Keepalive: secondsDuration(keepalive), DeadAfter: secondsDuration(deadAfter)}
		return f, err
	})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("listing agents whose name lock is free: %w", err)
	}
	if len(free) == 0 {
		now = time.Time{}
	}
	return now, free, nil
}
