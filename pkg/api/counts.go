package api

import "time"

// StatusCount is how many jobs have one status. AtLeast means the count
// stopped at the answer's cap: there are at least Count.
type StatusCount struct {
	Status  JobStatus `json:"status"`
	Count   int       `json:"count"`
	AtLeast bool      `json:"at_least,omitempty"`
}

// JobCounts is the answer of GET /api/v1/jobs/counts: the jobs matching the
// filters per status, every status in lifecycle order, and their total.
type JobCounts struct {
	Counts       []StatusCount `json:"counts"`
	Total        int           `json:"total"`
	TotalAtLeast bool          `json:"total_at_least,omitempty"`
	// Cap is how far each part is counted (see docs/api.md).
	Cap int `json:"cap"`
}

// Attempt is one holding of a job by an agent under one lease, as its
// events tell it: an attempt resumed by another agent has one entry per
// holder. The answer of GET /api/v1/jobs/{id}/attempts lists them in order.
type Attempt struct {
	Attempt int        `json:"attempt"`
	Agent   string     `json:"agent,omitempty"`
	Lease   int64      `json:"lease,omitempty"`
	Start   time.Time  `json:"started_at"`
	End     *time.Time `json:"ended_at,omitempty"` // nil while it holds
	// Seconds from start to end; 0 while it holds.
	Seconds float64 `json:"duration_seconds"`
	// Outcome is the kind of the event that ended it (succeeded, failed,
	// canceled, retry_scheduled, released, lease_lost, requeued),
	// "taken_over" when another agent claimed the job with no such event
	// first, or "holding" while it holds.
	Outcome string `json:"outcome"`
	// Error is that event's message when it says why the holding ended
	// badly (a failure, a scheduled retry, a release, a lost lease).
	Error string `json:"error,omitempty"`
}

// AttemptList is the answer of GET /api/v1/jobs/{id}/attempts.
type AttemptList struct {
	Attempts []Attempt `json:"attempts"`
}
