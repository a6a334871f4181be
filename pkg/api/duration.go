package api

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxDuration is the longest duration ParseDuration accepts, 100000 days
// (about 273 years). That is within time.Duration (about 292 years) and
// PostgreSQL's interval, so a lever never overflows on its way to the database.
const MaxDuration = 100000 * 24 * time.Hour

// goDuration is the syntax of an unsigned Go duration string.
var goDuration = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))*$`)

// durationParts splits a duration without its sign into the digits before
// a "d", if any, and the rest (where a "d" makes it malformed).
var durationParts = regexp.MustCompile(`(?s)^(?:([0-9]+)d)?(.*)$`)

// ParseDuration parses a duration as the API writes them: a Go duration
// string ("90s", "1h30m"), "0", or a whole number of days with an optional
// Go duration after it ("7d", "1d12h"). A leading "-" negates the whole
// value. The magnitude is at most MaxDuration. Anything longer, including
// values that would overflow, is an error.
func ParseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration: use a Go duration string like \"5s\", \"90s\" or \"5m\", or days like \"7d\"", s)
	tooLong := fmt.Errorf("%q is too long: durations are at most %s (about 273 years)", s, FormatDuration(MaxDuration))
	if s == "0" {
		return 0, nil
	}
	body, neg := strings.CutPrefix(s, "-")
	m := durationParts.FindStringSubmatch(body)
	days, err := strconv.ParseUint(cmp.Or(m[1], "0"), 10, 64)
	if err != nil || days > uint64(MaxDuration/(24*time.Hour)) {
		return 0, tooLong
	}
	// Days need no Go duration after them. Without days it is the whole body.
	rest := cmp.Or(m[2], "0s")
	if body == "" || !goDuration.MatchString(rest) {
		return 0, bad
	}
	d, err := time.ParseDuration(rest)
	// Well-formed, so an error is beyond time.Duration.
	if err != nil || d > MaxDuration-time.Duration(days)*24*time.Hour {
		return 0, tooLong
	}
	d += time.Duration(days) * 24 * time.Hour
	if neg {
		d = -d
	}
	return d, nil
}

// FormatDuration writes d as ParseDuration reads it, in days when it is
// whole days.
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "0s"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}
