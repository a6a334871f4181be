// Package lifecycle decides how an attempt ends. It is pure. The agent's
// runner, its deferred writes, drain and the janitor all describe what
// happened to an attempt as an Input, get a Plan back, and store that plan
// with one fenced statement (store.EndAttempt). Nothing else decides retries
// or Cleanups.
package lifecycle

import (
	"time"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
)

// Input is what happened to one attempt.
type Input struct {
	Status     jobstate.JobStatus  // succeeded, failed or canceled
	ErrorClass jobstate.ErrorClass // for failed: retriable, permanent or outcome_unknown
	Attempt    int                 // the attempt that ended (1 = the first)
	Levers     limits.Set
	// NoRetry forbids a retry whatever the levers say (a job failed for
	// waiting too long in the queue would only wait again).
	NoRetry bool
	// PluginCalled says Execute or Resume was called for this attempt, so
	// remote work may exist. HasCleanup says the job's plugin declares
	// Cleanup.
	PluginCalled bool
	HasCleanup   bool
	// Jitter in [0, 1) spreads a retry's backoff over [half, all] of it.
	Jitter float64
}

// Plan is how the attempt ends.
type Plan struct {
	// Retry sends the job back to the queue as attempt+1 after Wait. The
	// database still lets a cancel request win over it (the job then ends
	// canceled), because a cancel can arrive while the write is on its way.
	Retry bool
	Wait  time.Duration
	// Cleanup says the plugin's Cleanup must run for this attempt. Its
	// durable row is written in the same statement as the outcome. A retry
	// (or an operator's requeue) waits until it has succeeded, so remote work
	// never runs for two attempts at once.
	Cleanup bool
}

// Decide returns how an attempt with in's outcome ends.
//
// A failed attempt is retried when its class is retriable and it was not the
// last one max_retry allows (attempt <= max_retry). Cleanup is due when the
// plugin was called and declares Cleanup, for every outcome but success. A
// failed or canceled attempt may have left remote work running, and a
// succeeded one ended its work itself.
func Decide(in Input) Plan {
	var p Plan
	if in.Status == jobstate.StatusFailed && in.ErrorClass == jobstate.Retriable && !in.NoRetry && in.Attempt <= in.Levers.MaxRetry {
		p.Retry = true
		p.Wait = in.Levers.Backoff(in.Attempt, in.Jitter)
	}
	p.Cleanup = in.HasCleanup && in.PluginCalled && in.Status != jobstate.StatusSucceeded
	return p
}
