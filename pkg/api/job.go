package api

import (
	"encoding/json"
	"time"
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
	Limits *LimitsOverride `json:"limits,omitempty"`
}

// Job is a job as submitters see it: the answer of a submit, a cancel and
// each entry of a job list.
type Job struct {
	ID             string          `json:"id"`
	Command        string          `json:"command"`
	Plugin         string          `json:"plugin"`
	Status         JobStatus       `json:"status"`
	Context        json.RawMessage `json:"context"`
	Attempt        int             `json:"attempt"`
	Error          string          `json:"error,omitempty"`
	ErrorClass     ErrorClass      `json:"error_class,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Submitter      string          `json:"submitter,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	Agent          string          `json:"agent,omitempty"` // current holder, if any
	Lease          int64           `json:"lease,omitempty"`
	// Limits are the levers stamped on the job at submit.
	Limits Limits `json:"limits"`
	// AttemptStartedAt is when the plugin was first called for this attempt
	// (active_timeout counts from it).
	AttemptStartedAt *time.Time `json:"attempt_started_at,omitempty"`
	// ExpiresAt is when retention deletes the finished job. nil means kept.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// RunAfter is when a queued retry becomes due, while it is in the future.
	RunAfter *time.Time `json:"run_after,omitempty"`
	// WaitingForCleanup says the next attempt waits for the last one's
	// Cleanup.
	WaitingForCleanup bool `json:"waiting_for_cleanup,omitempty"`
}

// JobDetail is the answer of GET /api/v1/jobs/{id}: the job with the remote
// resources its plugin reported. Lists leave the resources out.
type JobDetail struct {
	Job
	Resources []Resource `json:"resources,omitempty"`
}

// Resource is one remote thing a plugin reported for an attempt of a job
// (an ECS task, a log stream, a Spark application).
type Resource struct {
	Attempt int    `json:"attempt"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Label   string `json:"label,omitempty"`
	URL     string `json:"url,omitempty"`
	Command string `json:"command,omitempty"`
}

// JobList is the answer of GET /api/v1/jobs. Next is the cursor of the next
// page (pass it as ?after=), "" on the last page.
type JobList struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next"`
}

// The page sizes of the job and cleanup lists: ?limit= is from 1 to
// MaxListLimit, DefaultListLimit when absent.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// CancelRequest is the optional body of POST /api/v1/jobs/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
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
	Job Job `json:"job"`
	// Replayed means this is the stored answer of an earlier identical request.
	Replayed bool `json:"replayed"`
}
