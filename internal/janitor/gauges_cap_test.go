package janitor

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
)

// queueSome puts n due queued jobs of command c in the database, the k-th due
// k × 0.1 s later than the first, which has waited an hour. It writes jobs,
// active rows and events as a submit writes them (see job_submit.sql).
func (f *fixture) queueSome(c string, n int) {
	f.t.Helper()
	f.exec(`WITH j AS (
	    INSERT INTO jobs (id, command, plugin, status, created_at, updated_at)
	    SELECT 'q-' || lpad(g::text, 8, '0'), $1, 'sh', 'queued',
	           now() - interval '1 hour' + g * interval '100 milliseconds', now()
	    FROM generate_series(0, $2 - 1) g
	    RETURNING id, command, plugin, created_at
	), a AS (
	    INSERT INTO active_jobs (job_id, command, plugin, run_after) SELECT id, command, plugin, created_at FROM j
	)
	INSERT INTO job_events (job_id, kind) SELECT id, 'submitted' FROM j`, c, n)
}

// The queue gauge counts at most QueueCountCap due jobs per command, so a
// pass costs the same at 10,005 queued jobs as at a million. The count then
// reads "at least the cap" (the metric's help says so). The oldest job's age
// is still exact, because it is among the rows counted.
func TestQueueGaugeCountsUpToTheCap(t *testing.T) {
	f := newFixture(t)
	h := f.agentServing("a", "a-g1", []string{"c", "few"}, map[string][]string{"sh": shCaps})
	m := metrics.New()
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: h, Metrics: m,
		Commands: map[string]json.RawMessage{"c": nil, "few": nil}})
	f.queueSome("c", QueueCountCap+5)
	f.submit("few", "sh")
	f.submit("few", "sh")

	_, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, float64(QueueCountCap), metricValue(t, m, "tether_queue_jobs", "c"), "counted up to the cap")
	assert.Equal(t, 2.0, metricValue(t, m, "tether_queue_jobs", "few"), "below the cap: the count")
	age := metricValue(t, m, "tether_queue_oldest_seconds", "c")
	assert.InDelta(t, 3600, age, 60, "the job queued an hour ago, the first of the index range")

	// The head of the range is a job released for resuming 10 s ago (its
	// run_after is older than any). It waits since its release, and the
	// oldest wait is the next job's, queued 3599.9 s ago (not the release's
	// 10 s, nor the first run_after's 7200 s).
	f.exec(`UPDATE active_jobs SET run_after = now() - interval '2 hours', released_at = now() - interval '10 seconds',
	        resume = true WHERE job_id = 'q-00000000'`)
	_, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	age = metricValue(t, m, "tether_queue_oldest_seconds", "c")
	assert.InDelta(t, 3600, age, 60)
	assert.Equal(t, float64(QueueCountCap), metricValue(t, m, "tether_queue_jobs", "c"))

	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	var help string
	for _, mf := range mfs {
		if mf.GetName() == "tether_queue_jobs" {
			help = mf.GetHelp()
		}
	}
	assert.True(t, strings.Contains(help, strconv.Itoa(QueueCountCap)+" means at least"),
		"the help says where the count stops and what the cap means: %q", help)
}
