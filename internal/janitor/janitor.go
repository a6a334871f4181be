// Package janitor settles jobs whose holder stopped looking after them and
// drains the queue of plugin Cleanup calls.
//
// Every agent runs a Service. Each pass locks a bounded batch of suspicious
// active rows with FOR UPDATE SKIP LOCKED, decides each with the pure Decide,
// and applies the decisions in the same short transaction, so janitors on many
// agents share the work without acting twice. Every action bumps the job's
// lease, so a late write of the old holder is refused. Cleanup calls never run
// inside a transaction: a terminal status and its queued Cleanup commit
// together, and a worker loop calls the plugin afterwards, with a timeout,
// retrying with backoff until it succeeds.
package janitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/jobctx"
	"github.com/tetherjobs/tether/internal/metrics"
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

	// AgentRetention is how long an agents row that stopped or went silent
	// is kept once it holds no job (DefaultAgentRetention); see PruneAgents.
	AgentRetention time.Duration

	BatchSize int // active rows per transaction (100)
	// IdleInTransaction ends a janitor transaction that sits idle between
	// its statements this long (DefaultIdleInTransaction): the locks of a
	// frozen agent's pass do not outlive the bound.
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
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StaleJob, defaultStaleJob)
	def(&c.OfflineAfter, defaults.OfflineAfter)
	def(&c.CleanInterval, defaults.CleanInterval)
	def(&c.AWOLTimeout, defaults.AWOLTimeout)
	def(&c.Keepalive, defaults.Keepalive)
	def(&c.AgentRetention, DefaultAgentRetention)
	if c.RetentionBatch <= 0 {
		c.RetentionBatch = 500
	}
	if c.RetentionMaxBatches <= 0 {
		c.RetentionMaxBatches = 1000
	}
	def(&c.RetentionBudget, c.CleanInterval/2)
	def(&c.CleanupTimeout, defaults.CleanupTimeout)
	def(&c.IdleInTransaction, DefaultIdleInTransaction)
	def(&c.CleanupBackoffMin, time.Second)
	def(&c.CleanupBackoffMax, 5*time.Minute)
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.CleanupConcurrency <= 0 {
		c.CleanupConcurrency = 4
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
}

func (c *Config) rules() Rules {
	return Rules{StaleJob: c.StaleJob, OfflineAfter: c.OfflineAfter, AWOLTimeout: c.AWOLTimeout,
		ActiveTimeoutGrace: c.activeTimeoutGrace()}
}

// activeTimeoutGrace is how long past active_timeout the janitor leaves a
// live owner to enforce it: two heartbeats and a janitor period.
func (c *Config) activeTimeoutGrace() time.Duration {
	return 2*c.Keepalive + c.CleanInterval
}

// DefaultIdleInTransaction bounds how long a janitor transaction may sit
// idle between its statements. A pass runs its statements back to back (a
// batch takes milliseconds), so only a frozen or stalled agent comes near.
const DefaultIdleInTransaction = 10 * time.Second

// idleInTransaction is the bound on idling inside a janitor transaction
// (queries/janitor_tx.sql sets it for each one).
func (c *Config) idleInTransaction() time.Duration {
	if c.IdleInTransaction <= 0 {
		return DefaultIdleInTransaction
	}
	return c.IdleInTransaction
}

// defaultStaleJob is agent.stale_job's default.
const defaultStaleJob = defaults.StaleJob

// resultTimeout bounds the write of a Cleanup's outcome, which runs even when
// the agent is shutting down.
const resultTimeout = 10 * time.Second

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
	return &Service{
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
			Name: "tether_cleanups_pending", Help: "Cleanup calls queued and not yet successful (all agents), as of this agent's last janitor pass.",
		})),
		cleanupFailures: cfg.Metrics.CleanupFailures,
		deleted: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_retention_deleted_total", Help: "Terminal jobs this agent's janitor deleted after their ttl.",
		})),
	}
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

// Run runs a janitor pass and a Cleanup pass every clean_interval (jittered)
// until ctx is cancelled. Database errors are logged and retried next pass.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		s.every(ctx, func(ctx context.Context) {
			n, err := s.Pass(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("janitor pass", "err", err)
			}
			signal(ctx, s.cfg.TestSignals.Passed, Passed{Actions: n, Err: err})
		})
	})
	wg.Go(func() {
		s.every(ctx, func(ctx context.Context) {
			if _, err := s.CleanupPass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("cleanup pass", "err", err)
			}
		})
	})
	wg.Wait()
	return nil
}

