package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// Every fault of the hostile emulator at once, infrastructure stops
// included and frequent, through real agents, one of which is killed at a
// random moment. Every job still succeeds, each task index is launched
// once plus once per infrastructure relaunch its result reports, and each
// job's stdout is what its launches printed, each line once: a prefix of
// "line 1…n" per interrupted launch, then the whole of it from the last.
func TestECSHostileAllFaultsWithKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	opts := emulator.HostileOptions()
	opts.Seed = seed
	opts.StopTimeout = time.Second
	opts.InfraStopRate = 0.3
	opts.InfraStopDelay = 2 * time.Second
	em := emulator.New(opts)
	url, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = em.Close() })
	h := newECSHarness(t, pgtest.URL(t), ecsKillTimings(), url)

	a := h.startAgent(ctx, "hostile-a")
	b := h.startAgent(ctx, "hostile-b")
	const jobs, lines = 8, 30
	var ids []string
	for range jobs {
		ids = append(ids, h.submitECS(ctx, countingScript(lines, 100*time.Millisecond), map[string]any{"max_infra_relaunches": 10}))
	}
	sleep(ctx, time.Duration(1000+rng.IntN(3000))*time.Millisecond)
	victim := a
	if rng.IntN(2) == 1 {
		victim = b
	}
	t.Logf("kill -9 %s", victim.name)
	h.kill9(victim)

	h.waitTerminal(ctx, ids, 120*time.Second)
	relaunches := 0
	for _, id := range ids {
		j := h.job(ctx, id)
		if !assert.Equal(t, store.StatusSucceeded, j.Status, "job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id)) {
			continue
		}
		var out ecs.Output
		require.NoError(t, json.Unmarshal(j.Result, &out))
		relaunch := out.Tasks[0].Relaunch
		relaunches += relaunch
		assert.Equal(t, 1+relaunch, em.Launches(ecs.StartedBy(id, 0)), "job %s: launches = 1 + infrastructure relaunches", id)
		runs, err := launchRuns(h.stdout(ctx, id), lines)
		assert.NoError(t, err, "job %s", id)
		assert.LessOrEqual(t, runs, 1+relaunch, "job %s: no more runs of output than launches", id)
		h.checkTimeline(ctx, id)
	}
	calls, throttled := em.Calls()
	t.Logf("%d infrastructure relaunches; calls %v; throttled %v", relaunches, calls, throttled)
}

// launchRuns checks that out is consecutive runs "line 1"…"line k", the
// last one complete (k = n), and returns how many runs there are.
func launchRuns(out string, n int) (int, error) {
	got := strings.Split(strings.TrimRight(out, "\n"), "\n")
	runs, next := 0, 1
	for i, l := range got {
		var k int
		if _, err := fmt.Sscanf(l, "line %d", &k); err != nil {
			return 0, fmt.Errorf("line %d is %q", i+1, l)
		}
		switch {
		case k == 1:
			runs, next = runs+1, 2
		case k == next:
			next++
		default:
			return 0, fmt.Errorf("line %d is %q, expected line %d or a new launch's line 1 (a line lost or copied twice)", i+1, l, next)
		}
	}
	if next != n+1 {
		return 0, fmt.Errorf("the last launch's output ends at line %d of %d", next-1, n)
	}
	return runs, nil
}
