package api

import (
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
