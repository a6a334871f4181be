package api

// Error is the body of every error answer. Field names the offending request
// field or query parameter, if any. Code is a stable machine-readable kind.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Code  string `json:"code,omitempty"`
	// Status is the job's current status, for invalid_transition.
	Status JobStatus `json:"status,omitempty"`
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
	// CodeDatabaseUnavailable is for a request the agent could not serve
	// because the database could not be reached (503, with Retry-After).
	CodeDatabaseUnavailable = "database_unavailable"
)

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
