package janitor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// Two agents' janitors running side by side take turns: one pass per
// clean_interval for the fleet, not one per agent, and both export the
// gauges the pass measured.
func TestOnePassPerIntervalForTheFleet(t *testing.T) {
	f := newFixture(t)
	x := f.agent("x", "x-g1", bothPlugins)
	y := f.agent("y", "y-g1", bothPlugins)
	const interval = 100 * time.Millisecond
	passed := make(chan Passed, 100)
	mx, my := metrics.New(), metrics.New()
	for _, a := range []struct {
		h store.Holder
		m *metrics.Metrics
	}{{x, mx}, {y, my}} {
		svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: a.h, Metrics: a.m, CleanInterval: interval,
			TestSignals: TestSignals{Passed: passed}})
		loop := svc.PassLoop()
		require.NoError(t, loop.Start(f.ctx))
		t.Cleanup(loop.Stop)
	}
	start := time.Now()
	n := 0
	for time.Since(start) < 20*interval {
		await(t, passed, 5*time.Second, "a janitor pass")
		n++
	}
	elapsed := time.Since(start)
	// Each agent ticks every 0.8–1.2 intervals: 2 agents alone would pass
	// about 40 times. Turns space passes by at least 0.75 interval.
	assert.LessOrEqual(t, n, int(elapsed/(interval*3/4))+1, "%d passes in %s", n, elapsed)
	assert.GreaterOrEqual(t, n, 10)
	require.Eventually(t, func() bool {
		return metricValue(t, mx, "tether_agents", metrics.AgentRunning) == 2 && metricValue(t, my, "tether_agents", metrics.AgentRunning) == 2
	}, 5*time.Second, interval, "both export the published gauges")
}

// The first pass after the fleet went without one for gapPasses intervals
// (a database outage) judges nobody: a job whose holder looks silent is left
// alone, and the next pass, an interval later, settles it.
func TestFirstPassAfterAGapJudgesNobody(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"res": resCaps})
	dead := f.agent("dead", "dead-g1", nil)
	id, _ := f.claimed(dead, "c", "res", true)
	f.silence(id, time.Hour)
	_, err := f.pool.Exec(f.ctx, `UPDATE janitor_turn SET passed_at = now() - interval '1 hour'`)
	require.NoError(t, err)

	passed := make(chan Passed, 10)
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: live, CleanInterval: 200 * time.Millisecond,
		TestSignals: TestSignals{Passed: passed}})
	n, took, err := svc.Turn(f.ctx)
	require.NoError(t, err)
	require.True(t, took)
	assert.Zero(t, n, "the pass after the gap judged nobody")
	r, ok := f.active(id)
	require.True(t, ok)
	assert.NotNil(t, r.Agent, "its job is still its holder's")

	_, took, err = svc.Turn(context.Background())
	require.NoError(t, err)
	assert.False(t, took, "the next turn is an interval away")
	_, err = f.pool.Exec(f.ctx, `UPDATE janitor_turn SET passed_at = now() - interval '300 milliseconds'`)
	require.NoError(t, err)
	n, took, err = svc.Turn(f.ctx)
	require.NoError(t, err)
	require.True(t, took)
	assert.Equal(t, 1, n, "the next pass settles it")
	r, ok = f.active(id)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "released")
}
