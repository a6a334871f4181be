package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// PruneAgents deletes up to limit agents rows whose last_seen is older than
// retention and that hold no active_jobs rows (queries/agents_prune.sql),
// and returns their names.
func (s *Store) PruneAgents(ctx context.Context, retention time.Duration, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, queries.Get("agents_prune"), pgx.NamedArgs{
		"retention": secs(retention), "batch": limit,
	})
	if err != nil {
		return nil, fmt.Errorf("pruning agents: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pruning agents: %w", err)
	}
	return names, nil
}
