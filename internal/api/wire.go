package api

import (
	"encoding/json"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
)

// SubmitRequest is the body of POST /api/v1/jobs.
type SubmitRequest struct {
	Command string `json:"command"`
	// Context is a JSON object given to the plugin. Absent or null means {}.
	Context        json.RawMessage `json:"context,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Submitter is recorded only when auth is off. With auth the token's
	// name is the submitter.
	Submitter string `json:"submitter,omitempty"`
	// Limits override the command's lifecycle levers for this job, each
	// within the command's maximum (limits.max) where one is set.
	Limits *limits.Override `json:"limits,omitempty"`
}

// RequeueRequest is the body of POST /api/v1/jobs/{id}/requeue.
type RequeueRequest struct {
	Reason string `json:"reason"` // required
	// Key makes the request idempotent. The same request with the same key
	// replays the first answer. Another request with it is a conflict.
	Key string `json:"key,omitempty"`
	// Submitter names who asked when auth is off. With auth the token's
	// name does.
	Submitter string `json:"submitter,omitempty"`
}

// RequeueResponse is the answer of POST /api/v1/jobs/{id}/requeue.
type RequeueResponse struct {
	Job store.Job `json:"job"`
	// Replayed means this is the stored answer of an earlier identical request.
	Replayed bool `json:"replayed"`
}

// CancelRequest is the optional body of POST /api/v1/jobs/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// JobList is the answer of GET /api/v1/jobs. Next is the cursor of the next
// page (pass it as ?after=), "" on the last page.
type JobList struct {
	Jobs []store.Job `json:"jobs"`
	Next string      `json:"next"`
}

// EventList is the answer of GET /api/v1/jobs/{id}/events.
type EventList struct {
	Events []store.Event `json:"events"`
}

// AgentList is the answer of GET /api/v1/agents.
type AgentList struct {
	Agents []store.Agent `json:"agents"`
}

// CommandList is the answer of GET /api/v1/commands.
type CommandList struct {
	Commands []Command `json:"commands"`
}

// Command is one command. It says who serves it and what waits for it.
// Served is false when no live, non-draining agent claims it. Hint then says
// what to do about it.
type Command struct {
	store.CommandStatus
	Served bool `json:"served"`
	// Accepted says a submit of it to this agent is accepted: it is
	// configured here, or a live agent announces it.
	Accepted bool   `json:"accepted"`
	Hint     string `json:"hint,omitempty"`
}

// Status is the answer of /healthz and /readyz.
type Status struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Warnings (readyz) are conditions that do not make this agent unready
	// but leave work undone, such as a command no live agent serves.
	Warnings []string `json:"warnings,omitempty"`
	// MigrationLock (readyz, status "migrating") is the session holding
	// the schema migration lock this agent waits for, when it can tell.
	MigrationLock *MigrationLock `json:"migration_lock,omitempty"`
}

// MigrationLock is who holds the schema migration lock, as the database's
// pg_locks and pg_stat_activity say (empty where it hides another role's
// session).
type MigrationLock struct {
	PID             int     `json:"pid"`
	ApplicationName string  `json:"application_name,omitempty"`
	ClientAddr      string  `json:"client_addr,omitempty"`
	HeldSeconds     float64 `json:"held_seconds"`
}

// Error is the body of every error answer. Field names the offending request
// field or query parameter, if any. Code is a stable machine-readable kind.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Code  string `json:"code,omitempty"`
	// Status is the job's current status, for invalid_transition.
	Status jobstate.JobStatus `json:"status,omitempty"`
}

// Error codes.
const (
	CodeBadRequest          = "bad_request"
	CodeUnknownCommand      = "unknown_command"
	CodeBodyTooLarge        = "body_too_large"
	CodeUnauthorized        = "unauthorized"
	CodeNotFound            = "not_found"
	CodeIdempotencyConflict = "idempotency_conflict"
	CodeInvalidTransition   = "invalid_transition"
	CodeNotReady            = "not_ready"
	// CodeMethodNotAllowed means the route exists without this method (405,
	// with Allow).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeUnsupportedMediaType is for a state-changing request without
	// Content-Type: application/json (415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeForbiddenOrigin is for a state-changing request from a web page of
	// another site, or Origin: null (403).
	CodeForbiddenOrigin = "forbidden_origin"
	// CodeForbiddenHost is for a Host the agent does not answer to (421).
	CodeForbiddenHost = "forbidden_host"
	CodeInternal      = "internal"
)
