package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

func metricValue(t *testing.T, m *metrics.Metrics, name string, match map[string]string) float64 {
	t.Helper()
	v, err := m.Value(name, match)
	require.NoError(t, err)
	return v
}

// histogramSum is the sum of one histogram series' observations.
func histogramSum(t *testing.T, m *metrics.Metrics, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if v, ok := match[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			sum += mt.GetHistogram().GetSampleSum()
		}
	}
	return sum
}

// One job through claim, lease loss, resume and cancel moves each metric the
// agent records. These are claim latency (by the database clock), resumes,
// lease losses, and the attempt and job durations at the terminal end.
func TestMetricsFollowAJob(t *testing.T) {
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	j := submit(t, st, "noop", `{"wait":true,"stdout":["working"],"checkpoint":"h"}`)
	// Due 30 s ago and submitted a minute ago, before any agent was around.
	_, err := st.Pool().Exec(ctx, `UPDATE active_jobs SET run_after = now() - interval '30 seconds' WHERE job_id = $1`, j.ID)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE jobs SET created_at = now() - interval '60 seconds' WHERE id = $1`, j.ID)
	require.NoError(t, err)

	m := metrics.New()
	a := startAgent(t, st, "a1", 2, func(c *claim.Config) { c.Metrics = m })
	a.waitCheckpointed(t, j.ID)
	noop := map[string]string{"command": "noop"}
	assert.Equal(t, 1.0, metricValue(t, m, "tether_claim_latency_seconds", noop))
	assert.GreaterOrEqual(t, histogramSum(t, m, "tether_claim_latency_seconds", noop), 30.0)
	assert.Equal(t, 0.0, metricValue(t, m, "tether_job_resumes_total", nil))

	// Released as the janitor releases a stale job. The old runner is fenced
	// off, and the agent claims the job again to resume it.
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL, lease = lease + 1,
		released_at = now(), release_reason = 'test', resume = true WHERE job_id = $1`, j.ID)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `SELECT pg_notify('tether_jobs', 'noop')`)
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 20*time.Second, "lease_lost")
	a.waitResumed(t, j.ID)
	assert.Equal(t, 1.0, metricValue(t, m, "tether_job_resumes_total", noop), "one resume")
	assert.Equal(t, 1.0, metricValue(t, m, "tether_leases_lost_total", nil), "one lease loss")
	assert.Equal(t, 1.0, metricValue(t, m, "tether_leases_lost_total", map[string]string{"reason": metrics.LeaseLostHeartbeat}),
		"the old runner was stopped while its plugin call ran")
	assert.Equal(t, 2.0, metricValue(t, m, "tether_claim_latency_seconds", noop))
	assert.Less(t, histogramSum(t, m, "tether_claim_latency_seconds", noop), 45.0, "the resume waited from its release, not from the submit")
	assert.Equal(t, 0.0, metricValue(t, m, "tether_attempt_duration_seconds", nil), "the lost attempt's end is not this runner's to record")

	_, err = st.Cancel(ctx, j.ID, "done")
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusCanceled)
	a.waitIdle(t)
	canceled := map[string]string{"command": "noop", "outcome": "canceled"}
	assert.Equal(t, 1.0, metricValue(t, m, "tether_attempt_duration_seconds", canceled))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_job_duration_seconds", map[string]string{"command": "noop", "status": "canceled"}))
	assert.GreaterOrEqual(t, histogramSum(t, m, "tether_job_duration_seconds", nil), 60.0, "from submit, by the database clock")
	assert.Less(t, histogramSum(t, m, "tether_job_duration_seconds", nil), 120.0)
}

// A handoff counts each released job under its reason.
func TestHandOffCountsReleases(t *testing.T) {
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	m := metrics.New()
	a := startAgent(t, st, "a1", 2, func(c *claim.Config) { c.Metrics = m })
	j := submit(t, st, "noop", `{"wait":true,"stdout":["working"],"checkpoint":"h"}`)
	a.waitCheckpointed(t, j.ID)
	a.svc.StopClaiming()
	n, err := a.svc.HandOff(ctx, "test handoff")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, 1.0, metricValue(t, m, "tether_job_releases_total", map[string]string{"reason": metrics.ReleaseHandoff}))
	assert.Equal(t, 0.0, metricValue(t, m, "tether_leases_lost_total", nil))
}
