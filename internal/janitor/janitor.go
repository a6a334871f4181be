// Package janitor settles jobs whose holder stopped looking after them and
// drains the queue of plugin Cleanup calls.
//
// Every agent runs a Service. Each pass locks a bounded batch of suspicious
// active rows with FOR UPDATE SKIP LOCKED, decides each with the pure Decide,
// and applies the decisions in the same short transaction, so janitors on
// many agents share the work without acting twice. Every action bumps the
// job's lease, so a late write of the old holder is refused. Cleanup calls
// never run inside a transaction. A terminal status and its queued Cleanup
// commit together, and a worker loop calls the plugin afterwards, with a
// timeout, retrying with backoff until it succeeds.
//
// Each service is in a file of its own. PassLoop (pass.go) runs the passes,
// whose later steps are in retention.go, prune.go and gauges.go.
// CleanupWorker (cleanup.go) calls the queued Cleanups. Liveness
// (liveness.go) reads the agents' name locks. ReleasePrevious (previous.go)
// runs once, before the agent claims.
package janitor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/startstop"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// Plugins is the part of the plugin manager the janitor uses.
type Plugins interface {
	Info(name string) (plugin.Info, bool)
	Infos() map[string]plugin.Info
	Cleanup(ctx context.Context, name string, job *plugin.Job) error
}

// Config configures a Service. Zero values take the defaults.
type Config struct {
	Holder store.Holder // the agent this janitor runs in; recorded on its events

	StaleJob      time.Duration // 120s
	OfflineAfter  time.Duration // 15s (3 × the default keepalive)
	CleanInterval time.Duration // 10s; each wait is jittered ±20%
	AWOLTimeout   time.Duration // 1h
	Keepalive     time.Duration // 5s; with CleanInterval, the grace before backing up an owner's active_timeout

	// RetentionBatch is how many expired jobs one statement deletes (500).
	// A pass goes on while batches come back full, for at most
	// RetentionBudget (half of CleanInterval) and RetentionMaxBatches
	// statements (1000), so retention keeps up with thousands of jobs a
	// second per agent while a backlog is still worked off over several
	// passes instead of one long one.
	RetentionBatch      int
	RetentionMaxBatches int
	RetentionBudget     time.Duration

	// AgentRetention is how long an agents row that stopped or went silent is
	// kept once it holds no job (DefaultAgentRetention). See PruneAgents.
	AgentRetention time.Duration

	BatchSize int // active rows per transaction (100)
	// IdleInTransaction ends a janitor transaction that sits idle between its
	// statements this long (DefaultIdleInTransaction). The locks of a frozen
	// agent's pass do not outlive the bound.
	IdleInTransaction  time.Duration
	CleanupTimeout     time.Duration // bound on one Cleanup call (2m)
	CleanupBackoffMin  time.Duration // wait after the first failed Cleanup (1s)
	CleanupBackoffMax  time.Duration // cap of the doubling wait (5m)
	CleanupConcurrency int           // Cleanup calls in flight at once (4)

	// Commands maps each configured command to its default context, merged
	// under the job's own context for Cleanup as the runner does for Execute.
	Commands map[string]json.RawMessage

	Logger  *slog.Logger
	Metrics *metrics.Metrics // nil: a private set nobody scrapes

	// TestSignals let a test observe the service without polling.
	TestSignals TestSignals
}

// TestSignals lets tests observe a Service. Each is nil (and costs nothing)
// in production. A set channel must be read, or Run blocks until ctx ends.
type TestSignals struct {
	// Passed receives the outcome of every janitor pass Run makes, once
	// it is over.
	Passed chan<- Passed
}

// Passed is one janitor pass of Run.
type Passed struct {
	Actions int // actions the pass applied
	Err     error
}

func (c *Config) setDefaults() {
	defaults.Fill(&c.StaleJob, defaultStaleJob)
	defaults.Fill(&c.OfflineAfter, defaults.OfflineAfter)
	defaults.Fill(&c.CleanInterval, defaults.CleanInterval)
	defaults.Fill(&c.AWOLTimeout, defaults.AWOLTimeout)
	defaults.Fill(&c.Keepalive, defaults.Keepalive)
	defaults.Fill(&c.AgentRetention, DefaultAgentRetention)
	defaults.Fill(&c.RetentionBatch, defaultRetentionBatch)
	defaults.Fill(&c.RetentionMaxBatches, defaultRetentionMaxBatches)
	defaults.Fill(&c.RetentionBudget, c.CleanInterval/retentionBudgetShare)
	defaults.Fill(&c.CleanupTimeout, defaults.CleanupTimeout)
	defaults.Fill(&c.IdleInTransaction, DefaultIdleInTransaction)
	defaults.Fill(&c.CleanupBackoffMin, defaultCleanupBackoffMin)
	defaults.Fill(&c.CleanupBackoffMax, defaultCleanupBackoffMax)
	defaults.Fill(&c.BatchSize, defaultBatchSize)
	defaults.Fill(&c.CleanupConcurrency, defaultCleanupConcurrency)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
}

