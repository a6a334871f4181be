package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/limits"
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
	// CommandSpecs is, per command it serves, what a submit of it needs.
	// Other agents accept submits for these commands by it.
	CommandSpecs map[string]CommandSpec
	// Timings are the agent's own. Other agents judge it by them.
	Timings Timings
}

// CommandSpec is what an agent announces of a command it serves: its
// plugin, and the levers a job of it is resolved with (the agent's
// defaults, the command's limits and their maximum, as config.Command's
// ResolveLimits takes them).
type CommandSpec struct {
	Plugin   string         `json:"plugin"`
	Defaults limits.Set     `json:"defaults"`
	Limits   limits.Partial `json:"limits"`
	Max      limits.Partial `json:"max"`
}

// Timings are the intervals by which the rest of the fleet judges an agent
// (schema v15). A zero one is not announced, and checkers use their own.
type Timings struct {
	Keepalive      time.Duration
	DeadAfter      time.Duration
	StaleJob       time.Duration
	SelfFenceAfter time.Duration
}

// args returns the registration as agent_register.sql and
// agent_reregister.sql take it. Lists are empty, never NULL. Timings are
// seconds, NULL when unset.
func (r Registration) args() (map[string]any, error) {
	commands, plugins, specs := nonNilSlice(r.Commands), r.Plugins, r.CommandSpecs
	if len(plugins) == 0 {
		plugins = json.RawMessage(`{}`)
	}
	if specs == nil {
		specs = map[string]CommandSpec{}
	}
	// As JSON text, not a map: through a pooler (default_query_exec_mode
	// exec or simple_protocol) pgx does not know the parameter is jsonb and
	// has no text encoding for a map.
	specsJSON, err := json.Marshal(specs)
	if err != nil {
		return nil, fmt.Errorf("encoding the command specs: %w", err)
	}
	return map[string]any{
		"name": r.Name, "generation": r.Generation, "version": r.Version, "capacity": r.Capacity,
		"commands": commands, "plugins": plugins, "command_specs": string(specsJSON),
		"keepalive": optSecs(r.Timings.Keepalive), "dead_after": optSecs(r.Timings.DeadAfter),
		"stale_job": optSecs(r.Timings.StaleJob), "self_fence_after": optSecs(r.Timings.SelfFenceAfter),
	}, nil
}

// optSecs is d in seconds, or nil (SQL NULL) when d is not positive.
func optSecs(d time.Duration) *float64 {
	if d <= 0 {
		return nil
	}
	v := d.Seconds()
	return &v
}

// RegisterAgent records this process under its name with its generation and
// returns the generation the name had before ("" if new).
func (s *Store) RegisterAgent(ctx context.Context, r Registration) (string, error) {
	st := queries.Named("agent_register")
	args, err := r.args()
	if err != nil {
		return "", fmt.Errorf("registering agent %s: %w", r.Name, err)
	}
	var prev string
	if err := s.pool.QueryRow(ctx, st.SQL, st.Args(args)...).Scan(&prev); err != nil {
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
	st := queries.Named("agent_reregister")
	args, err := r.args()
	if err != nil {
		return false, fmt.Errorf("registering agent %s again: %w", r.Name, err)
	}
	args["state"] = state
	var name string
	err = s.pool.QueryRow(ctx, st.SQL, st.Args(args)...).Scan(&name)
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

// SetUnhealthyPlugins announces which of the agent's plugins fail their
// health check (plugin name -> the check's error; empty: all healthy).
func (s *Store) SetUnhealthyPlugins(ctx context.Context, h Holder, unhealthy map[string]string) error {
	if unhealthy == nil {
		unhealthy = map[string]string{}
	}
	raw, err := json.Marshal(unhealthy)
	if err != nil {
		return fmt.Errorf("encoding the unhealthy plugins: %w", err)
	}
	st := queries.Named("agent_health_set")
	if _, err := s.pool.Exec(ctx, st.SQL, st.Args(map[string]any{"name": h.Name, "generation": h.Generation, "unhealthy": string(raw)})...); err != nil {
		return fmt.Errorf("announcing the plugin health of agent %s: %w", h.Name, err)
	}
	return nil
}

// ResolveLimits returns what a job submitted under this spec runs under,
// exactly as config.Command's ResolveLimits does on the announcing agent:
// its defaults, then the command's limits, then the override, each lever of
// which must be within the command's maximum.
func (c CommandSpec) ResolveLimits(override limits.Partial) (limits.Set, []*limits.FieldError) {
	return limits.Resolve(c.Defaults, c.Limits, c.Max, override)
}

// AnnouncedCommand is a command live agents announce in their command
// specs.
type AnnouncedCommand struct {
	// Spec is what a submit of it resolves with, Agent's: see
	// queries/command_specs_live.sql for which agent's when they differ.
	Spec  CommandSpec
	Agent string
	// Agents are all the live agents announcing it, by name.
	Agents []string
}

// LiveCommandSpecs returns, by command, what the agents seen within
// liveWithin (state running or draining) announce of the commands they
// serve. Agents older than schema v15 announce none.
func (s *Store) LiveCommandSpecs(ctx context.Context, liveWithin time.Duration) (map[string]AnnouncedCommand, error) {
	st := queries.Named("command_specs_live")
	rows, err := s.pool.Query(ctx, st.SQL, st.Args(map[string]any{"live_s": liveWithin.Seconds()})...)
	if err != nil {
		return nil, fmt.Errorf("reading the command specs live agents announce: %w", err)
	}
	out := map[string]AnnouncedCommand{}
	var (
		command string
		a       AnnouncedCommand
	)
	_, err = pgx.ForEachRow(rows, []any{&command, &a.Spec, &a.Agent, &a.Agents}, func() error {
		out[command] = a
		a = AnnouncedCommand{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the command specs live agents announce: %w", err)
	}
	return out, nil
}
