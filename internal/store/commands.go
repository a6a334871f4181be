package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/queries"
)

// CommandStatus is one command as the agents and the queue see it.
type CommandStatus = api.CommandStatus

// CommandListParams say what ListCommands knows besides the database.
type CommandListParams struct {
	// Config maps the asking agent's configured commands to their plugins.
	Config map[string]string
	// Live names the agents that count as live (internal/fleet.Classify).
	Live []string
}

// ListCommands returns every command known to p.Config, announced by an
// agents row or with queued jobs, sorted by name.
func (s *Store) ListCommands(ctx context.Context, p CommandListParams) ([]CommandStatus, error) {
	names := make([]string, 0, len(p.Config))
	for name := range p.Config {
		names = append(names, name)
	}
	sort.Strings(names)
	plugins := make([]string, len(names))
	for i, name := range names {
		plugins[i] = p.Config[name]
	}
	rows, err := s.pool.Query(ctx, queries.Get("command_list"), pgx.NamedArgs{
		"config_names": names, "config_plugins": plugins, "live_names": nonNil(p.Live),
	})
	if err != nil {
		return nil, fmt.Errorf("listing commands: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CommandStatus, error) {
		var c CommandStatus
		err := r.Scan(&c.Name, &c.Plugin, &c.Configured, &c.Agents, &c.Draining, &c.Queued, &c.OldestQueuedSeconds, &c.Unhealthy)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing commands: %w", err)
	}
	return out, nil
}

// nonNil is names, or an empty list for nil: a NULL array matches nothing
// with ANY but reads as unknown.
func nonNil(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}
