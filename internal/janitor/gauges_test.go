package janitor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
)

// A pass sets the queue gauges of every configured command from the database.
// Due unowned jobs count, and a claimed one or one not yet due does not. The
// oldest due job's age is by the database clock.
func TestPassSetsQueueGauges(t *testing.T) {
	f := newFixture(t)
	h := f.agentServing("a", "a-g1", []string{"c", "idle"}, map[string][]string{"sh": shCaps})
	m := metrics.New()
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: h, Metrics: m,
		Commands: map[string]json.RawMessage{"c": nil, "idle": nil}})

	f.claimed(h, "c", "sh", true) // held: not in the queue
	old := f.submit("c", "sh")
	f.submit("c", "sh")
	f.exec(`UPDATE active_jobs SET run_after = now() - interval '90 seconds' WHERE job_id = $1`, old)
	later := f.submit("c", "sh")
	f.exec(`UPDATE active_jobs SET run_after = now() + interval '1 hour' WHERE job_id = $1`, later)
	f.submit("other", "sh") // not configured here, but queued: exported too

	_, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 2.0, metricValue(t, m, "tether_queue_jobs", "c"), "two due jobs: not the held one, not the one due later")
	assert.Equal(t, 0.0, metricValue(t, m, "tether_queue_jobs", "idle"))
	assert.Equal(t, 0.0, metricValue(t, m, "tether_queue_oldest_seconds", "idle"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_command_live_agents", "c"), "agent a claims c and idle")
	assert.Equal(t, 1.0, metricValue(t, m, "tether_command_live_agents", "idle"))
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	var commands []string
	for _, mf := range mfs {
		if mf.GetName() == "tether_queue_jobs" {
			for _, mt := range mf.GetMetric() {
				commands = append(commands, mt.GetLabel()[0].GetValue())
			}
		}
	}
	assert.Equal(t, []string{"c", "idle", "other"}, commands, "one series per command the database knows")
	assert.Equal(t, 1.0, metricValue(t, m, "tether_queue_jobs", "other"))
	assert.Equal(t, 0.0, metricValue(t, m, "tether_command_live_agents", "other"), "no agent serves other")

	age := metricValue(t, m, "tether_queue_oldest_seconds", "c")
	assert.GreaterOrEqual(t, age, 90.0)
	assert.Less(t, age, 150.0)

	// A job released for resuming waits from its release, not its submit.
	f.exec(`UPDATE active_jobs SET run_after = now() - interval '1 hour', released_at = now() - interval '10 seconds', resume = true WHERE job_id = $1`, old)
	_, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	age = metricValue(t, m, "tether_queue_oldest_seconds", "c")
	assert.Less(t, age, 90.0, "the other due job (submitted now) and the release 10 s ago")
	assert.GreaterOrEqual(t, age, 10.0)
	assert.Equal(t, 0.0, metricValue(t, m, "tether_cleanups_oldest_seconds", ""), "no Cleanup queued")

	// Agent a goes silent past stale_job. Nobody serves the commands now.
	f.agentSilence("a", 10*time.Minute)
	_, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 0.0, metricValue(t, m, "tether_command_live_agents", "c"))
}