func (c *Config) rules() Rules {
	return Rules{StaleJob: c.StaleJob, OfflineAfter: c.OfflineAfter, AWOLTimeout: c.AWOLTimeout,
		ActiveTimeoutGrace: c.activeTimeoutGrace()}
}

// activeTimeoutGrace is how long past active_timeout the janitor leaves a
// live owner to enforce it. It is two heartbeats and a janitor period.
func (c *Config) activeTimeoutGrace() time.Duration {
	return 2*c.Keepalive + c.CleanInterval
}

// DefaultIdleInTransaction bounds how long a janitor transaction may sit
// idle between its statements. A pass runs its statements back to back (a
// batch takes milliseconds), so only a frozen or stalled agent comes near.
const DefaultIdleInTransaction = 10 * time.Second

// defaultStaleJob is agent.stale_job's default.
const defaultStaleJob = defaults.StaleJob

// Service is one agent's janitor and Cleanup worker.
type Service struct {
	pool    *pgxpool.Pool
	store   *store.Store
	plugins Plugins
	cfg     Config
	log     *slog.Logger

	actions         *prometheus.CounterVec
	cleanupAttempts *prometheus.CounterVec
	pending         prometheus.Gauge
	cleanupFailures prometheus.Counter
	deleted         prometheus.Counter

	// afterCandidates, if set (tests), runs inside a batch's transaction
	// once its rows are locked, before any is acted on.
	afterCandidates func(ctx context.Context)
}

// New returns a Service. It does nothing until Run.
func New(pool *pgxpool.Pool, plugins Plugins, cfg Config) *Service {
	cfg.setDefaults()
	reg := cfg.Metrics.Registerer()
	s := &Service{
		pool:    pool,
		store:   store.New(pool),
		plugins: plugins,
		cfg:     cfg,
		log:     cfg.Logger.With("component", "janitor", "agent", cfg.Holder.Name),
		actions: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_janitor_actions_total", Help: "Jobs the janitor settled, by action (requeue, release, fail, fail_awol, fail_pending, fail_unclaimed, fail_active_timeout, cancel) and cause (agent_gone, agent_stopped, agent_restarted, agent_dead, agent_silent, timeout, canceled).",
		}, []string{"action", "cause"})),
		cleanupAttempts: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_cleanup_attempts_total", Help: "Queued Cleanup calls this agent made, by result: ok, failed, skipped.",
		}, []string{"result"})),
		pending: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_cleanups_pending", Help: "Cleanup calls queued and not yet successful (all agents), as of the fleet's last janitor pass.",
		})),
		cleanupFailures: cfg.Metrics.CleanupFailures,
		deleted: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_retention_deleted_total", Help: "Terminal jobs this agent's janitor deleted after their ttl.",
		})),
	}
	// At 0 from the start, so increase() sees the first (metrics package).
	for _, ac := range actionCauses() {
		s.actions.WithLabelValues(ac[0], ac[1])
	}
	for _, r := range []string{"ok", "failed", "skipped"} {
		s.cleanupAttempts.WithLabelValues(r)
	}
	return s
}

// register adds c to reg, or returns the collector already registered under
// its name (a second Service on the same Metrics shares it).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing
		}
	}
	return c
}

// Run runs the janitor's two services, PassLoop and CleanupWorker, until
// ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	loops := []startstop.Service{s.PassLoop(), s.CleanupWorker()}
	if err := startstop.StartAll(ctx, loops...); err != nil {
		return err
	}
	<-ctx.Done()
	startstop.StopAll(loops...)
	return nil
}

// periodic is the service that runs pass at once and then every jittered
// clean_interval. Its errors are logged under name and retried next time.
func (s *Service) periodic(name string, pass func(context.Context) (int, error)) *startstop.Loop {
	return startstop.Timer(name, 0, func(ctx context.Context) time.Duration {
		if _, err := pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn(name, "err", err)
		}
		return jitter(s.cfg.CleanInterval)
	})
}

// jitter spreads d by ±20% so the agents' janitors do not run in lockstep.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
