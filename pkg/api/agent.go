package api

import (
	"encoding/json"
	"time"
)

// Agent is an agent's registration and liveness, an entry of GET
// /api/v1/agents.
type Agent struct {
	Name       string          `json:"name"`
	Generation string          `json:"generation"`
	StartedAt  time.Time       `json:"started_at"`
	LastSeen   time.Time       `json:"last_seen"`
	SilentFor  float64         `json:"silent_seconds"` // now() - last_seen, by the database clock
	State      string          `json:"state"`          // running, draining, stopped
	Version    string          `json:"version"`
	Capacity   int             `json:"capacity"`
	Commands   []string        `json:"commands"`
	Plugins    json.RawMessage `json:"plugins"`
	ActiveJobs int             `json:"active_jobs"`
	// UnhealthyPlugins maps each of its plugins whose latest health check
	// failed to that check's error. The agent claims no job of their
	// commands until they pass again.
	UnhealthyPlugins map[string]string `json:"unhealthy_plugins,omitempty"`
	// Liveness is what the fleet's rule (the one the janitor acts by) says
	// of the agent: one of the Liveness constants. Reason says why, in
	// words.
	Liveness string `json:"liveness"`
	Reason   string `json:"reason"`
	// Live says it counts among the live agents of its commands: live,
	// draining or late.
	Live bool `json:"live"`
	// DrainRequest is an operator's request that it drain (POST
	// /api/v1/agents/{name}/drain), nil when none was made. The agent
	// drains at its next heartbeat, as on SIGTERM, and its state becomes
	// draining.
	DrainRequest *DrainRequest `json:"drain_request,omitempty"`
}

// DrainRequest is who asked an agent to drain, when and why.
type DrainRequest struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// DrainAgentRequest is the body of POST /api/v1/agents/{name}/drain. By
// is who asks; with tokens the token's name is used instead.
type DrainAgentRequest struct {
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// DrainAgentResponse is the answer of POST /api/v1/agents/{name}/drain.
// Requested is false when an earlier request stands (Agent.DrainRequest
// is that one).
type DrainAgentResponse struct {
	Agent     Agent `json:"agent"`
	Requested bool  `json:"requested"`
}

// The liveness values of Agent.Liveness.
const (
	LivenessLive     = "live"     // running and heartbeating
	LivenessDraining = "draining" // draining and heartbeating: claims nothing more
	LivenessLate     = "late"     // silent past three of its keepalives, not yet stale or dead
	LivenessStale    = "stale"    // silent past stale_job: its running jobs are the janitor's
	LivenessDead     = "dead"     // its name lock was found free and it silent past dead_after
	LivenessStopped  = "stopped"  // it stopped cleanly
)

// AgentList is the answer of GET /api/v1/agents.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// CommandStatus is one command as the agents and the queue see it.
type CommandStatus struct {
	Name   string `json:"name"`
	Plugin string `json:"plugin"` // from the asking agent's config, else the command's latest job
	// Configured says the command is in the asking agent's config.
	Configured bool `json:"configured"`
	// Agents are the live agents (state running, counted live by the
	// fleet's rule: live or late) that claim the command's jobs. Draining
	// are the live ones that announce it but claim nothing more.
	Agents   []string `json:"agents"`
	Draining []string `json:"draining"`
	// Unhealthy are the live running agents that serve it but claim none
	// of its jobs, because its plugin fails its health check there
	// (Agent.UnhealthyPlugins says why).
	Unhealthy []string `json:"unhealthy"`
	// Queued counts the command's queued jobs (retries waiting for their
	// backoff or Cleanup among them).
	Queued int `json:"queued"`
	// OldestQueuedSeconds is how long the longest-waiting due queued job has
	// waited since it became claimable (its submit, or its retry's due time),
	// by the database clock. It is nil when no queued job is due.
	OldestQueuedSeconds *float64 `json:"oldest_queued_seconds"`
}

// Command is one command of GET /api/v1/commands. It says who serves it and
// what waits for it. Served is false when no live, non-draining agent claims
// it. Hint then says what to do about it.
type Command struct {
	CommandStatus
	Served bool `json:"served"`
	// Accepted says a submit of it to this agent is accepted: it is
	// configured here, or a live agent announces it.
	Accepted bool   `json:"accepted"`
	Hint     string `json:"hint,omitempty"`
}

// CommandList is the answer of GET /api/v1/commands.
type CommandList struct {
	Commands []Command `json:"commands"`
}

// Cleanup is one pending plugin Cleanup call.
type Cleanup struct {
	JobID        string     `json:"job_id"`
	Plugin       string     `json:"plugin"`
	Command      string     `json:"command"`
	Reason       string     `json:"reason"`
	Attempts     int        `json:"attempts"`
	NextAt       time.Time  `json:"next_at"`
	LastError    string     `json:"last_error,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	ClaimedBy    string     `json:"claimed_by,omitempty"`
	ClaimedUntil *time.Time `json:"claimed_until,omitempty"`
}

// CleanupList is the answer of GET /api/v1/cleanups. It lists the plugin
// Cleanup calls still pending, so one that keeps failing stays visible. Next
// is the cursor of the next page (pass it as ?after=), "" on the last page.
type CleanupList struct {
	Cleanups []Cleanup `json:"cleanups"`
	Next     string    `json:"next"`
}
