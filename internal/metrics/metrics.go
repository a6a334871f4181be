// Package metrics defines the Prometheus metrics an agent exports on /metrics.
// A Metrics value is created per agent with its own registry, so tests and
// several agents in one process never share state.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are one agent's counters and gauges.
type Metrics struct {
	reg *prometheus.Registry

	JobsClaimed     prometheus.Counter
	JobsFinished    *prometheus.CounterVec // by status
	LeasesLost      prometheus.Counter
	Heartbeats      *prometheus.CounterVec // by result: ok, error
	HeartbeatTime   prometheus.Histogram
	RunningJobs     prometheus.Gauge
	LogBytes        *prometheus.CounterVec // by stream
	CleanupFailures prometheus.Counter
	// AgentsDead counts agent generations this agent's liveness check found
	// dead (name lock free, silent for dead_after), once each.
	AgentsDead prometheus.Counter
}

// New returns metrics registered on a fresh registry, with Go and process
// collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		JobsClaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_jobs_claimed_total", Help: "Jobs this agent took a lease on.",
		}),
		JobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_jobs_finished_total", Help: "Final statuses this agent wrote, by status.",
		}, []string{"status"}),
		LeasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_leases_lost_total", Help: "Jobs this agent stopped because another holder took their lease.",
		}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_heartbeats_total", Help: "Heartbeat statements, by result.",
		}, []string{"result"}),
		HeartbeatTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tether_heartbeat_seconds", Help: "Duration of the heartbeat statement.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		RunningJobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_running_jobs", Help: "Jobs this agent holds a lease on right now.",
		}),
		LogBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_log_bytes_total", Help: "Job output bytes received from plugins, by stream.",
		}, []string{"stream"}),
		CleanupFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_cleanup_failures_total", Help: "Plugin Cleanup calls that returned an error.",
		}),
		AgentsDead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_agents_dead_total", Help: "Agent generations this agent found dead: name lock free and silent for dead_after (their jobs settled early).",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.JobsClaimed, m.JobsFinished, m.LeasesLost, m.Heartbeats, m.HeartbeatTime,
		m.RunningJobs, m.LogBytes, m.CleanupFailures, m.AgentsDead,
	)
	return m
}

// Registry is where further collectors (the janitor's) register.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
