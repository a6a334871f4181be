package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestJudge(t *testing.T) {
	const s = time.Second
	fast := Timings{Keepalive: s / 2, DeadAfter: s, StaleJob: 20 * s, SelfFenceAfter: 15 * s}
	slow := Timings{Keepalive: 3 * s, DeadAfter: 6 * s, StaleJob: 120 * s, SelfFenceAfter: 100 * s}
	for _, tc := range []struct {
		name        string
		own, theirs Timings
		want        Timings
	}{
		{"the same configuration", slow, slow, slow},
		// The reproduced bug: B (fast) judged A (slow) by its own 1 s.
		{"a fast checker judges a slow agent by the agent's", fast, slow, slow},
		{"a slow checker keeps its own for a fast agent", slow, fast, slow},
		{"an agent older than v15 announced nothing: the checker's own", fast, Timings{}, fast},
		{"only some announced", fast, Timings{DeadAfter: 4 * s}, Timings{Keepalive: s / 2, DeadAfter: 4 * s, StaleJob: 20 * s, SelfFenceAfter: 15 * s}},
		{"mixed: each the larger",
			Timings{Keepalive: s, DeadAfter: 10 * s, StaleJob: 60 * s},
			Timings{Keepalive: 2 * s, DeadAfter: 4 * s, StaleJob: 90 * s, SelfFenceAfter: 80 * s},
			Timings{Keepalive: 2 * s, DeadAfter: 10 * s, StaleJob: 90 * s, SelfFenceAfter: 80 * s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Judge(tc.own, tc.theirs))
		})
	}
}

func TestOfflineAfter(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name   string
		own    time.Duration
		theirs Timings
		want   time.Duration
	}{
		{"own when longer", 15 * s, Timings{Keepalive: 3 * s}, 15 * s},
		{"three of a slow agent's keepalives", 1500 * time.Millisecond, Timings{Keepalive: 3 * s}, 9 * s},
		{"nothing announced", 1500 * time.Millisecond, Timings{}, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, OfflineAfter(tc.own, tc.theirs))
		})
	}
}
