package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTimeFlag(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{in: ""},
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "90s", want: now.Add(-90 * time.Second)},
		{in: "2026-11-30T08:00:00Z", want: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)},
		{in: "2026-11-30T08:00:00.5+01:00", want: time.Date(2026, 11, 30, 7, 0, 0, 500e6, time.UTC)},
		{in: "-2h", err: `--since must be an RFC 3339 time such as 2026-12-01T09:00:00Z or a duration ago such as 2h, got "-2h" (field since)`},
		{in: "yesterday", err: `got "yesterday" (field since)`},
		{in: "2026-11-30", err: `got "2026-11-30"`},
	} {
		got, err := timeFlag("since", tc.in, now)
		if tc.err != "" {
			require.Error(t, err, tc.in)
			assert.Contains(t, err.Error(), tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.True(t, tc.want.Equal(got), "%s: got %s, want %s", tc.in, got, tc.want)
	}
}