// The incident of issue 27: the only agents of command report are gone
// (one stopped, one killed long ago, and one whose row was pruned), 20 of
// its jobs have waited 18 minutes, and the agent measuring serves only c.
// The gauges still say so, for TetherCommandUnserved and TetherQueueTooOld
// to fire: every command an agents row announces or with queued jobs is
// measured, not only the configured ones.
func TestQueueGaugesCoverCommandsWhoseAgentsAreGone(t *testing.T) {
	f := newFixture(t)
	h := f.agentServing("a", "a-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	stopped := f.agentServing("r1", "r1-g1", []string{"report"}, map[string][]string{"sh": shCaps})
	require.NoError(t, f.st.SetAgentState(f.ctx, stopped, "stopped"))
	f.agentServing("r2", "r2-g1", []string{"report", "audit"}, map[string][]string{"sh": shCaps})
	f.agentSilence("r2", 3*time.Hour)
	m := metrics.New()
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: h, Metrics: m,
		Commands: map[string]json.RawMessage{"c": nil}})
	for range 20 {
		f.due(f.submit("report", "sh"), 18*time.Minute)
	}
	f.due(f.submit("pruned", "sh"), time.Minute) // no agents row announces it any more

	_, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 20.0, metricValue(t, m, "tether_queue_jobs", "report"))
	assert.InDelta(t, 18*60, metricValue(t, m, "tether_queue_oldest_seconds", "report"), 30)
	assert.Equal(t, 0.0, metricValue(t, m, "tether_command_live_agents", "report"), "its agents are stopped or silent")
	assert.Equal(t, 1.0, metricValue(t, m, "tether_queue_jobs", "pruned"))
	assert.Equal(t, 0.0, metricValue(t, m, "tether_command_live_agents", "pruned"))
	assert.Equal(t, 0.0, metricValue(t, m, "tether_queue_jobs", "audit"), "announced by an agents row, nothing queued")
	assert.Equal(t, 0.0, metricValue(t, m, "tether_command_live_agents", "audit"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_command_live_agents", "c"))
}

// The commands measured are capped, the configured ones first: a database
// with more distinct commands than QueueCommandCap costs one bounded
// statement and exports at most that many series.
func TestQueueGaugesCapTheCommands(t *testing.T) {
	f := newFixture(t)
	h := f.agentServing("a", "a-g1", []string{"zz-mine"}, map[string][]string{"sh": shCaps})
	m := metrics.New()
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: h, Metrics: m,
		Commands: map[string]json.RawMessage{"zz-mine": nil}})
	f.exec(`WITH j AS (
	    INSERT INTO jobs (id, command, plugin, status, created_at, updated_at)
	    SELECT 'many-' || g, 'c-' || lpad(g::text, 4, '0'), 'sh', 'queued', now(), now()
	    FROM generate_series(1, $1) g
	    RETURNING id, command, plugin, created_at
	)
	INSERT INTO active_jobs (job_id, command, plugin, run_after) SELECT id, command, plugin, created_at FROM j`, QueueCommandCap+20)

	_, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	var series int
	for _, mf := range mfs {
		if mf.GetName() == "tether_queue_jobs" {
			series = len(mf.GetMetric())
		}
	}
	assert.Equal(t, QueueCommandCap, series)
	assert.Equal(t, 0.0, metricValue(t, m, "tether_queue_jobs", "zz-mine"), "the configured command is measured first")
	assert.Equal(t, 1.0, metricValue(t, m, "tether_queue_jobs", "c-0001"))
}

// tether_agents counts the cluster's agents by state, as the store judges
// who is live: a killed agent (silent, never marked stopped) is lost for
// an hour, then counted nowhere while its row waits for pruning; a drained
// one that marked itself stopped is never lost.
func TestPassSetsAgentGauges(t *testing.T) {
	f := newFixture(t)
	h := f.agentServing("a", "a-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	f.agentServing("b", "b-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	d := f.agentServing("d", "d-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	require.NoError(t, f.st.SetAgentState(f.ctx, d, "draining"))
	f.agentServing("killed", "k-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	f.agentSilence("killed", 5*time.Minute)
	f.agentServing("ancient", "x-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	f.agentSilence("ancient", 2*time.Hour)
	s := f.agentServing("drained", "s-g1", []string{"c"}, map[string][]string{"sh": shCaps})
	require.NoError(t, f.st.SetAgentState(f.ctx, s, "stopped"))
	f.agentSilence("drained", 5*time.Minute)
	m := metrics.New()
	assert.Equal(t, 0.0, metricValue(t, m, "tether_agents", metrics.AgentLost), "exported at 0 before the first pass")
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: h, Metrics: m, StaleJob: time.Minute,
		Commands: map[string]json.RawMessage{"c": nil}})

	_, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 2.0, metricValue(t, m, "tether_agents", metrics.AgentRunning))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_agents", metrics.AgentDraining))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_agents", metrics.AgentLost), "killed only")

	// b is killed too; killed comes back.
	f.agentSilence("b", 2*time.Minute)
	f.agentSilence("killed", 0)
	_, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 2.0, metricValue(t, m, "tether_agents", metrics.AgentRunning))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_agents", metrics.AgentLost), "b")
}

func TestCauseOf(t *testing.T) {
	live := Owner{Exists: true, Generation: "g1", State: "running"}
	dead := live
	dead.Dead = true
	stopped := live
	stopped.State = "stopped"
	for _, tc := range []struct {
		name string
		kind Kind
		in   Input
		want Cause
	}{
		{"nothing", None, Input{}, CauseNone},
		{"cancel", Cancel, Input{Owner: live, AgentGeneration: "g1"}, CauseCanceled},
		{"pending timeout", FailPending, Input{}, CauseTimeout},
		{"unclaimed", FailUnclaimed, Input{}, CauseTimeout},
		{"awol", FailAWOL, Input{}, CauseTimeout},
		{"active timeout", FailActiveTimeout, Input{Owner: live, AgentGeneration: "g1"}, CauseTimeout},
		{"no agents row", Release, Input{AgentGeneration: "g1"}, CauseAgentGone},
		{"stopped", Requeue, Input{Owner: stopped, AgentGeneration: "g1"}, CauseAgentStopped},
		{"restarted", Fail, Input{Owner: live, AgentGeneration: "g0"}, CauseAgentRestarted},
		{"dead", Release, Input{Owner: dead, AgentGeneration: "g1"}, CauseAgentDead},
		{"silent", Release, Input{Owner: live, AgentGeneration: "g1"}, CauseAgentSilent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, CauseOf(tc.kind, tc.in))
		})
	}
}
