package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// Three agents run 60 jobs (and 6 ECS jobs against the emulator) while
// agents are repeatedly killed with SIGKILL and replaced, sometimes under the
// same name (restart path), sometimes under a new one (silence path). Every
// job must end exactly once and truthfully. No resumable work may start
// twice and no ECS task may be launched twice.
func TestChaosKillAndReplaceAgents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	em, emURL := startEmulator(t)
	h := newECSHarness(t, pgtest.URL(t), fast(), emURL)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))

	live := []*agentProc{h.startAgent(ctx, "chaos-1"), h.startAgent(ctx, "chaos-2"), h.startAgent(ctx, "chaos-3")}
	nextName := 4

	const ecsLines = 20
	var resumable, shell, ecsJobs []string
	for range 6 {
		ecsJobs = append(ecsJobs, h.submitECS(ctx, countingScript(ecsLines, time.Duration(150+rng.IntN(150))*time.Millisecond), nil))
	}
	for i := range 60 {
		if i%3 == 2 {
			shell = append(shell, h.submitShell(ctx, time.Duration(2000+rng.IntN(2000))*time.Millisecond))
		} else {
			resumable = append(resumable, h.submitResumable(ctx, time.Duration(3000+rng.IntN(3000))*time.Millisecond))
		}
	}
	all := append(append(append([]string(nil), resumable...), shell...), ecsJobs...)

	// killed generations, to find the shell jobs that were on a killed agent.
	killed := map[string]bool{}
	chaosEnd := time.Now().Add(14 * time.Second)
	kills, sameName := 0, 0
	for time.Now().Before(chaosEnd) {
		sleep(ctx, time.Duration(1200+rng.IntN(1300))*time.Millisecond)
		i := rng.IntN(len(live))
		victim := live[i]
		killed[victim.gen] = true
		h.kill9(victim)
		// Alternate: even kills restart under the same name (restart path),
		// odd ones bring a new name (the victim's name goes silent).
		name := victim.name
		if kills%2 == 0 {
			sameName++
		} else {
			name = fmt.Sprintf("chaos-%d", nextName)
			nextName++
		}
		kills++
		live[i] = h.startAgent(ctx, name)
		t.Logf("killed %s (gen %s), replaced by %s (gen %s)", victim.name, victim.gen, live[i].name, live[i].gen)
	}
	require.GreaterOrEqual(t, kills, 4, "too few kills to exercise both paths")

	h.waitTerminal(ctx, all, 40*time.Second)

	for _, id := range resumable {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "resumable job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		assert.Equal(t, 1, h.startCount(id), "resumable job %s: work starts; events: %s", id, h.eventSummary(ctx, id))
		h.checkTimeline(ctx, id)
	}
	for _, id := range ecsJobs {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "ecs job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		assert.Equal(t, 1, em.Launches(ecs.StartedBy(id, 0)), "ecs job %s: launches; events: %s", id, h.eventSummary(ctx, id))
		h.checkTimeline(ctx, id)
		h.assertLinesOnce(ctx, id, ecsLines) // output is stored before a handle may point past it
	}
	onKilled := 0
	for _, id := range shell {
		j := h.job(ctx, id)
		final := h.checkTimeline(ctx, id)
		var holder string
		for _, e := range h.events(ctx, id) {
			if e.Kind == "running" {
				holder = e.Generation
			}
		}
		switch {
		// On a killed agent, unless that agent finished it before it died.
		case killed[holder] && (j.Status != store.StatusSucceeded || final.Generation != holder):
			onKilled++
			assert.Equal(t, store.StatusFailed, j.Status, "shell job %s ran on a killed agent; events: %s", id, h.eventSummary(ctx, id))
			assert.True(t, strings.Contains(j.Error, "awol") || strings.Contains(j.Error, "agent restarted"),
				"shell job %s on a killed agent: error %q should say awol or agent restarted", id, j.Error)
		default:
			assert.Equal(t, store.StatusSucceeded, j.Status, "shell job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		}
		if pgid := h.shellPGID(id); pgid > 0 {
			assert.Empty(t, groupMembers(pgid), "shell job %s: process group %d still has live processes", id, pgid)
		}
	}
	t.Logf("%d kills (%d under the same name); %d shell jobs were on a killed agent", kills, sameName, onKilled)
}
