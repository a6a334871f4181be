package limits

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "90s": 90 * time.Second, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "-2d": -48 * time.Hour, "-5s": -5 * time.Second,
	} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"24hh", "", "5", "d", "1.5d", "1d-2h", "7 d", "x7d"} {
		_, err := ParseDuration(in)
		assert.Error(t, err, in)
	}
}

func TestResolve(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	n := func(v int) *int { return &v }
	cmd := Partial{MaxRetry: n(1), ActiveTimeout: d(time.Hour)}
	max := Partial{MaxRetry: n(3), ActiveTimeout: d(2 * time.Hour), TTLFailed: d(48 * time.Hour)}

	s, errs := Resolve(Defaults(), cmd, max, Partial{TTLSucceeded: d(0)})
	require.Empty(t, errs)
	assert.Equal(t, Set{MaxRetry: 1, RetryBackoff: 10 * time.Second, RetryBackoffMax: 10 * time.Minute,
		ActiveTimeout: time.Hour, TTLSucceeded: 0, TTLFailed: 30 * 24 * time.Hour}, s, "no maximum for ttl_succeeded: 0 allowed")

	for _, tc := range []struct {
		job   Partial
		field string
	}{
		{Partial{MaxRetry: n(4)}, FieldMaxRetry},
		{Partial{MaxRetry: n(-1)}, FieldMaxRetry},
		{Partial{ActiveTimeout: d(3 * time.Hour)}, FieldActiveTimeout},
		{Partial{ActiveTimeout: d(0)}, FieldActiveTimeout},
		{Partial{TTLFailed: d(0)}, FieldTTLFailed},
		{Partial{PendingTimeout: d(-time.Second)}, FieldPendingTimeout},
		{Partial{RetryBackoff: d(time.Hour)}, FieldRetryBackoffMax},
	} {
		_, errs := Resolve(Defaults(), cmd, max, tc.job)
		require.Len(t, errs, 1, tc.field)
		assert.Equal(t, tc.field, errs[0].Field)
	}
}

func TestBackoffAndJSON(t *testing.T) {
	s := Set{RetryBackoff: 10 * time.Second, RetryBackoffMax: time.Minute}
	assert.InDelta(t, float64(10*time.Second), float64(s.Backoff(1, 0.999999999)), float64(time.Millisecond))
	assert.Equal(t, 5*time.Second, s.Backoff(1, 0))
	assert.Equal(t, 20*time.Second, s.Backoff(3, 0))
	assert.Equal(t, 30*time.Second, s.Backoff(50, 0), "capped, then jittered into [half, all]")

	in := Defaults()
	in.ActiveTimeout = 90 * time.Minute
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"max_retry":2,"retry_backoff":"10s","retry_backoff_max":"10m0s","pending_timeout":"0s",
		"active_timeout":"1h30m0s","ttl_succeeded":"7d","ttl_failed":"30d"}`, string(b))
	var out Set
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Equal(t, in, out)
}

func TestParseDurationBounds(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0d": 0, "100000d": MaxDuration, "-100000d": -MaxDuration, "99999d24h": MaxDuration,
		"2400000h": MaxDuration, ".5s": 500 * time.Millisecond, "1.5h": 90 * time.Minute,
	} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	// Each of these once overflowed into a positive duration or a wrapped
	// one (724095h34m33s for the first).
	for _, in := range []string{"-100000d2000000h", "300000000h", "9999999999d", "100001d", "100000d1ns",
		"2400000h1s", "99999999999999999999d", "9223372036854775807ns1h", "2562048h"} {
		_, err := ParseDuration(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), "too long: durations are at most 100000d", in)
	}
	for _, in := range []string{"24hh", "1d+2h", "+5s", "--5s", "-", "1e3s", "5 s", "h", "1d1d"} {
		_, err := ParseDuration(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), "is not a duration", in)
	}
}

func TestOverrideBounds(t *testing.T) {
	str := func(s string) *string { return &s }
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		o     Override
		field string
		msg   string
	}{
		{Override{ActiveTimeout: str("-1s")}, FieldActiveTimeout, `must not be negative, got "-1s"`},
		{Override{TTLFailed: str("-100000d2000000h")}, FieldTTLFailed, "too long"},
		{Override{RetryBackoff: str("300000000h")}, FieldRetryBackoff, "too long"},
		{Override{PendingTimeout: str("-0s")}, "", ""}, // -0 is 0
	} {
		_, fe := tc.o.Partial()
		if tc.field == "" {
			assert.Nil(t, fe)
			continue
		}
		require.NotNil(t, fe, tc.field)
		assert.Equal(t, tc.field, fe.Field)
		assert.Contains(t, fe.Msg, tc.msg)
	}
	errs := Partial{MaxRetry: n(MaxRetryLimit + 1)}.Check()
	require.Len(t, errs, 1)
	assert.Equal(t, FieldMaxRetry, errs[0].Field)
	assert.Contains(t, errs[0].Msg, "must be at most 2147483647")
	assert.Empty(t, Partial{MaxRetry: n(MaxRetryLimit)}.Check())
}
