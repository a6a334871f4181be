// Package jobstate names the statuses a job passes through and the classes
// of its errors, as the database stores them, the API shows them and the
// plugin SDK speaks them. They are defined once, in pkg/api (the wire
// types, importable from any module). These are the same types and values
// under the names the agent's packages know them by.
package jobstate

import "github.com/tetherjobs/tether/pkg/api"

// JobStatus is a job's status as the database stores it and the API shows
// it. Its values are the status column's.
type JobStatus = api.JobStatus

// The statuses a job passes through.
const (
	StatusQueued    = api.StatusQueued
	StatusAccepted  = api.StatusAccepted
	StatusRunning   = api.StatusRunning
	StatusCanceling = api.StatusCanceling
	StatusSucceeded = api.StatusSucceeded
	StatusFailed    = api.StatusFailed
	StatusCanceled  = api.StatusCanceled
)

// Statuses lists every status in the order a job passes through them.
func Statuses() []JobStatus { return api.Statuses() }

// ErrorClass tells what a failure means for retries. The plugin SDK
// (pkg/plugin.ErrorClass) and the error_class column share it.
type ErrorClass = api.ErrorClass

// The error classes.
const (
	Retriable      = api.Retriable
	Permanent      = api.Permanent
	OutcomeUnknown = api.OutcomeUnknown
)

// Held tells whether a job in status s has a holder: an agent whose lease
// it runs under. Queued and ended jobs have none.
func Held(s JobStatus) bool {
	return s == StatusAccepted || s == StatusRunning || s == StatusCanceling
}
