package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
)

// Every labelled counter an agent registers has series at 0 from the
// start, for each label value it knows then. A series that first appears at
// 5 has no increase(): TetherLeaseLosses missed the first 5 lost leases.
func TestLabelledCountersStartAtZero(t *testing.T) {
	m := metrics.New()
	janitor.New(nil, nil, janitor.Config{Metrics: m})
	m.Known(metrics.Agent{Version: "1.2.3", Capacity: 7, Commands: []string{"report"}, Plugins: []string{"sh"}})
	m.KnownRoutes([]string{"GET /api/v1/jobs", metrics.UnmatchedRoute})
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	gathered := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		gathered[mf.GetName()] = mf
	}
	counters := 0
	for _, name := range m.Names() {
		mf, ok := gathered[name]
		if !ok {
			// Not gathered: a vector with no series. Only histograms by
			// command and outcome may wait for their first observation, and
			// the queue gauges for the first janitor pass (a 0 before it
			// would claim an empty queue and no live agent), and a plugin's
			// health for its first check, which runs at start (a 0 or a 1
			// before it would claim an answer).
			assert.Contains(t, []string{"tether_attempt_duration_seconds", "tether_job_duration_seconds",
				"tether_claim_latency_seconds", "tether_http_request_duration_seconds",
				"tether_queue_jobs", "tether_queue_oldest_seconds", "tether_command_live_agents",
				"tether_plugin_healthy"}, name,
				"%s has no series at start: export it at 0 for its known label values", name)
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER || !strings.HasPrefix(name, "tether_") {
			continue
		}
		counters++
		for _, mt := range mf.GetMetric() {
			assert.Zero(t, mt.GetCounter().GetValue(), "%s starts at 0", name)
		}
	}
	assert.Greater(t, counters, 10)

	for name, labels := range map[string]map[string]string{
		"tether_leases_lost_total":              {"reason": metrics.LeaseLostHeartbeat},
		"tether_job_releases_total":             {"reason": metrics.ReleaseSelfFenced},
		"tether_jobs_finished_total":            {"status": "failed"},
		"tether_job_resumes_total":              {"command": "report"},
		"tether_plugin_restarts_total":          {"plugin": "sh"},
		"tether_http_requests_total":            {"route": "GET /api/v1/jobs", "code": "500"},
		"tether_janitor_actions_total":          {"action": "release", "cause": "agent_dead"},
		"tether_cleanup_attempts_total":         {"result": "failed"},
		"tether_heartbeats_total":               {"result": "error"},
		"tether_log_bytes_total":                {"stream": "stderr"},
		"tether_agents":                         {"state": metrics.AgentLost},
		"tether_build_info":                     {"version": "1.2.3", "goversion": runtime.Version()},
		"tether_database_history_changes_total": {"change": "rewound"},
	} {
		assert.True(t, hasSeries(gathered[name], labels), "%s%v is exported from the start", name, labels)
	}
	capacity, err := m.Value("tether_capacity", nil)
	require.NoError(t, err)
	assert.Equal(t, 7.0, capacity)
	info, err := m.Value("tether_build_info", nil)
	require.NoError(t, err)
	assert.Equal(t, 1.0, info)
}

func hasSeries(mf *dto.MetricFamily, labels map[string]string) bool {
	if mf == nil {
		return false
	}
series:
	for _, mt := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range mt.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue series
			}
		}
		return true
	}
	return false
}
