// Package limits holds a job's lifecycle levers — retries, backoff, queue
// and execution timeouts, retention — and how they are resolved. Resolution
// takes global defaults, then the command's limits, then the submit
// request's overrides, each override bounded by the command's maximum where
// one is set. The resolved Set is stamped on the job at submit.
package limits

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
)

// Set is a complete set of levers. It is what a job runs under: the
// api.Limits a job shows, with the methods the agent resolves and applies
// them with.
type Set api.Limits

// Defaults are the built-in global defaults.
func Defaults() Set {
	return Set{
		MaxRetry:        2,
		RetryBackoff:    10 * time.Second,
		RetryBackoffMax: 10 * time.Minute,
		TTLSucceeded:    7 * 24 * time.Hour,
		TTLFailed:       30 * 24 * time.Hour,
	}
}

// Partial is a set of levers some of which are given (non-nil).
type Partial struct {
	MaxRetry        *int
	RetryBackoff    *time.Duration
	RetryBackoffMax *time.Duration
	PendingTimeout  *time.Duration
	ActiveTimeout   *time.Duration
	TTLSucceeded    *time.Duration
	TTLFailed       *time.Duration
}

// Field names, as they appear in configuration and the API.
const (
	FieldMaxRetry        = "max_retry"
	FieldRetryBackoff    = "retry_backoff"
	FieldRetryBackoffMax = "retry_backoff_max"
	FieldPendingTimeout  = "pending_timeout"
	FieldActiveTimeout   = "active_timeout"
	FieldTTLSucceeded    = "ttl_succeeded"
	FieldTTLFailed       = "ttl_failed"
)

// durationLever is a duration lever of a Partial: its name, where it is,
// and whether 0 means "no limit" (and so exceeds any maximum).
type durationLever struct {
	name      string
	v         **time.Duration
	zeroIsOff bool
}

// unlimited reports whether d is this lever's "no limit".
func (l durationLever) unlimited(d time.Duration) bool { return l.zeroIsOff && d == 0 }

// durations lists the duration levers of a Partial.
func (p *Partial) durations() []durationLever {
	return []durationLever{
		{FieldRetryBackoff, &p.RetryBackoff, false},
		{FieldRetryBackoffMax, &p.RetryBackoffMax, false},
		{FieldPendingTimeout, &p.PendingTimeout, true},
		{FieldActiveTimeout, &p.ActiveTimeout, true},
		{FieldTTLSucceeded, &p.TTLSucceeded, true},
		{FieldTTLFailed, &p.TTLFailed, true},
	}
}

// Apply returns s with every lever p gives replaced.
func (s Set) Apply(p Partial) Set {
	s.MaxRetry = givenOr(p.MaxRetry, s.MaxRetry)
	s.RetryBackoff = givenOr(p.RetryBackoff, s.RetryBackoff)
	s.RetryBackoffMax = givenOr(p.RetryBackoffMax, s.RetryBackoffMax)
	s.PendingTimeout = givenOr(p.PendingTimeout, s.PendingTimeout)
	s.ActiveTimeout = givenOr(p.ActiveTimeout, s.ActiveTimeout)
	s.TTLSucceeded = givenOr(p.TTLSucceeded, s.TTLSucceeded)
	s.TTLFailed = givenOr(p.TTLFailed, s.TTLFailed)
	return s
}

// givenOr returns the lever v gives, or def when it gives none.
func givenOr[T any](v *T, def T) T {
	if v == nil {
		return def
	}
	return *v
}

// Partial returns s with every lever given.
func (s Set) Partial() Partial {
	return Partial{
		MaxRetry: &s.MaxRetry, RetryBackoff: &s.RetryBackoff, RetryBackoffMax: &s.RetryBackoffMax,
		PendingTimeout: &s.PendingTimeout, ActiveTimeout: &s.ActiveTimeout,
		TTLSucceeded: &s.TTLSucceeded, TTLFailed: &s.TTLFailed,
	}
}

// FieldError is a problem with one lever. Field is its name (e.g.
// "active_timeout"), to be prefixed by where it came from.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Check reports the given levers that are negative, one error per lever.
func (p Partial) Check() []*FieldError {
	var errs []*FieldError
	switch r := givenOr(p.MaxRetry, 0); {
	case r < 0:
		errs = append(errs, &FieldError{FieldMaxRetry, fmt.Sprintf("must not be negative, got %d", r)})
	case r > MaxRetryLimit:
		errs = append(errs, &FieldError{FieldMaxRetry, fmt.Sprintf("must be at most %d, got %d", MaxRetryLimit, r)})
	}
	for _, d := range p.durations() {
		if v := givenOr(*d.v, 0); v < 0 {
			errs = append(errs, &FieldError{d.name, fmt.Sprintf("must not be negative, got %s", Format(v))})
		}
	}
	return errs
}

