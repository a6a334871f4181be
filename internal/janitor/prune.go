package janitor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/queries"
)

// DefaultAgentRetention is how long the agents row of an agent that stopped
// or went silent is kept (Config.AgentRetention), so `tether agents` still
// shows it for a day; once it holds no job it is deleted.
const DefaultAgentRetention = defaults.AgentRetention

// agentPruneBatch bounds the rows one prune deletes; a pass runs one.
const agentPruneBatch = 100

// PruneAgents deletes up to agentPruneBatch agents rows whose last_seen is
// older than AgentRetention (stopped or silent that long) and that hold no
// active_jobs rows, and returns their names. It runs once per Pass.
func (s *Service) PruneAgents(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, queries.Get("agents_prune"), pgx.NamedArgs{
		"retention": secs(s.cfg.AgentRetention), "batch": agentPruneBatch,
	})
	if err != nil {
		return nil, fmt.Errorf("pruning agents: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pruning agents: %w", err)
	}
	if len(names) > 0 {
		s.log.Info("pruned agents gone longer than the retention", "agents", len(names), "retention", s.cfg.AgentRetention)
	}
	return names, nil
}