// every runs fn at once and then every jittered clean_interval.
func (s *Service) every(ctx context.Context, fn func(context.Context)) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		fn(ctx)
		timer.Reset(jitter(s.cfg.CleanInterval))
	}
}

// jitter spreads d by ±20% so the agents' janitors do not run in lockstep.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Pass settles every job that needs it now, a bounded batch per transaction,
// and returns how many actions it applied. A full batch is followed by the
// next one at once; rows a batch looked at and left alone (nothing to do, or
// changed since they were read) are not read again in the same pass, so a
// pass always ends. Then it lifts orphaned retry gates, deletes expired jobs
// and prunes long-gone agents.
func (s *Service) Pass(ctx context.Context) (int, error) {
	done, err := s.batches(ctx, nil)
	total := len(done)
	if err != nil {
		return total, err
	}
	if n, err := s.store.LiftOrphanGates(ctx, s.cfg.BatchSize); err != nil {
		return total, err
	} else if n > 0 {
		s.log.Info("released retries whose Cleanup is no longer queued", "jobs", n)
	}
	if _, err := s.Retention(ctx); err != nil {
		return total, err
	}
	if _, err := s.PruneAgents(ctx); err != nil {
		s.log.Warn("pruning agents", "err", err)
	}
	s.refreshGauges(ctx)
	return total, nil
}

// settled is one action a batch applied, to the job of agent.
type settled struct {
	kind  Kind
	agent string
	cause Cause // the metrics label
}

// batches runs batches until one is not full. With dead set, only the jobs
// of those agents are read (a liveness pass); otherwise every candidate.
func (s *Service) batches(ctx context.Context, dead []DeadAgent) ([]settled, error) {
	var all []settled
	skip := []string{}
	for {
		done, left, full, err := s.batch(ctx, skip, dead)
		all = append(all, done...)
		if err != nil {
			return all, err
		}
		if !full {
			return all, nil
		}
		skip = append(skip, left...)
	}
}

