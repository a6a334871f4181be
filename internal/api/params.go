package api

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// params reads a request's query parameters. The first bad one is kept in
// err, and the handler answers it once it has read them all.
type params struct {
	q   url.Values
	err *inputError
}

// fail records a bad parameter unless an earlier one was bad.
func (p *params) fail(name, format string, args ...any) {
	p.err = cmp.Or(p.err, &inputError{name, fmt.Sprintf(format, args...)})
}

// int reads an optional integer within [lo, hi].
func (p *params) int(name string, def, lo, hi int64) int64 {
	raw := p.q.Get(name)
	if raw == "" {
		return def
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		p.fail(name, "%s must be an integer from %d to %d, got %q", name, lo, hi, raw)
	}
	return n
}

// bool reads an optional true/false parameter. Absent is false.
func (p *params) bool(name string) bool {
	raw := p.q.Get(name)
	v, err := strconv.ParseBool(cmp.Or(raw, "false"))
	if err != nil {
		p.fail(name, "%s must be true or false, got %q", name, raw)
	}
	return v
}

// oneOf reads a parameter that must be one of allowed ("" for absent). Must
// says so in the error: "must be raw or jsonl".
func (p *params) oneOf(name, must string, allowed ...string) string {
	v := p.q.Get(name)
	if !slices.Contains(allowed, v) {
		p.fail(name, "%s %s, got %q", name, must, v)
	}
	return v
}

// time reads an optional RFC 3339 timestamp. Absent is the zero time.
func (p *params) time(name string) time.Time {
	v := p.q.Get(name)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	switch {
	case err != nil:
		p.fail(name, "%s must be an RFC 3339 time such as 2026-12-01T09:00:00Z, got %q", name, v)
	case t.Year() < 1970 || t.Year() > 9999:
		p.fail(name, "%s must be between years 1970 and 9999, got %q", name, v)
	}
	return t
}

// timeOrAgo reads an optional RFC 3339 timestamp or a positive duration
// (10m, 2h) meaning that long ago. Absent is the zero time and 0.
func (p *params) timeOrAgo(name string) (time.Time, time.Duration) {
	v := p.q.Get(name)
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return time.Time{}, d
	}
	if _, err := time.Parse(time.RFC3339Nano, v); v != "" && err != nil {
		p.fail(name, "%s must be an RFC 3339 time such as 2026-12-01T09:00:00Z or a duration ago such as 10m, got %q", name, v)
		return time.Time{}, 0
	}
	return p.time(name), 0
}
