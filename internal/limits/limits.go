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
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Set is a complete set of levers. It is what a job runs under.
type Set struct {
	MaxRetry        int           // automatic retries of a retriable failure; 0 = none
	RetryBackoff    time.Duration // first wait between attempts; doubles per attempt
	RetryBackoffMax time.Duration // cap of the wait
	PendingTimeout  time.Duration // longest wait in the queue; 0 = off
	ActiveTimeout   time.Duration // longest execution per attempt; 0 = off
	TTLSucceeded    time.Duration // how long a succeeded job is kept; 0 = forever
	TTLFailed       time.Duration // how long a failed or canceled job is kept; 0 = forever
}

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

// durations lists the duration levers of a Partial with their names and
// whether 0 means "no limit" (and so exceeds any maximum).
func (p *Partial) durations() []struct {
	name      string
	v         **time.Duration
	zeroIsOff bool
} {
	return []struct {
		name      string
		v         **time.Duration
		zeroIsOff bool
	}{
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
	if p.MaxRetry != nil {
		s.MaxRetry = *p.MaxRetry
	}
	set := func(dst *time.Duration, v *time.Duration) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.RetryBackoff, p.RetryBackoff)
	set(&s.RetryBackoffMax, p.RetryBackoffMax)
	set(&s.PendingTimeout, p.PendingTimeout)
	set(&s.ActiveTimeout, p.ActiveTimeout)
	set(&s.TTLSucceeded, p.TTLSucceeded)
	set(&s.TTLFailed, p.TTLFailed)
	return s
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
	if p.MaxRetry != nil && *p.MaxRetry < 0 {
		errs = append(errs, &FieldError{FieldMaxRetry, fmt.Sprintf("must not be negative, got %d", *p.MaxRetry)})
	}
	if p.MaxRetry != nil && *p.MaxRetry > MaxRetryLimit {
		errs = append(errs, &FieldError{FieldMaxRetry, fmt.Sprintf("must be at most %d, got %d", MaxRetryLimit, *p.MaxRetry)})
	}
	for _, d := range p.durations() {
		if *d.v != nil && **d.v < 0 {
			errs = append(errs, &FieldError{d.name, fmt.Sprintf("must not be negative, got %s", Format(**d.v))})
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
		case d.zeroIsOff && *v == 0 && *m > 0:
			errs = append(errs, &FieldError{d.name, fmt.Sprintf("0 (no limit) exceeds the command's maximum %s", Format(*m))})
		case *v > *m && !(d.zeroIsOff && *m == 0):
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

// MaxDuration is the longest duration ParseDuration accepts, 100000 days
// (about 273 years). That is within time.Duration (about 292 years) and
// PostgreSQL's interval, so a lever never overflows on its way to the database.
const MaxDuration = 100000 * 24 * time.Hour

// MaxRetryLimit is the largest max_retry. The column is a PostgreSQL integer.
const MaxRetryLimit = math.MaxInt32

// goDuration is the syntax of an unsigned Go duration string.
var goDuration = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))*$`)

// ParseDuration parses a Go duration string ("90s", "1h30m"), "0", or a
// whole number of days with an optional Go duration after it ("7d",
// "1d12h"). A leading "-" negates the whole value (callers that take no
// negative durations check the sign. config reports it with the key's own
// rule). The magnitude is at most MaxDuration. Anything longer, including
// values that would overflow, is an error.
func ParseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration: use a Go duration string like \"5s\", \"90s\" or \"5m\", or days like \"7d\"", s)
	tooLong := fmt.Errorf("%q is too long: durations are at most %s (about 273 years)", s, Format(MaxDuration))
	if s == "0" {
		return 0, nil
	}
	body, neg := strings.CutPrefix(s, "-")
	var days time.Duration
	hasDays := false
	if i := strings.IndexByte(body, 'd'); i >= 0 {
		hasDays = true
		digits := body[:i]
		if digits == "" || strings.Trim(digits, "0123456789") != "" {
			return 0, bad
		}
		n, err := strconv.ParseUint(digits, 10, 64)
		if err != nil || n > uint64(MaxDuration/(24*time.Hour)) {
			return 0, tooLong
		}
		days = time.Duration(n) * 24 * time.Hour
		body = body[i+1:]
	}
	var d time.Duration
	if body != "" || !hasDays {
		if !goDuration.MatchString(body) {
			return 0, bad
		}
		var err error
		if d, err = time.ParseDuration(body); err != nil {
			return 0, tooLong // well-formed, so beyond time.Duration
		}
	}
	if d > MaxDuration-days {
		return 0, tooLong
	}
	d += days
	if neg {
		d = -d
	}
	return d, nil
}

// Format writes d as ParseDuration reads it, in days when it is whole days.
func Format(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "0s"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// wire is Set in JSON: durations as strings.
type wire struct {
	MaxRetry        int    `json:"max_retry"`
	RetryBackoff    string `json:"retry_backoff"`
	RetryBackoffMax string `json:"retry_backoff_max"`
	PendingTimeout  string `json:"pending_timeout"`
	ActiveTimeout   string `json:"active_timeout"`
	TTLSucceeded    string `json:"ttl_succeeded"`
	TTLFailed       string `json:"ttl_failed"`
}

// MarshalJSON writes durations as strings ("10s", "7d").
func (s Set) MarshalJSON() ([]byte, error) {
	return json.Marshal(wire{
		MaxRetry: s.MaxRetry, RetryBackoff: Format(s.RetryBackoff), RetryBackoffMax: Format(s.RetryBackoffMax),
		PendingTimeout: Format(s.PendingTimeout), ActiveTimeout: Format(s.ActiveTimeout),
		TTLSucceeded: Format(s.TTLSucceeded), TTLFailed: Format(s.TTLFailed),
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Set) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out := Set{MaxRetry: w.MaxRetry}
	for _, f := range []struct {
		dst *time.Duration
		raw string
	}{
		{&out.RetryBackoff, w.RetryBackoff}, {&out.RetryBackoffMax, w.RetryBackoffMax},
		{&out.PendingTimeout, w.PendingTimeout}, {&out.ActiveTimeout, w.ActiveTimeout},
		{&out.TTLSucceeded, w.TTLSucceeded}, {&out.TTLFailed, w.TTLFailed},
	} {
		if f.raw == "" {
			continue
		}
		d, err := ParseDuration(f.raw)
		if err != nil {
			return err
		}
		*f.dst = d
	}
	*s = out
	return nil
}

// Override is the "limits" object of a submit request. Every lever is
// optional, and durations are strings.
type Override struct {
	MaxRetry        *int    `json:"max_retry,omitempty"`
	RetryBackoff    *string `json:"retry_backoff,omitempty"`
	RetryBackoffMax *string `json:"retry_backoff_max,omitempty"`
	PendingTimeout  *string `json:"pending_timeout,omitempty"`
	ActiveTimeout   *string `json:"active_timeout,omitempty"`
	TTLSucceeded    *string `json:"ttl_succeeded,omitempty"`
	TTLFailed       *string `json:"ttl_failed,omitempty"`
}

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
