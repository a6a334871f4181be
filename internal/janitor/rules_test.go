package janitor

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// agentServing registers name (generation gen) serving commands with the
// given plugins' capabilities.
func (f *fixture) agentServing(name, gen string, commands []string, plugins map[string][]string) store.Holder {
	f.t.Helper()
	type entry struct {
		Version      string   `json:"version"`
		Capabilities []string `json:"capabilities"`
	}
	m := map[string]entry{}
	for p, caps := range plugins {
		m[p] = entry{Version: "1", Capabilities: caps}
	}
	raw, err := json.Marshal(m)
	require.NoError(f.t, err)
	h := store.Holder{Name: name, Generation: gen}
	_, err = f.st.RegisterAgent(f.ctx, store.Registration{Holder: h, Capacity: 1000, Commands: commands, Plugins: raw})
	require.NoError(f.t, err)
	return h
}

// due makes a queued job look due since d ago.
func (f *fixture) due(id string, d time.Duration) {
	f.exec(`UPDATE active_jobs SET run_after = now() - $2::float8 * interval '1 second' WHERE job_id = $1`, id, d.Seconds())
}

// A running job of a silent holder is released only when a live, non-draining
// agent serves its command with a copy of its plugin that can resume.
// Otherwise it fails, saying which part is missing.
func TestReleaseNeedsALiveAgentServingTheCommand(t *testing.T) {
	f := newFixture(t)
	me := f.agentServing("me", "me-g1", []string{"c"}, map[string][]string{"res": resCaps, "sh": shCaps})
	f.agentServing("drainer", "dr-g1", []string{"d"}, map[string][]string{"res": resCaps})
	f.agentServing("noresume", "nr-g1", []string{"n"}, map[string][]string{"res": shCaps})
	f.agentServing("noplugin", "np-g1", []string{"m"}, map[string][]string{"sh": shCaps})
	f.agentServing("silent", "si-g1", []string{"s"}, map[string][]string{"res": resCaps})
	dead := f.agentServing("dead", "dead-g1", []string{"c", "d", "n", "m", "s", "x"}, map[string][]string{"res": resCaps})

	ids := map[string]string{}
	for _, c := range []string{"c", "d", "n", "m", "s", "x"} {
		ids[c], _ = f.claimed(dead, c, "res", true)
		f.silence(ids[c], 10*time.Minute)
	}
	f.exec(`UPDATE agents SET state = 'draining' WHERE name = 'drainer'`)
	f.agentSilence("silent", 10*time.Minute)
	f.agentSilence("dead", 10*time.Minute)

	// This janitor loads res itself, but its agents row speaks for it. It
	// serves only c.
	plugins := newFakePlugins(plugin.Info{Name: "res", Capabilities: resCaps})
	svc := New(f.pool, plugins, Config{Logger: quiet, Holder: me, Commands: map[string]json.RawMessage{"c": nil, "x": nil}})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 6, n)

	r, ok := f.active(ids["c"])
	require.True(t, ok)
	assert.Nil(t, r.Agent, "c: released")
	assert.Equal(t, store.StatusRunning, f.job(ids["c"]).Status)
	for c, why := range map[string]string{
		"d": `no live agent serves command "d"`, // only a draining one
		"s": `no live agent serves command "s"`, // only a silent one
		"x": `no live agent serves command "x"`, // configured here, but not claimed here
		"n": `plugin "res" does not declare resume on any live agent serving command "n"`,
		"m": `plugin "res" is not loaded by any live agent serving command "m"`,
	} {
		j := f.job(ids[c])
		assert.Equal(t, store.StatusFailed, j.Status, c)
		assert.Equal(t, "awol: agent dead silent for 600s ("+why+", so the job cannot be resumed)", j.Error, c)
		assert.Equal(t, jobstate.Retriable, j.ErrorClass, c)
		assert.True(t, f.cleanupQueued(ids[c]), c)
	}
}

// The janitor's own process, while it has no agents row, counts for the
// commands it is configured with and the plugins it loaded — and no others.
func TestUnregisteredJanitorCountsForItsOwnCommands(t *testing.T) {
	f := newFixture(t)
	dead := f.agentServing("dead", "dead-g1", []string{"c", "c2"}, map[string][]string{"res": resCaps})
	mine, _ := f.claimed(dead, "c", "res", true)
	other, _ := f.claimed(dead, "c2", "res", true)
	f.agentSilence("dead", 10*time.Minute)
	f.silence(mine, 10*time.Minute)
	f.silence(other, 10*time.Minute)

	me := store.Holder{Name: "me", Generation: "me-g1"}
	plugins := newFakePlugins(plugin.Info{Name: "res", Capabilities: resCaps})
	svc := New(f.pool, plugins, Config{Logger: quiet, Holder: me, Commands: map[string]json.RawMessage{"c": nil}})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	r, ok := f.active(mine)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "released: this process serves c and can resume res")
	assert.Equal(t, store.StatusFailed, f.job(other).Status)
	assert.Contains(t, f.job(other).Error, `no live agent serves command "c2"`)
}

