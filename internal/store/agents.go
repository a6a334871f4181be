package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// Holder identifies the agent process that holds leases.
type Holder struct {
	Name       string
	Generation string
}

// Registration is what an agent announces at start.
type Registration struct {
	Holder
	Version  string
	Capacity int
	Commands []string
	Plugins  json.RawMessage // plugin name -> {"version", "capabilities"}
}

// columns returns the commands and plugins as the agents row stores them:
// empty, never NULL.
func (r Registration) columns() ([]string, json.RawMessage) {
	commands, plugins := r.Commands, r.Plugins
	if commands == nil {
		commands = []string{}
	}
	if len(plugins) == 0 {
		plugins = json.RawMessage(`{}`)
	}
	return commands, plugins
}

// RegisterAgent records this process under its name with its generation and
// returns the generation the name had before ("" if new).
func (s *Store) RegisterAgent(ctx context.Context, r Registration) (string, error) {
	commands, plugins := r.columns()
	var prev string
	err := s.pool.QueryRow(ctx, queries.Get("agent_register"),
		r.Name, r.Generation, r.Version, r.Capacity, commands, plugins).Scan(&prev)
	if err != nil {
		return "", fmt.Errorf("registering agent %s: %w", r.Name, err)
	}
	return prev, nil
}

// RegisterAgain records this process again under its name and generation
// after its agents row was deleted (by an operator, or agent retention while
// the process was silent), in state (running or draining). It never replaces
// a row. false means the name has one again (another process registered under
// it meanwhile, which wins), and the next heartbeat says whose.
func (s *Store) RegisterAgain(ctx context.Context, r Registration, state string) (bool, error) {
	commands, plugins := r.columns()
	st := queries.Named("agent_reregister")
	var name string
	err := s.pool.QueryRow(ctx, st.SQL, st.Args(map[string]any{
		"name": r.Name, "generation": r.Generation, "version": r.Version, "capacity": r.Capacity,
		"commands": commands, "plugins": plugins, "state": state,
	})...).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registering agent %s again: %w", r.Name, err)
	}
	return true, nil
}

// SetAgentState records running, draining or stopped for this process.
func (s *Store) SetAgentState(ctx context.Context, h Holder, state string) error {
	if _, err := s.pool.Exec(ctx, queries.Get("agent_set_state"), h.Name, h.Generation, state); err != nil {
		return fmt.Errorf("setting agent %s state %s: %w", h.Name, state, err)
	}
	return nil
}
