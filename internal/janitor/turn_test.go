package janitor

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
)

// Two agents checking side by side take turns: one check per keepalive for
// the fleet, not one per agent.
func TestLivenessOneCheckPerKeepaliveForTheFleet(t *testing.T) {
	f := newFixture(t)
	x := f.agent("x", "x-g1", bothPlugins)
	y := f.agent("y", "y-g1", bothPlugins)
	cfg := LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter}
	px := f.startLiveness(x, metrics.New(), cfg)
	py := f.startLiveness(y, metrics.New(), cfg)
	turns, tries := 0, 0
	end := time.Now().Add(10 * testKeepalive)
	for time.Now().Before(end) {
		var c Checked
		select {
		case c = <-px.checked:
		case c = <-py.checked:
		case <-time.After(10 * time.Second):
			t.Fatal("no check within 10s")
		}
		tries++
		if c.Turn {
			turns++
		}
	}
	// Each tried about once per keepalive; together they checked about
	// once per keepalive, at most once per turn period.
	assert.GreaterOrEqual(t, tries, 16)
	assert.LessOrEqual(t, turns, int(10*testKeepalive/cfg.turnPeriod())+2)
	assert.GreaterOrEqual(t, turns, 8)
	assert.Less(t, turns, tries)
}

// The first-free memory is the fleet's: one agent sees a lock free, stops
// checking, and the next checker finds the agent dead dead_after after that
// first sighting, not after one of its own.
func TestLivenessMemoryMovesWithTheTurn(t *testing.T) {
	f := newFixture(t)
	x := f.agent("x", "x-g1", bothPlugins)
	y := f.agent("y", "y-g1", bothPlugins)
	victim := f.agent("v1", "v1-g1", bothPlugins)
	lock := f.nameLock("v1")
	res, _ := f.claimed(victim, "c", "res", true)
	cfg := LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter}

	jx := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: x, Metrics: metrics.New(), Keepalive: testKeepalive, StaleJob: time.Minute})
	lx := NewLiveness(jx, cfg)
	require.NoError(t, lock.Close(f.ctx))
	var first Checked
	require.Eventually(t, func() bool {
		c, err := lx.Check(f.ctx)
		require.NoError(t, err)
		first = c
		return c.Turn && slices.Contains(freeNames(c), "v1")
	}, 5*time.Second, testKeepalive/4, "x sees v1's lock free")
	require.Empty(t, first.Dead)

	// y takes over at once; x checks no more.
	py := f.startLiveness(y, metrics.New(), cfg)
	var dead Checked
	for !slices.ContainsFunc(dead.Dead, func(d DeadAgent) bool { return d.Name == "v1" }) {
		dead, _ = py.next()
	}
	i := slices.IndexFunc(dead.Dead, func(d DeadAgent) bool { return d.Name == "v1" })
	require.GreaterOrEqual(t, i, 0, "v1 found dead")
	assert.Equal(t, first.Now, dead.Dead[i].FreeSince, "F is x's sighting")
	assert.Less(t, dead.Now.Sub(first.Now), testDeadAfter+2*testKeepalive)
	r, _ := f.active(res)
	assert.Nil(t, r.Agent, "released")
}
