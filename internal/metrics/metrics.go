// Package metrics defines the Prometheus metrics an agent exports on /metrics.
// A Metrics value is created per agent with its own registry, so tests and
// several agents in one process never share state.
//
// Cardinality is bounded by construction. Command labels take the names of
// the commands in the agent's config, and the cluster gauges those of the
// commands the database knows (at most janitor.QueueCommandCap); plugin
// labels the configured plugins, route labels the API's fixed route
// patterns, and every other label a small fixed set listed in
// docs/operations.md (section Metrics).
//
// Every labelled counter is exported at 0 for its known label values from
// the start (New, Known), so increase() sees its first event: a series
// that appears at 5 has no increase.
package metrics

import (
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Lease loss and release reasons: the fixed values of the reason labels.
const (
	LeaseLostHeartbeat = "heartbeat" // the heartbeat found the lease taken over
	LeaseLostWrite     = "write"     // a fenced write (log flush, outcome) found it taken over
	LeaseLostHandoff   = "handoff"   // the shutdown handoff found it taken over

	ReleaseHandoff     = "handoff"      // the agent shut down and handed the job off
	ReleaseSelfFenced  = "self_fenced"  // the agent could not renew its leases
	ReleaseHistoryLost = "history_lost" // the database lost the job's latest checkpoint: resume from the one it kept

	// FinishedRetried is the status label of an attempt that failed and was
	// scheduled again (tether_jobs_finished_total).
	FinishedRetried = "retried"
)

// The fixed label values of the counters, exported at 0 from New.
var (
	leaseLossReasons = []string{LeaseLostHeartbeat, LeaseLostWrite, LeaseLostHandoff}
	releaseReasons   = []string{ReleaseHandoff, ReleaseSelfFenced, ReleaseHistoryLost}
	finishedStatuses = []string{"succeeded", "failed", "canceled", FinishedRetried}
)

// Agent states of tether_agents, the cluster's agents rows as the janitor
// counts them.
const (
	AgentRunning  = "running"  // live, claiming
	AgentDraining = "draining" // live, handing off before it stops
	// AgentLost is an agent that neither is live nor said it stopped, and
	// went silent within LostWindow: killed, out of memory, its host gone,
	// or hung. A drained agent marks itself stopped and is never lost.
	AgentLost = "lost"
)

// LostWindow is how long an agent that went silent without stopping counts
// as lost (tether_agents{state="lost"}): long enough for TetherAgentDown to
// fire, short enough that it resolves while the row waits for pruning.
const LostWindow = time.Hour

// UnmatchedRoute is the route label of a request no API route matched
// (404, 405, or refused before routing: Host check, bad query text).
const UnmatchedRoute = "unmatched"

// Metrics are one agent's counters and gauges.
type Metrics struct {
	reg *prometheus.Registry
	// collectors is every collector registered through Registerer (and
	// New's own), for Names. A vector with no series is not gathered.
	mu         sync.Mutex
	collectors []prometheus.Collector

	JobsClaimed     prometheus.Counter
	JobsFinished    *prometheus.CounterVec // by status
	LeasesLost      *prometheus.CounterVec // by reason: heartbeat, write, handoff
	Heartbeats      *prometheus.CounterVec // by result: ok, error
	HeartbeatTime   prometheus.Histogram
	RunningJobs     prometheus.Gauge
	LogBytes        *prometheus.CounterVec // by stream
	CleanupFailures prometheus.Counter
	// AgentsDead counts agent generations this agent's liveness check found
	// dead (name lock free, silent for dead_after), once each.
	AgentsDead prometheus.Counter

	// QueueJobs and QueueOldest are the due, unowned jobs per command and
	// how long the oldest has been due, for the whole cluster, as of this
	// agent's last janitor pass. The commands are every one the database
	// knows (configured here, announced by an agents row, or with jobs
	// queued), so a command whose agents are all gone still has its series.
	QueueJobs   *prometheus.GaugeVec // by command
	QueueOldest *prometheus.GaugeVec // by command
	// CommandAgents is the live agents claiming each of those commands (0:
	// its jobs wait), as of the fleet's last janitor pass.
	CommandAgents *prometheus.GaugeVec // by command
	// AttemptDuration is observed when this agent records an attempt's end
	// (by command and outcome: the status stored, "retried" for a retry).
	// JobDuration when the end is terminal, from submit (by command, status).
	AttemptDuration *prometheus.HistogramVec
	JobDuration     *prometheus.HistogramVec
	// ClaimLatency is how long a claimed job had been due (queued, or
	// released for resuming) when this agent claimed it, by command.
	ClaimLatency *prometheus.HistogramVec
	Resumes      *prometheus.CounterVec // claims of released running jobs, by command
	Releases     *prometheus.CounterVec // jobs this agent gave up for resuming, by reason
	// CleanupsOldest is how long the oldest queued Cleanup has waited
	// (cluster-wide, 0 when none), as of the fleet's last janitor pass.
	CleanupsOldest prometheus.Gauge
	PluginRestarts *prometheus.CounterVec // crashed plugin processes, by plugin
	PluginHealthy  *prometheus.GaugeVec   // 1 when the plugin's latest health check passed, by plugin
	HTTPRequests   *prometheus.CounterVec // by route pattern and code
	HTTPDuration   *prometheus.HistogramVec
	// DatabaseHistory counts changes of the database's history this agent
	// saw (internal/dbhistory), by change: failover, rewound. HistoryLost
	// counts the jobs it found the database had lost acknowledged writes
	// of (each has a database_history_lost event).
	DatabaseHistory *prometheus.CounterVec
	HistoryLost     prometheus.Counter

	// BuildInfo is 1, labelled with the agent's version and Go version
	// (Known sets it).
	BuildInfo *prometheus.GaugeVec
	// Capacity is this agent's agent.capacity: tether_running_jobs /
	// tether_capacity is its saturation (Known sets it).
	Capacity prometheus.Gauge
	// Agents is the cluster's agents by state (AgentRunning, AgentDraining,
	// AgentLost), as of the fleet's last janitor pass.
	Agents *prometheus.GaugeVec
}

// jobBuckets span half a second to 4.5 hours. claimBuckets span 10 ms to
// about 1.5 hours (a queue that waits longer alerts on
// tether_queue_oldest_seconds).
var (
	jobBuckets   = prometheus.ExponentialBuckets(0.5, 2, 16)
	claimBuckets = prometheus.ExponentialBuckets(0.01, 3, 13)
)

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
		LeasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_leases_lost_total", Help: "Jobs this agent stopped because another holder took their lease, by where it noticed: heartbeat, write, handoff.",
		}, []string{"reason"}),
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
		QueueJobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_queue_jobs", Help: "Due jobs no agent holds (queued, or released for resuming), counted up to 10000 per command (10000 means at least that many), cluster-wide, by command the database knows, as of the fleet's last janitor pass.",
		}, []string{"command"}),
		QueueOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_queue_oldest_seconds", Help: "How long the longest-waiting due job has been claimable (0 when none), cluster-wide, by command the database knows, as of the fleet's last janitor pass.",
		}, []string{"command"}),
		CommandAgents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_command_live_agents", Help: "Live agents (running, and not dead, stale or stopped by the janitor's liveness rule) claiming the command's jobs, by command the database knows, as of the fleet's last janitor pass; 0 means its jobs wait queued.",
		}, []string{"command"}),
		AttemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tether_attempt_duration_seconds", Help: "Duration of the attempts this agent ended, from the plugin's first call (across resumes), by command and outcome (the status stored, retried for a retry).",
			Buckets: jobBuckets,
		}, []string{"command", "outcome"}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tether_job_duration_seconds", Help: "Submit to terminal status of the jobs this agent finished, by command and status.",
			Buckets: jobBuckets,
		}, []string{"command", "status"}),
		ClaimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tether_claim_latency_seconds", Help: "How long a job had been due (queued, or released for resuming) when this agent claimed it, by command.",
			Buckets: claimBuckets,
		}, []string{"command"}),
		Resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_job_resumes_total", Help: "Released running jobs this agent claimed to resume (reattach to the remote work), by command.",
		}, []string{"command"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_job_releases_total", Help: "Running jobs this agent released for another agent to resume, by reason: handoff, self_fenced (the janitor's releases: tether_janitor_actions_total{action=\"release\"}).",
		}, []string{"reason"}),
		CleanupsOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_cleanups_oldest_seconds", Help: "Age of the oldest queued Cleanup call (0 when none), cluster-wide, as of the fleet's last janitor pass.",
		}),
		PluginRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_plugin_restarts_total", Help: "Plugin processes that crashed and are started again for the next call, by plugin.",
		}, []string{"plugin"}),
		PluginHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_plugin_healthy", Help: "1 when the plugin's latest HealthCheck passed, 0 when it failed or did not answer in time, by plugin (only plugins that declare HealthCheck).",
		}, []string{"plugin"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_http_requests_total", Help: "API requests answered, by route pattern (\"unmatched\" for none) and status code.",
		}, []string{"route", "code"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tether_http_request_duration_seconds", Help: "Time to answer an API request, by route pattern (followed logs last as long as the job).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		DatabaseHistory: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_database_history_changes_total", Help: "Changes of the database's history this agent saw: failover (a new timeline: a standby was promoted) or rewound (the WAL position went back: acknowledged commits lost). Each made it check every job it held.",
		}, []string{"change"}),
		HistoryLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_database_history_lost_total", Help: "Jobs whose acknowledged writes (claim, running, checkpoint, output, end) this agent found the database had lost with its history; each has a database_history_lost event saying what and what was done.",
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_build_info", Help: "1, labelled with the agent's version and the Go version it was built with.",
		}, []string{"version", "goversion"}),
		Capacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_capacity", Help: "Jobs this agent holds at most at once (agent.capacity); tether_running_jobs / tether_capacity is its saturation.",
		}),
		Agents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_agents", Help: "The cluster's agents by state: running and draining (live), lost (neither live nor stopped, silent for less than an hour: killed, crashed or hung), as of the fleet's last janitor pass.",
		}, []string{"state"}),
	}
	// Every series of a fixed label set exists from the start, so
	// increase() sees the first event.
	for _, v := range [][]string{{"failover"}, {"rewound"}} {
		m.DatabaseHistory.WithLabelValues(v...)
	}
	zero(m.LeasesLost, leaseLossReasons)
	zero(m.Releases, releaseReasons)
	zero(m.JobsFinished, finishedStatuses)
	zero(m.Heartbeats, []string{"ok", "error"})
	zero(m.LogBytes, []string{"stdout", "stderr"})
	for _, s := range []string{AgentRunning, AgentDraining, AgentLost} {
		m.Agents.WithLabelValues(s)
	}
	m.Registerer().MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.JobsClaimed, m.JobsFinished, m.LeasesLost, m.Heartbeats, m.HeartbeatTime,
		m.RunningJobs, m.LogBytes, m.CleanupFailures, m.AgentsDead,
		m.QueueJobs, m.QueueOldest, m.CommandAgents, m.AttemptDuration, m.JobDuration, m.ClaimLatency,
		m.Resumes, m.Releases, m.CleanupsOldest, m.PluginRestarts, m.PluginHealthy, m.HTTPRequests, m.HTTPDuration,
		m.DatabaseHistory, m.HistoryLost, m.BuildInfo, m.Capacity, m.Agents,
	)
	return m
}

