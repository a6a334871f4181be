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
	f.submit("other", "sh") // not configured here: not exported by this agent

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
	assert.Equal(t, []string{"c", "idle"}, commands, "one series per configured command, none for others")

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
