package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Limits are the lifecycle levers a job runs under, stamped on it at
// submit. In JSON the durations are strings ("10s", "7d"; see
// ParseDuration).
type Limits struct {
	MaxRetry        int           // automatic retries of a retriable failure; 0 = none
	RetryBackoff    time.Duration // first wait between attempts; doubles per attempt
	RetryBackoffMax time.Duration // cap of the wait
	PendingTimeout  time.Duration // longest wait in the queue; 0 = off
	ActiveTimeout   time.Duration // longest execution per attempt; 0 = off
	TTLSucceeded    time.Duration // how long a succeeded job is kept; 0 = forever
	TTLFailed       time.Duration // how long a failed or canceled job is kept; 0 = forever
}

// limitsJSON is Limits on the wire.
type limitsJSON struct {
	MaxRetry        int    `json:"max_retry"`
	RetryBackoff    string `json:"retry_backoff"`
	RetryBackoffMax string `json:"retry_backoff_max"`
	PendingTimeout  string `json:"pending_timeout"`
	ActiveTimeout   string `json:"active_timeout"`
	TTLSucceeded    string `json:"ttl_succeeded"`
	TTLFailed       string `json:"ttl_failed"`
}

// MarshalJSON writes durations as strings ("10s", "7d").
func (l Limits) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitsJSON{
		MaxRetry: l.MaxRetry, RetryBackoff: FormatDuration(l.RetryBackoff), RetryBackoffMax: FormatDuration(l.RetryBackoffMax),
		PendingTimeout: FormatDuration(l.PendingTimeout), ActiveTimeout: FormatDuration(l.ActiveTimeout),
		TTLSucceeded: FormatDuration(l.TTLSucceeded), TTLFailed: FormatDuration(l.TTLFailed),
	})
}

// UnmarshalJSON reads what MarshalJSON writes. An absent duration is 0.
func (l *Limits) UnmarshalJSON(b []byte) error {
	var w limitsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out := Limits{MaxRetry: w.MaxRetry}
	for _, f := range []struct {
		name string
		dst  *time.Duration
		raw  string
	}{
		{"retry_backoff", &out.RetryBackoff, w.RetryBackoff}, {"retry_backoff_max", &out.RetryBackoffMax, w.RetryBackoffMax},
		{"pending_timeout", &out.PendingTimeout, w.PendingTimeout}, {"active_timeout", &out.ActiveTimeout, w.ActiveTimeout},
		{"ttl_succeeded", &out.TTLSucceeded, w.TTLSucceeded}, {"ttl_failed", &out.TTLFailed, w.TTLFailed},
	} {
		if f.raw == "" {
			continue
		}
		d, err := ParseDuration(f.raw)
		if err != nil {
			return fmt.Errorf("limits.%s: %w", f.name, err)
		}
		*f.dst = d
	}
	*l = out
	return nil
}

// LimitsOverride is the "limits" object of a submit request. Every lever is
// optional. Each one given replaces the command's, within the command's
// maximum where one is set. Durations are strings as ParseDuration reads
// them; the server reports a malformed one by its field name.
type LimitsOverride struct {
	MaxRetry        *int    `json:"max_retry,omitempty"`
	RetryBackoff    *string `json:"retry_backoff,omitempty"`
	RetryBackoffMax *string `json:"retry_backoff_max,omitempty"`
	PendingTimeout  *string `json:"pending_timeout,omitempty"`
	ActiveTimeout   *string `json:"active_timeout,omitempty"`
	TTLSucceeded    *string `json:"ttl_succeeded,omitempty"`
	TTLFailed       *string `json:"ttl_failed,omitempty"`
}