// zero creates c's series for each of values (of its one label) at 0.
func zero(c *prometheus.CounterVec, values []string) {
	for _, v := range values {
		c.WithLabelValues(v)
	}
}

// Agent is what an agent knows of itself at start: the label values of its
// counters that depend on its configuration.
type Agent struct {
	Version  string
	Capacity int
	Commands []string // the commands it claims
	Plugins  []string // the plugins it started
}

// Known exports the build info and capacity of a, and its per-command and
// per-plugin counters at 0, so the first resume or plugin crash is an
// increase.
func (m *Metrics) Known(a Agent) {
	m.BuildInfo.Reset()
	m.BuildInfo.WithLabelValues(a.Version, runtime.Version()).Set(1)
	m.Capacity.Set(float64(a.Capacity))
	zero(m.Resumes, a.Commands)
	zero(m.PluginRestarts, a.Plugins)
}

// KnownRoutes exports tether_http_requests_total at 0 for code 500 of each
// route pattern, so the first internal error is an increase. Codes are not
// a closed set: the others appear at their first request.
func (m *Metrics) KnownRoutes(routes []string) {
	for _, r := range routes {
		m.HTTPRequests.WithLabelValues(r, strconv.Itoa(http.StatusInternalServerError))
	}
}

// SetAgents sets tether_agents to counts, by state; a state missing from
// counts is 0.
func (m *Metrics) SetAgents(counts map[string]int) {
	for _, s := range []string{AgentRunning, AgentDraining, AgentLost} {
		m.Agents.WithLabelValues(s).Set(float64(counts[s]))
	}
}