// Within reports each lever p gives that exceeds the maximum max gives for
// it. For pending_timeout, active_timeout and the ttls 0 means "no limit",
// which exceeds every maximum.
func (p Partial) Within(max Partial) []*FieldError {
	var errs []*FieldError
	if p.MaxRetry != nil && max.MaxRetry != nil && *p.MaxRetry > *max.MaxRetry {
		errs = append(errs, &FieldError{FieldMaxRetry, fmt.Sprintf("%d exceeds the command's maximum %d", *p.MaxRetry, *max.MaxRetry)})
	}
	pd, md := p.durations(), max.durations()
	for i, d := range pd {
		v, m := *d.v, *md[i].v
		if v == nil || m == nil {
			continue
		}
		switch {
		case d.unlimited(*v) && *m > 0:
			errs = append(errs, &FieldError{d.name, fmt.Sprintf("0 (no limit) exceeds the command's maximum %s", Format(*m))})
		case *v > *m && !d.unlimited(*m):
			errs = append(errs, &FieldError{d.name, fmt.Sprintf("%s exceeds the command's maximum %s", Format(*v), Format(*m))})
		}
	}
	return errs
}

// Relations reports levers of a resolved set that contradict each other.
func (s Set) Relations() []*FieldError {
	if s.RetryBackoffMax < s.RetryBackoff {
		return []*FieldError{{FieldRetryBackoffMax, fmt.Sprintf("(%s) must be at least retry_backoff (%s)", Format(s.RetryBackoffMax), Format(s.RetryBackoff))}}
	}
	return nil
}

// Resolve lays cmd over defaults, then job over that. Every lever job gives
// must be non-negative and within max. The result must be consistent. Errors
// name the job's fields.
func Resolve(defaults Set, cmd, max, job Partial) (Set, []*FieldError) {
	errs := job.Check()
	errs = append(errs, job.Within(max)...)
	if len(errs) > 0 {
		return Set{}, errs
	}
	s := defaults.Apply(cmd).Apply(job)
	if errs := s.Relations(); len(errs) > 0 {
		return Set{}, errs
	}
	return s, nil
}

// Backoff is the wait before attempt+1 after attempt failed:
// min(retry_backoff × 2^(attempt−1), retry_backoff_max) scaled into
// [half, all] of itself by jitter in [0, 1). The database computes the same
// (queries/job_finish.sql). This is its reference for docs and tests.
func (s Set) Backoff(attempt int, jitter float64) time.Duration {
	exp := min(max(attempt-1, 0), 30)
	d := float64(s.RetryBackoff) * math.Pow(2, float64(exp))
	d = min(d, float64(s.RetryBackoffMax))
	return time.Duration(d * (0.5 + 0.5*jitter))
}

// MaxDuration is the longest duration ParseDuration accepts (about 273
// years), so a lever never overflows on its way to the database.
const MaxDuration = api.MaxDuration

// MaxRetryLimit is the largest max_retry. The column is a PostgreSQL integer.
const MaxRetryLimit = math.MaxInt32

// ParseDuration parses a duration of the configuration or the API (see
// api.ParseDuration). Callers that take no negative durations check the
// sign. config reports it with the key's own rule.
func ParseDuration(s string) (time.Duration, error) { return api.ParseDuration(s) }

// Format writes d as ParseDuration reads it, in days when it is whole days.
func Format(d time.Duration) string { return api.FormatDuration(d) }

// MarshalJSON writes s as the API shows a job's limits (durations as
// strings, "10s", "7d").
func (s Set) MarshalJSON() ([]byte, error) { return json.Marshal(api.Limits(s)) }

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Set) UnmarshalJSON(b []byte) error {
	var l api.Limits
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	*s = Set(l)
	return nil
}

// Override is the "limits" object of a submit request (api.LimitsOverride,
// with the methods the agent needs). Every lever is optional, and durations
// are strings.
type Override api.LimitsOverride

// Partial parses the override's durations. The first malformed or negative
// one is reported by field name.
func (o Override) Partial() (Partial, *FieldError) {
	p := Partial{MaxRetry: o.MaxRetry}
	for _, f := range []struct {
		name string
		raw  *string
		dst  **time.Duration
	}{
		{FieldRetryBackoff, o.RetryBackoff, &p.RetryBackoff},
		{FieldRetryBackoffMax, o.RetryBackoffMax, &p.RetryBackoffMax},
		{FieldPendingTimeout, o.PendingTimeout, &p.PendingTimeout},
		{FieldActiveTimeout, o.ActiveTimeout, &p.ActiveTimeout},
		{FieldTTLSucceeded, o.TTLSucceeded, &p.TTLSucceeded},
		{FieldTTLFailed, o.TTLFailed, &p.TTLFailed},
	} {
		if f.raw == nil {
			continue
		}
		d, err := ParseDuration(*f.raw)
		if err != nil {
			return Partial{}, &FieldError{f.name, err.Error()}
		}
		if d < 0 {
			return Partial{}, &FieldError{f.name, fmt.Sprintf("must not be negative, got %q", *f.raw)}
		}
		*f.dst = &d
	}
	return p, nil
}
