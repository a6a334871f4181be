package api

import "slices"

// JobStatus is a job's status as the API shows it and the database stores
// it.
type JobStatus string

// The statuses a job passes through.
const (
	StatusQueued    JobStatus = "queued"
	StatusAccepted  JobStatus = "accepted"
	StatusRunning   JobStatus = "running"
	StatusCanceling JobStatus = "canceling"
	StatusSucceeded JobStatus = "succeeded"
	StatusFailed    JobStatus = "failed"
	StatusCanceled  JobStatus = "canceled"
)

// Statuses lists every status in the order a job passes through them.
func Statuses() []JobStatus {
	return []JobStatus{StatusQueued, StatusAccepted, StatusRunning, StatusCanceling,
		StatusSucceeded, StatusFailed, StatusCanceled}
}

// Terminal reports whether s is final.
func (s JobStatus) Terminal() bool {
	return slices.Contains([]JobStatus{StatusSucceeded, StatusFailed, StatusCanceled}, s)
}

// ErrorClass tells what a failure means for retries. The plugin SDK
// (pkg/plugin.ErrorClass) speaks it too.
type ErrorClass string

// The error classes.
const (
	// Retriable failures may be retried automatically (the job's max_retry).
	Retriable ErrorClass = "retriable"
	// Permanent failures are never retried automatically.
	Permanent ErrorClass = "permanent"
	// OutcomeUnknown means the work may or may not have happened. It is
	// never retried automatically, since a retry could run it twice.
	OutcomeUnknown ErrorClass = "outcome_unknown"
)

// Valid reports whether c is one of the known classes.
func (c ErrorClass) Valid() bool {
	return slices.Contains([]ErrorClass{Retriable, Permanent, OutcomeUnknown}, c)
}