// A draining janitor's agent does not count as a resumer of other agents'
// jobs, even for its own commands.
func TestDrainingJanitorIsNotAResumer(t *testing.T) {
	f := newFixture(t)
	me := f.agentServing("me", "me-g1", []string{"c"}, map[string][]string{"res": resCaps})
	dead := f.agentServing("dead", "dead-g1", []string{"c"}, map[string][]string{"res": resCaps})
	id, _ := f.claimed(dead, "c", "res", true)
	f.agentSilence("dead", 10*time.Minute)
	f.silence(id, 10*time.Minute)
	require.NoError(t, f.st.SetAgentState(f.ctx, me, "draining"))

	plugins := newFakePlugins(plugin.Info{Name: "res", Capabilities: resCaps})
	svc := New(f.pool, plugins, Config{Logger: quiet, Holder: me, Commands: map[string]json.RawMessage{"c": nil}})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, store.StatusFailed, f.job(id).Status)
	assert.Contains(t, f.job(id).Error, `no live agent serves command "c"`)
}

// A queued job nobody can claim fails after awol_timeout. A backlog of a
// served command never does, and a pending_timeout governs when set.
func TestQueuedJobsOfUnservedCommandsFailAfterAWOLTimeout(t *testing.T) {
	f := newFixture(t)
	me := f.agentServing("me", "me-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	f.agentServing("gone", "gone-g1", []string{"orphan"}, nil)
	f.agentSilence("gone", 2*time.Hour)
	f.agentServing("drainer", "dr-g1", []string{"drained"}, nil)
	f.exec(`UPDATE agents SET state = 'draining' WHERE name = 'drainer'`)

	backlog := f.submit("c", "sh")
	f.due(backlog, 3*time.Hour)
	orphan := f.submit("orphan", "sh")
	f.due(orphan, 2*time.Hour)
	recent := f.submit("orphan", "sh")
	f.due(recent, 30*time.Minute)
	drained := f.submit("drained", "sh")
	f.due(drained, 2*time.Hour)
	configured := f.submit("cfgonly", "sh") // known only from this janitor's configuration
	f.due(configured, 2*time.Hour)
	unknown := f.submit("nobody", "sh") // known to no agent row and no configuration
	f.due(unknown, 2*time.Hour)
	waitPending, _, err := f.st.Submit(f.ctx, store.SubmitParams{Command: "orphan", Plugin: "sh", Limits: limits.Set{PendingTimeout: 3 * time.Hour}})
	require.NoError(t, err)
	f.due(waitPending.ID, 2*time.Hour)
	pastPending, _, err := f.st.Submit(f.ctx, store.SubmitParams{Command: "orphan", Plugin: "sh", Limits: limits.Set{PendingTimeout: 90 * time.Minute}})
	require.NoError(t, err)
	f.due(pastPending.ID, 2*time.Hour)

	m := metrics.New()
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: me, Metrics: m,
		Commands: map[string]json.RawMessage{"c": nil, "cfgonly": nil}})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 4, n)

	for c, id := range map[string]string{"orphan": orphan, "drained": drained, "cfgonly": configured} {
		j := f.job(id)
		assert.Equal(t, store.StatusFailed, j.Status, c)
		assert.Equal(t, fmt.Sprintf("awol: no agent claimed it within awol_timeout (1h0m0s); no live agent serves command %q", c), j.Error)
		assert.Equal(t, jobstate.Permanent, j.ErrorClass, c)
		assert.False(t, f.cleanupQueued(id), "nothing ran: no Cleanup")
		assert.Len(t, f.events(id, "failed"), 1)
	}
	assert.Equal(t, store.StatusFailed, f.job(pastPending.ID).Status)
	assert.Contains(t, f.job(pastPending.ID).Error, "pending timeout")
	for _, id := range []string{backlog, recent, unknown, waitPending.ID} {
		assert.Equal(t, store.StatusQueued, f.job(id).Status, id)
	}
	assert.Equal(t, 3.0, metricValue(t, m, "tether_janitor_actions_total", "fail_unclaimed"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_janitor_actions_total", "fail_pending"))

	// Once an agent serves the command, its jobs wait however long.
	f.agentServing("back", "back-g1", []string{"orphan"}, nil)
	f.due(recent, 5*time.Hour)
	n, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, store.StatusQueued, f.job(recent).Status)
}