// selfCommands is what this process serves by its configuration: the
// commands it knows (Config.Commands). They count only while it has no
// agents row of its own, which otherwise speaks for it.
func (s *Service) selfCommands() []string {
	out := make([]string, 0, len(s.cfg.Commands))
	for name := range s.cfg.Commands {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// countSelf adds this process to what the live agents serve for c, when its
// own agents row did not already count (not registered yet): it serves c's
// command if it is configured here and c's plugin is loaded here.
func countSelf(in *Input, commands map[string]bool, caps func(string) (plugin.Info, bool)) {
	if commands != nil && !commands[in.Command] {
		return
	}
	info, ok := caps(in.Plugin)
	if !ok {
		return
	}
	in.Served, in.PluginLoaded = true, true
	in.Resumable = in.Resumable || info.Has(plugin.CapResume)
}

// candidateQuery is the batch query of one pass (of the dead agents only,
// when dead is set), after the rows in skip.
func (s *Service) candidateQuery(skip []string, dead []DeadAgent) store.CandidateQuery {
	q := store.CandidateQuery{
		OfflineAfter: s.cfg.OfflineAfter, AWOLTimeout: s.cfg.AWOLTimeout,
		StaleJob: s.cfg.StaleJob, ActiveGrace: s.cfg.activeTimeoutGrace(),
		Batch: s.cfg.BatchSize, Skip: skip,
		Self: s.cfg.Holder, SelfCommands: s.selfCommands(),
	}
	for _, d := range dead {
		q.Dead = append(q.Dead, store.DeadGeneration{Name: d.Name, Generation: d.Generation, FreeSince: d.FreeSince})
	}
	return q
}

// batch locks, decides and applies one batch of rows not in skip (of the
// dead agents only, when dead is set). It returns the actions applied, the
// IDs of the rows it left alone and whether the batch was full (more may
// follow).
func (s *Service) batch(ctx context.Context, skip []string, dead []DeadAgent) ([]settled, []string, bool, error) {
	var applied []settled
	var left []string
	var full bool
	q := s.candidateQuery(skip, dead)
	served := setOf(q.SelfCommands)
	err := s.store.InJanitorTx(ctx, s.cfg.idleInTransaction(), func(tx store.JanitorTx) error {
		applied, left = applied[:0], left[:0]
		rows, err := tx.Candidates(ctx, q)
		if err != nil {
			return err
		}
		full = len(rows) == s.cfg.BatchSize
		if s.afterCandidates != nil {
			s.afterCandidates(ctx)
		}
		for _, r := range rows {
			c := candidateOf(r)
			if !c.SelfRegistered {
				countSelf(&c.Input, served, s.plugins.Info)
			}
			c.Input.Rules = s.cfg.rules()
			a := Decide(c.Input)
			ok, err := apply(ctx, tx, s.cfg.Holder, c, a)
			if err != nil {
				return err
			}
			if !ok {
				left = append(left, c.JobID)
				continue
			}
			applied = append(applied, settled{kind: a.Kind, agent: c.Input.AgentName, cause: CauseOf(a.Kind, c.Input)})
			s.log.Info("janitor settled job", "job", c.JobID, "action", string(a.Kind),
				"reason", a.Reason, "was_held_by", c.Input.AgentName, "cleanup", a.Cleanup)
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("janitor batch: %w", err)
	}
	for _, a := range applied {
		s.actions.WithLabelValues(string(a.kind), string(a.cause)).Inc()
	}
	return applied, left, full, nil
}

// setOf is names as a set.
func setOf(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

// Retention deletes terminal jobs past their stamped ttl (expires_at), with
// their events and logs, RetentionBatch per statement, while batches come
// back full, for at most RetentionBudget and RetentionMaxBatches statements
// per call. It returns how many it deleted.
func (s *Service) Retention(ctx context.Context) (int, error) {
	st := store.New(s.pool)
	total := 0
	start := time.Now()
	for range s.cfg.RetentionMaxBatches {
		if time.Since(start) >= s.cfg.RetentionBudget {
			break
		}
		n, err := st.DeleteExpired(ctx, s.cfg.RetentionBatch)
		total += n
		s.deleted.Add(float64(n))
		if err != nil {
			return total, err
		}
		if n < s.cfg.RetentionBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("retention deleted expired jobs", "jobs", total)
	}
	return total, nil
}

// ReleasePrevious settles, before the agent claims anything, every job an
// earlier generation of holder.Name still holds: accepted → requeued;
// running that a live agent or this process can resume → released "agent
// restarted"; running otherwise → failed "agent restarted" with a Cleanup
// queued; canceling → canceled (Cleanup queued if the plugin ran). caps
// reports this process's plugins; it counts for every command they can run
// (see ReleasePreviousWith to name its commands). It returns how many jobs
// it settled.
func ReleasePrevious(ctx context.Context, pool *pgxpool.Pool, holder store.Holder, caps func(plugin string) (plugin.Info, bool)) (int, error) {
	return ReleasePreviousWith(ctx, pool, PreviousConfig{Holder: holder, Caps: caps})
}

// PreviousConfig says who is starting, for ReleasePreviousWith.
type PreviousConfig struct {
	Holder store.Holder // this process: its name and new generation
	// Caps reports this process's plugins.
	Caps func(plugin string) (plugin.Info, bool)
	// Commands are the commands this process serves; nil counts it for
	// every command whose plugin it has.
	Commands []string
	// StaleJob is the live-agent window (agent.stale_job; 120s).
	StaleJob time.Duration
}

// ReleasePreviousWith is ReleasePrevious. Whether a running job can be
// resumed is judged from the live agents that serve its command — another
// agent may resume it although this process lost the plugin — and from this
// process (Caps, for Commands). The earlier generation's own agents row does
// not count: it is the process being replaced.
func ReleasePreviousWith(ctx context.Context, pool *pgxpool.Pool, p PreviousConfig) (int, error) {
	if p.StaleJob <= 0 {
		p.StaleJob = defaultStaleJob
	}
	if p.Caps == nil {
		p.Caps = func(string) (plugin.Info, bool) { return plugin.Info{}, false }
	}
	var served map[string]bool
	if p.Commands != nil {
		served = setOf(p.Commands)
	}
	st := store.New(pool)
	total := 0
	q := store.PreviousQuery{Self: p.Holder, Batch: previousBatch, StaleJob: p.StaleJob}
	for {
		n, last, full, err := releasePreviousPage(ctx, st, q, p.Caps, served)
		if err != nil {
			return total, fmt.Errorf("releasing jobs of earlier generations of %s: %w", p.Holder.Name, err)
		}
		total += n
		if !full {
			return total, nil
		}
		q.After = last
	}
}

// previousBatch is how many jobs of earlier generations one transaction
// settles.
const previousBatch = 100

// releasePreviousPage settles one page of the jobs earlier generations of
// q.Self.Name hold. It returns how many it settled, the last job ID of the
// page and whether the page was full.
func releasePreviousPage(ctx context.Context, st *store.Store, q store.PreviousQuery, caps func(string) (plugin.Info, bool), served map[string]bool) (int, string, bool, error) {
	var n int
	var last string
	var full bool
	err := st.InJanitorTx(ctx, DefaultIdleInTransaction, func(tx store.JanitorTx) error {
		n = 0
		rows, err := tx.PreviousCandidates(ctx, q)
		if err != nil {
			return err
		}
		full = len(rows) == q.Batch
		if len(rows) > 0 {
			last = rows[len(rows)-1].JobID
		}
		for _, r := range rows {
			c := candidateOf(r)
			// The name now belongs to this generation, registered or not yet.
			c.Input.Owner = Owner{Exists: true, Generation: q.Self.Generation, State: "running"}
			countSelf(&c.Input, served, caps)
			ok, err := apply(ctx, tx, q.Self, c, Decide(c.Input))
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	return n, last, full, err
}

// CleanupPass runs the due Cleanups of the plugins this agent has loaded,
// CleanupConcurrency at a time, until none is due. It returns how many it
// attempted.
func (s *Service) CleanupPass(ctx context.Context) (int, error) {
	infos := s.plugins.Infos()
	names := make([]string, 0, len(infos))
	for name := range infos {
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return 0, nil
	}
	// The claim outlives the call's timeout, so only a dead worker's lapses.
	hold := s.cfg.CleanupTimeout + resultTimeout + 5*time.Second
	total := 0
	for ctx.Err() == nil {
		claimed, err := s.store.ClaimCleanups(ctx, s.cfg.Holder.Name, names, s.cfg.CleanupConcurrency, hold)
		if err != nil {
			return total, err
		}
		var wg sync.WaitGroup
		for _, c := range claimed {
			wg.Go(func() { s.runCleanup(ctx, c) })
		}
		wg.Wait()
		total += len(claimed)
		if len(claimed) < s.cfg.CleanupConcurrency {
			break
		}
	}
	return total, nil
}

// runCleanup makes one Cleanup call outside any transaction and records it.
func (s *Service) runCleanup(ctx context.Context, c store.ClaimedCleanup) {
	log := s.log.With("job", c.JobID, "plugin", c.Plugin, "attempt", c.Claim.Attempts)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resultTimeout+s.cfg.CleanupTimeout)
	defer cancel()

	info, loaded := s.plugins.Info(c.Plugin)
	if loaded && !info.Has(plugin.CapCleanup) {
		msg := fmt.Sprintf("plugin %q has no Cleanup; nothing to clean up", c.Plugin)
		if err := s.store.CleanupDone(wctx, c.JobID, c.Claim, s.cfg.Holder.Generation, "cleanup_skipped", msg); err != nil {
			log.Warn("recording skipped cleanup", "err", err)
		}
		s.cleanupAttempts.WithLabelValues("skipped").Inc()
		return
	}
	err := s.callCleanup(ctx, c, loaded)
	if err == nil {
		if err := s.store.CleanupDone(wctx, c.JobID, c.Claim, s.cfg.Holder.Generation, "cleanup_ok", fmt.Sprintf("attempt %d", c.Claim.Attempts)); err != nil {
			log.Warn("recording cleanup", "err", err)
		}
		s.cleanupAttempts.WithLabelValues("ok").Inc()
		log.Info("cleanup done")
		return
	}
	wait := cleanupBackoff(c.Claim.Attempts, s.cfg.CleanupBackoffMin, s.cfg.CleanupBackoffMax)
	log.Warn("cleanup failed; will retry", "err", err, "retry_in", wait)
	s.cleanupAttempts.WithLabelValues("failed").Inc()
	s.cleanupFailures.Inc()
	if err := s.store.CleanupFailed(wctx, c.JobID, c.Claim, s.cfg.Holder.Generation, wait, err); err != nil {
		log.Warn("recording failed cleanup", "err", err)
	}
}

func (s *Service) callCleanup(ctx context.Context, c store.ClaimedCleanup, loaded bool) error {
	if !loaded {
		return fmt.Errorf("plugin %q is no longer loaded on agent %s", c.Plugin, s.cfg.Holder.Name)
	}
	jobCtx, err := jobctx.Merge(s.cfg.Commands[c.Command], c.Context)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CleanupTimeout)
	defer cancel()
	job := &plugin.Job{ID: c.JobID, Command: c.Command, Attempt: c.Attempt, Context: jobCtx, Handle: c.Handle}
	if err := s.plugins.Cleanup(cctx, c.Plugin, job); err != nil {
		return fmt.Errorf("cleanup through plugin %q: %w", c.Plugin, err)
	}
	return nil
}
