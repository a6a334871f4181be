package janitor

import (
	"context"

	"github.com/tetherjobs/tether/internal/defaults"
)

// DefaultAgentRetention is how long the agents row of an agent that stopped
// or went silent is kept (Config.AgentRetention), so `tether agents` still
// shows it for a day. Once it holds no job it is deleted.
const DefaultAgentRetention = defaults.AgentRetention

// agentPruneBatch bounds the rows one prune deletes. A pass runs one.
const agentPruneBatch = 100

// PruneAgents deletes up to agentPruneBatch agents rows whose last_seen is
// older than AgentRetention (stopped or silent that long) and that hold no
// active_jobs rows, and returns their names. It runs once per Pass.
func (s *Service) PruneAgents(ctx context.Context) ([]string, error) {
	names, err := s.store.PruneAgents(ctx, s.cfg.AgentRetention, agentPruneBatch)
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		s.log.Info("pruned agents gone longer than the retention", "agents", len(names), "retention", s.cfg.AgentRetention)
	}
	return names, nil
}