// A pass that meets rows it leaves alone (here corrupt rows whose job is
// already terminal) still ends, and still settles the rest.
func TestPassEndsWhenBatchesHoldRowsItLeavesAlone(t *testing.T) {
	f := newFixture(t)
	me := f.agent("me", "me-g1", map[string][]string{"sh": shCaps})
	dead := f.agent("dead", "dead-g1", nil)
	var odd []string
	for range 5 {
		id, _ := f.claimed(dead, "c", "sh", true)
		odd = append(odd, id)
	}
	f.exec(`UPDATE jobs SET status = 'succeeded' WHERE id = ANY($1)`, odd)
	real, _ := f.claimed(dead, "c", "sh", true)
	f.exec(`DELETE FROM agents WHERE name = 'dead'`) // gone: every held row is suspicious

	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: me, BatchSize: 2})
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		n, err = svc.Pass(f.ctx)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the pass did not end")
	}
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, store.StatusFailed, f.job(real).Status)
}

// ReleasePrevious judges resumability from the live agents too. This process
// lost the plugin, and another live agent serving the command can resume it.
// The earlier generation's own row does not count.
func TestReleasePreviousCountsOtherLiveAgents(t *testing.T) {
	f := newFixture(t)
	g1 := f.agentServing("a", "a-g1", []string{"c", "c2"}, map[string][]string{"res": resCaps})
	f.agentServing("b", "b-g1", []string{"c"}, map[string][]string{"res": resCaps})
	resumable, lease := f.claimed(g1, "c", "res", true)
	lonely, _ := f.claimed(g1, "c2", "res", true)

	g2 := store.Holder{Name: "a", Generation: "a-g2"}
	noPlugins := func(string) (plugin.Info, bool) { return plugin.Info{}, false }
	n, err := ReleasePrevious(f.ctx, f.pool, g2, noPlugins)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	r, ok := f.active(resumable)
	require.True(t, ok)
	assert.Nil(t, r.Agent)
	assert.Equal(t, lease+1, r.Lease)
	require.NotNil(t, r.Reason)
	assert.Equal(t, "agent restarted", *r.Reason)

	// a-g1's row (still fresh, state running) announced c2 and res. It is the
	// process being replaced, not a resumer.
	assert.Equal(t, store.StatusFailed, f.job(lonely).Status)
	assert.Equal(t, `agent restarted (no live agent serves command "c2", so the job cannot be resumed)`, f.job(lonely).Error)
}

// With its commands named, this process counts only for them.
func TestReleasePreviousWithCommands(t *testing.T) {
	f := newFixture(t)
	g1 := f.agentServing("a", "a-g1", []string{"c", "c2"}, map[string][]string{"res": resCaps})
	mine, _ := f.claimed(g1, "c", "res", true)
	dropped, _ := f.claimed(g1, "c2", "res", true)
	caps := func(name string) (plugin.Info, bool) {
		if name == "res" {
			return plugin.Info{Name: "res", Capabilities: resCaps}, true
		}
		return plugin.Info{}, false
	}
	n, err := ReleasePreviousWith(f.ctx, f.pool, PreviousConfig{
		Holder: store.Holder{Name: "a", Generation: "a-g2"}, Caps: caps, Commands: []string{"c"},
	})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	r, ok := f.active(mine)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "released")
	assert.Equal(t, store.StatusFailed, f.job(dropped).Status)
	assert.Contains(t, f.job(dropped).Error, `no live agent serves command "c2"`)
}

// Found by the ECS outage test. When the database returns after an outage
// longer than stale_job, every agents row looks silent until the heartbeats
// get through. The janitor's own agent is alive (it runs the pass), so a
// stale resumable job of a command it serves is released, not failed.
func TestJanitorCountsItselfLiveAfterAnOutage(t *testing.T) {
	f := newFixture(t)
	me := f.agentServing("me", "me-g1", []string{"c"}, map[string][]string{"res": resCaps})
	other := f.agentServing("other", "other-g1", []string{"c"}, map[string][]string{"res": resCaps})
	id, _ := f.claimed(other, "c", "res", true)
	f.silence(id, 10*time.Minute)
	f.agentSilence("other", 10*time.Minute)
	f.agentSilence("me", 10*time.Minute) // its heartbeat has not got through yet

	svc := New(f.pool, newFakePlugins(plugin.Info{Name: "res", Capabilities: resCaps}), Config{Logger: quiet, Holder: me, Commands: map[string]json.RawMessage{"c": nil}})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	r, ok := f.active(id)
	require.True(t, ok, "released, not failed")
	assert.Nil(t, r.Agent)
	assert.Equal(t, store.StatusRunning, f.job(id).Status)
}

// A command whose agents went silent only recently (as every agent looks
// right after a database restart) is not unserved. Its backlog waits.
func TestUnclaimedRuleWaitsOutRecentSilence(t *testing.T) {
	f := newFixture(t)
	me := f.agentServing("me", "me-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	f.agentServing("quiet", "q-g1", []string{"busy"}, nil)
	f.agentSilence("quiet", 30*time.Minute) // past stale_job, within awol_timeout
	f.agentSilence("me", 30*time.Minute)
	id := f.submit("busy", "sh")
	f.due(id, 3*time.Hour)
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: me, Commands: map[string]json.RawMessage{"c": nil}})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, store.StatusQueued, f.job(id).Status)
}
