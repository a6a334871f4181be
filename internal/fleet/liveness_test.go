package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestClassify(t *testing.T) {
	const s = time.Second
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	own := Timings{Keepalive: 5 * s, DeadAfter: 10 * s, StaleJob: 120 * s}
	slow := Timings{Keepalive: 20 * s, DeadAfter: 40 * s, StaleJob: 300 * s}
	seen := func(state string, silent time.Duration, fs ...func(*Seen)) Seen {
		x := Seen{State: state, SilentFor: silent, LastSeen: now.Add(-silent)}
		for _, f := range fs {
			f(&x)
		}
		return x
	}
	freeSince := func(ago time.Duration, dead bool) func(*Seen) {
		return func(x *Seen) { x.LockFreeSince, x.FoundDead = now.Add(-ago), dead }
	}
	announced := func(tm Timings) func(*Seen) { return func(x *Seen) { x.Timings = tm } }
	for _, tc := range []struct {
		name   string
		seen   Seen
		want   Liveness
		reason string
		counts bool
	}{
		{"heartbeating", seen("running", s), Live, "heartbeating", true},
		{"draining", seen("draining", s), Draining, "draining, heartbeating", true},
		{"stopped cleanly, long silent: stopped, not stale", seen("stopped", time.Hour), Stopped, "stopped cleanly", false},
		{"kill -9: found dead", seen("running", 12*s, freeSince(11*s, true)), Dead,
			"name lock free since 2026-01-01T11:59:49Z, silent 12s (dead_after 10s)", false},
		{"found dead, past stale_job: still dead", seen("running", 200*s, freeSince(190*s, true)), Dead,
			"name lock free since 2026-01-01T11:56:50Z, silent 3m20s (dead_after 10s)", false},
		{"found dead but heartbeat since: not dead", seen("running", s, freeSince(11*s, true)), Live,
			"heartbeating; name lock free (re-taken within a keepalive)", true},
		{"frozen: lock held, silent past 3 keepalives", seen("running", 16*s), Late,
			"name lock held, silent 16s (keepalive 5s): frozen or cut off from the database", true},
		{"lock free, silent, not yet dead", seen("running", 16*s, freeSince(6*s, false)), Late,
			"name lock free, silent 16s (keepalive 5s)", true},
		{"silent past stale_job", seen("running", 130*s), Stale, "silent 2m10s, past stale_job (2m0s)", false},
		{"a slow agent judged by its own keepalive: not late", seen("running", 16*s, announced(slow)), Live, "heartbeating", true},
		{"a slow agent judged by its own stale_job: late, not stale", seen("running", 130*s, announced(slow)), Late,
			"name lock held, silent 2m10s (keepalive 20s): frozen or cut off from the database", true},
		{"draining and frozen", seen("draining", 16*s), Late,
			"name lock held, silent 16s (keepalive 5s): frozen or cut off from the database", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(own, tc.seen)
			assert.Equal(t, tc.want, v.Liveness)
			assert.Equal(t, tc.reason, v.Reason)
			assert.Equal(t, tc.counts, v.Counts())
		})
	}
}