// Registry is the registry to gather from.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Registerer is where further collectors (the janitor's) register. Names
// then lists them too.
func (m *Metrics) Registerer() prometheus.Registerer { return recorder{m} }

type recorder struct{ m *Metrics }

func (r recorder) Register(c prometheus.Collector) error {
	if err := r.m.reg.Register(c); err != nil {
		return err
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	r.m.collectors = append(r.m.collectors, c)
	return nil
}

func (r recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r recorder) Unregister(c prometheus.Collector) bool { return r.m.reg.Unregister(c) }

// fqName is the only way to a Desc's name: its String form.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names returns the name of every metric family registered, series or not,
// sorted: what the dashboard and alert rules may refer to.
func (m *Metrics) Names() []string {
	m.mu.Lock()
	cs := slices.Clone(m.collectors)
	m.mu.Unlock()
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		if sm := fqName.FindStringSubmatch(d.String()); sm != nil {
			names = append(names, sm[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveHTTP counts one answered API request. route must be a registered
// route pattern or UnmatchedRoute, never a raw path.
func (m *Metrics) ObserveHTTP(route string, code int, d time.Duration) {
	if route == "" {
		route = UnmatchedRoute
	}
	m.HTTPRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.HTTPDuration.WithLabelValues(route).Observe(d.Seconds())
}

// QueueStat is one command's queue as the janitor measured it.
type QueueStat struct {
	Command string
	Jobs    int
	Oldest  time.Duration
	Agents  int // live agents claiming it
}

// SetQueue replaces the queue gauges with stats, so a command the database
// no longer knows stops being exported.
func (m *Metrics) SetQueue(stats []QueueStat) {
	m.QueueJobs.Reset()
	m.QueueOldest.Reset()
	m.CommandAgents.Reset()
	for _, q := range stats {
		m.QueueJobs.WithLabelValues(q.Command).Set(float64(q.Jobs))
		m.QueueOldest.WithLabelValues(q.Command).Set(q.Oldest.Seconds())
		m.CommandAgents.WithLabelValues(q.Command).Set(float64(q.Agents))
	}
}
