// Package claim runs an agent's share of the work. It claims jobs under
// fenced leases, keeps those leases alive with one heartbeat statement per
// tick, runs each job through its plugin, streams the job's output into
// job_logs, and writes each job's final status exactly once.
package claim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/startstop"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// Plugins is the part of the plugin manager the claim loop uses.
type Plugins interface {
	Info(name string) (plugin.Info, bool)
	Execute(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error)
	Resume(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error)
	Cleanup(ctx context.Context, name string, job *plugin.Job) error
	// Renew tells the plugin processes with calls in flight that their leases
	// are good for validFor from now. It must return soon.
	Renew(ctx context.Context, validFor time.Duration)
}

// Command is a configured command this agent runs.
type Command struct {
	Plugin  string
	Context json.RawMessage // default context, merged under the job's
}

// Config configures a Service. Zero durations take the defaults.
type Config struct {
	Holder   store.Holder
	Capacity int
	Commands map[string]Command

	PollInterval time.Duration // claim poll when no notification arrives (1s)
	Keepalive    time.Duration // heartbeat period (5s)
	LogFlush     time.Duration // log batch period (200ms)
	LogMaxBytes  int64         // cap per job per stream (10 MiB)
	FinalTimeout time.Duration // bound on final writes after shutdown began (10s)
	// BatchWindow and BatchMax shape the batches of running and final writes
	// (group commit). The writes that arrive while one statement runs share
	// the next, at most BatchMax (DefaultBatchMax). A BatchWindow > 0 also
	// waits that long for more. At 0 it never waits.
	BatchWindow time.Duration
	BatchMax    int
	// FinalWindow is BatchWindow for the final writes (DefaultFinalWindow):
	// a job waiting for its final write holds no slot, so waiting a little
	// for more costs only the end's latency, and saves statements.
	FinalWindow time.Duration
	// LogBufferBudget bounds the job output held in memory, all jobs
	// together (DefaultLogBufferBudget of Capacity). A plugin that writes
	// faster than its output is stored waits for room.
	LogBufferBudget int64
	// SelfFenceAfter stops every job when no heartbeat has succeeded for this
	// long (config.SelfFenceAfter is stale_job − 2×keepalive − the longest
	// kill_grace), before the janitor could act on them. Resumable jobs are
	// detached, others stopped. Its own timer fires it, whatever the
	// heartbeat is doing. 0 disables it.
	SelfFenceAfter time.Duration
	CleanupTimeout time.Duration // bound on one Cleanup call (defaults.CleanupTimeout)
	// CleanupRetryIn is when a Cleanup that failed here is due again for the
	// queue's workers (cleanupRetryIn).
	CleanupRetryIn time.Duration
	// Liveness renews leases. It is a store on a pool of its own, so
	// heartbeats never wait for a connection the jobs' writes hold. Nil means
	// the main store.
	Liveness *store.Store
	// ListenConnect opens the LISTEN connection, a session of its own
	// (database_direct_url, because a transaction pooler drops LISTEN state).
	// Nil means one taken out of the main store's pool.
	ListenConnect func(ctx context.Context) (*pgx.Conn, error)
	// Follow, if set, receives the log and job-end notifications the API's
	// followers wait for, over the same LISTEN connection.
	Follow *notify.Hub
	// History tells when the database's history changed (a failover, lost
	// commits). The service reconciles what it holds (reconcile.go) and is
	// the tracker's OnChange. The agent's pools observe it on every new
	// connection, and the heartbeat on every beat. Nil means a tracker of its
	// own, fed by the heartbeat only.
	History *dbhistory.Tracker
	// Registration is what the agent registered at start (its Holder is
	// Holder's). The service registers it again if the agents row is
	// deleted while it runs. Zero: Holder, Capacity and the command names.
	Registration store.Registration

	Logger  *slog.Logger
	Metrics *metrics.Metrics // nil: a private set nobody scrapes

	// TestSignals let a test observe the service without sleeping.
	TestSignals TestSignals
}

const (
	// cleanupRetryIn is when a Cleanup that failed here is due again for
	// the queue's workers, unless Config says otherwise.
	cleanupRetryIn = time.Second
	// reattachTries bounds how often a resumable job whose plugin crashed
	// (or whose call broke) is resumed in the same attempt before the
	// attempt is failed, with its Cleanup.
	reattachTries = 3
	// writeRetryMax caps the wait between tries of a write that waits for
	// the database.
	writeRetryMax = time.Second
)

func (c *Config) setDefaults() {
	defaults.Fill(&c.Capacity, defaults.Capacity)
	defaults.Fill(&c.PollInterval, defaults.PollInterval)
	defaults.Fill(&c.Keepalive, defaults.Keepalive)
	defaults.Fill(&c.LogFlush, defaults.LogFlush)
	defaults.Fill(&c.LogMaxBytes, defaults.LogMaxBytesStream)
	defaults.Fill(&c.LogBufferBudget, DefaultLogBufferBudget(c.Capacity))
	defaults.Fill(&c.FinalTimeout, defaults.FinalTimeout)
	defaults.Fill(&c.CleanupTimeout, defaults.CleanupTimeout)
	defaults.Fill(&c.BatchMax, DefaultBatchMax)
	defaults.Fill(&c.CleanupRetryIn, cleanupRetryIn)
	if c.FinalWindow == 0 { // negative: the batch does not wait
		c.FinalWindow = DefaultFinalWindow
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
}

// Service is one agent's producer. It runs its claim loop, heartbeat and the
// loops beside them. Each job it claims runs in an executor (executor.go).
type Service struct {
	cfg     Config
	store   *store.Store
	plugins Plugins
	log     *slog.Logger
	logs    *logFlusher

	commands  []string
	resumable []string // plugins of our commands whose copy here can Resume
	// claimable is commands less those whose plugin fails its health check
	// (SetUnhealthy).
	claimable atomic.Pointer[[]string]

	mu   sync.Mutex
	jobs map[jobKey]*runningJob // one runner per (job, lease)
	// ending counts the jobs whose plugin call has returned and whose final
	// write waits in the finals batch. They hold their lease, not a slot.
	ending int

	draining atomic.Bool // no more claims
	// claimMu is held by a claim from its draining check until its jobs are
	// registered, so StopClaiming can wait for one in flight.
	claimMu        sync.Mutex
	changed        chan struct{} // a job ended (for WaitIdle)
	wake           chan struct{} // claim now
	beat           chan struct{} // heartbeat now
	wg             sync.WaitGroup
	superseded     chan struct{}
	supersededOnce sync.Once
	// drainRequested is closed once a heartbeat reads an operator's drain
	// request (store.HeartbeatResult.DrainRequested).
	drainRequested chan struct{}
	drainOnce      sync.Once

	// beats is when the last successful heartbeat was sent.
	beats *beatClock
	// orphanReports carries each heartbeat's orphan leases to the orphan loop
	// (the newest only). orphans is that loop's memory of them.
	orphanReports chan []store.Lease
	orphans       orphanWatch
	// historyChanges carries the tracker's changes to the reconcile loop (the
	// newest only). claimsPausedUntil holds claims back a little after a
	// reconcile (historySettled). recent remembers acknowledged ends and
	// releases a database that loses its history may need again.
	historyChanges    chan dbhistory.Event
	claimsPausedUntil time.Time // under mu
	recentMu          sync.Mutex
	recent            []recentEnd
	// running and finals batch the executors' running and final writes.
	running *batcher[store.Running, markedRunning]
	finals  *batcher[store.End, endResult]
	// quit is closed when Run begins its shutdown. stopWrites ends the
	// writes still waiting for the database FinalTimeout later.
	quit       chan struct{}
	quitOnce   sync.Once
	stopWrites context.CancelCauseFunc
	// exec is what every executor is built with.
	exec *executorDeps
}

// TestSignals lets tests observe the service without sleeping. Each is nil
// (and costs nothing) in production.
type TestSignals struct {
	// Heartbeat, if set, receives the result of every heartbeat.
	Heartbeat chan<- store.HeartbeatResult
	// Ended, if set, receives each attempt's end once it is stored (or
	// given up on).
	Ended chan<- Ended
	// SelfFenced, if set, receives how long the agent had been silent each
	// time the self-fence fired.
	SelfFenced chan<- time.Duration
	// Reconciled, if set, receives each change of the database's history
	// once the reconcile it started is over.
	Reconciled chan<- dbhistory.Event
	// Called, if set, receives each attempt just before its plugin is
	// called (running is stored, or the attempt is resumed).
	Called chan<- Called
	// Checkpointed, if set, receives each checkpoint once it is stored,
	// with the output written before it.
	Checkpointed chan<- Checkpointed
	// Flushed, if set, receives each job whose output a flush stored.
	Flushed chan<- Flushed
}

// Called is an attempt whose plugin is about to be called.
type Called struct {
	JobID  string
	Lease  int64
	Resume bool
}

// Checkpointed is one checkpoint the database acknowledged.
type Checkpointed struct {
	JobID string
	Lease int64
}

// Flushed is one job's output a flush stored, up to record Seq.
type Flushed struct {
	JobID string
	Lease int64
	Seq   int64
}

// Ended is one attempt's end as the runner saw it.
type Ended struct {
	JobID  string
	Lease  int64
	Status string // as stored: succeeded, failed, canceled, queued (retry), released, lease_lost
	Error  string
}

func signal[T any](ch chan<- T, v T) {
	if ch != nil {
		ch <- v
	}
}

// offerNewest puts v into ch (of capacity 1) without waiting. A value not
// read yet is stale, and v replaces it.
func offerNewest[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// receiveEach calls fn with each value ch carries until ctx ends.
func receiveEach[T any](ctx context.Context, ch <-chan T, fn func(T)) {
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-ch:
			fn(v)
		}
	}
}

// New returns a Service. It does nothing until Run.
func New(st *store.Store, plugins Plugins, cfg Config) *Service {
	cfg.setDefaults()
	cmds := make([]string, 0, len(cfg.Commands))
	for name := range cfg.Commands {
		cmds = append(cmds, name)
	}
	sort.Strings(cmds)
	if cfg.Registration.Name == "" {
		cfg.Registration = store.Registration{Capacity: cfg.Capacity, Commands: cmds}
	}
	cfg.Registration.Holder = cfg.Holder
	resumable := []string{} // non-nil: none means none (nil would mean any)
	for _, c := range cfg.Commands {
		// A plugin that is not loaded has the zero Info, which has no capability.
		if info, _ := plugins.Info(c.Plugin); info.Has(plugin.CapResume) {
			resumable = append(resumable, c.Plugin)
		}
	}
	slices.Sort(resumable)
	resumable = slices.Compact(resumable) // commands may share a plugin
	s := &Service{
		cfg:            cfg,
		store:          st,
		plugins:        plugins,
		log:            cfg.Logger.With("agent", cfg.Holder.Name),
		commands:       cmds,
		resumable:      resumable,
		jobs:           map[jobKey]*runningJob{},
		beats:          newBeatClock(time.Now()),
		quit:           make(chan struct{}),
		wake:           make(chan struct{}, 1),
		changed:        make(chan struct{}, 1),
		beat:           make(chan struct{}, 1),
		superseded:     make(chan struct{}),
		drainRequested: make(chan struct{}),

		orphanReports:  make(chan []store.Lease, 1),
		historyChanges: make(chan dbhistory.Event, 1),
	}
	s.claimable.Store(&cmds)
	if s.cfg.History == nil {
		s.cfg.History = dbhistory.NewTracker()
	}
	s.cfg.History.OnChange = s.onHistoryChange
	writes, stopWrites := context.WithCancelCause(context.Background())
	s.stopWrites = stopWrites
	s.cfg.Liveness = cmp.Or(s.cfg.Liveness, st)
	s.logs = newLogFlusher(st, cfg.LogMaxBytes, cfg.LogFlush, s.log, s.leaseLost, cfg.Metrics)
	s.logs.generation = cfg.Holder.Generation
	s.logs.bound(cfg.LogBufferBudget, cfg.Capacity)
	s.logs.flushed = cfg.TestSignals.Flushed
	s.logs.paused = func() bool {
		select {
		case <-s.cfg.History.Pending():
			return false
		default:
			return true
		}
	}
	s.running = newRunningBatcher(st, cfg.BatchWindow, cfg.BatchMax, cfg.FinalTimeout)
	s.finals = newFinalsBatcher(st, cfg.Holder, max(cfg.FinalWindow, 0), cfg.BatchMax, cfg.FinalTimeout)
	s.exec = s.executorDeps(writes)
	return s
}

// executorDeps is what the service's executors share. writes bounds their
// writes once shutdown began.
func (s *Service) executorDeps(writes context.Context) *executorDeps {
	return &executorDeps{
		holder: s.cfg.Holder, commands: s.cfg.Commands,
		store: s.store, plugins: s.plugins, logs: s.logs,
		running: s.running, finals: s.finals, history: s.cfg.History, beats: s.beats,
		metrics: s.cfg.Metrics, agentLog: s.log, signals: s.cfg.TestSignals, now: time.Now,
		finalTimeout: s.cfg.FinalTimeout, cleanupTimeout: s.cfg.CleanupTimeout,
		cleanupRetryIn: s.cfg.CleanupRetryIn, selfFenceAfter: s.cfg.SelfFenceAfter,
		writes: writes, quit: s.quit, freeSlot: s.freeSlot, remember: s.rememberEnd,
	}
}

// Run claims and runs jobs until ctx is cancelled, then stops every job it
// holds and returns when they are all accounted for. It returns an error if
// the agent must exit (another process took its name).
func (s *Service) Run(ctx context.Context) error {
	// The write batches outlive ctx. The runners' last writes go through them
	// after it ends, so they stop only once every runner has returned.
	batches := []startstop.Service{
		startstop.Func("running writes", s.running.loop),
		startstop.Func("final writes", s.finals.loop),
	}
	if err := startstop.StartAll(context.WithoutCancel(ctx), batches...); err != nil {
		return err
	}
	loops := []startstop.Service{
		startstop.Func("heartbeat", s.heartbeatLoop),
		startstop.Func("renewal", s.renewLoop),
		startstop.Func("orphan detach", s.orphanLoop),
		startstop.Func("reconcile", s.reconcileLoop),
		startstop.Func("self-fence", s.fenceLoop),
		startstop.Func("log flush", s.logs.run),
		startstop.Func("listen", s.listenLoop),
	}
	if err := startstop.StartAll(ctx, loops...); err != nil {
		startstop.StopAll(batches...)
		return err
	}

	err := s.claimLoop(ctx)
	s.quitOnce.Do(func() {
		close(s.quit)
		time.AfterFunc(s.cfg.FinalTimeout, func() { s.stopWrites(errors.New("the agent is shutting down")) })
	})

	// Shutdown. Stop every job, and wait for the runners to write what they
	// can.
	cause := errShutdown
	if err != nil {
		cause = errSuperseded
	}
	s.mu.Lock()
	for _, j := range s.jobs {
		j.cancel(cause)
	}
	s.mu.Unlock()
	s.wg.Wait()
	startstop.StopAll(batches...)
	startstop.StopAll(loops...)
	return err
}

// Running returns the IDs of the jobs this agent is running.
func (s *Service) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.jobs))
	for k := range s.jobs {
		ids = append(ids, k.ID)
	}
	sort.Strings(ids)
	return slices.Compact(ids)
}

// kick wakes the loop waiting on ch, unless a wake-up is already queued.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// free is how many more jobs the agent may claim now.
func (s *Service) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return freeSlots(s.cfg.Capacity, len(s.jobs), s.ending)
}

// freeSlots is how many jobs an agent of capacity may claim while it holds
// held leases, ending of them only waiting for their final write. Capacity
// counts the jobs that have not reached their final write (a plugin call, or
// one about to be made). Those in the finals batch hold a lease but no slot,
// and at most another capacity's worth of them is held.
func freeSlots(capacity, held, ending int) int {
	return max(0, min(capacity-(held-ending), 2*capacity-held))
}

// freeSlot gives j's slot to the next claim. Its plugin call has returned and
// only its final write is left.
func (s *Service) freeSlot(j *runningJob) {
	s.mu.Lock()
	if !j.ending {
		j.ending = true
		s.ending++
	}
	s.mu.Unlock()
	kick(s.wake)
}

func (s *Service) claimLoop(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.superseded:
			return errSuperseded
		case <-timer.C:
		case <-s.wake:
		}
		s.claimWhileFree(ctx)
		timer.Reset(s.cfg.PollInterval) // Go ≥ 1.23 timers: Reset drops a stale tick
	}
}

// claimWhileFree claims until nothing more is due or no slot is free (a
// finishing job wakes the loop again).
func (s *Service) claimWhileFree(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := s.claimOnce(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("claiming jobs", "err", err)
			}
			return
		}
		if n == 0 { // the next claimOnce finds whether a slot is still free
			return
		}
	}
}

// SetUnhealthy names the plugins whose latest health check failed (with
// the check's error, unused here). Until a later call leaves them out, the
// service claims no job of their commands, which it returns, sorted. The
// jobs it holds run on: a failed check says new work would likely fail, not
// that the work under way is lost.
func (s *Service) SetUnhealthy(plugins map[string]string) (paused []string) {
	cmds := make([]string, 0, len(s.commands))
	for _, name := range s.commands {
		if _, bad := plugins[s.cfg.Commands[name].Plugin]; bad {
			paused = append(paused, name)
		} else {
			cmds = append(cmds, name)
		}
	}
	was := *s.claimable.Swap(&cmds)
	if len(cmds) > len(was) {
		kick(s.wake) // a plugin healthy again: its backlog waits no poll interval
	}
	return paused
}

func (s *Service) claimOnce(ctx context.Context) (int, error) {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	free := s.free()
	if free <= 0 || s.draining.Load() || !s.historySettled() {
		return 0, nil
	}
	// With no command (every plugin fails its health check), ClaimWith
	// returns at once, without a round trip.
	claimed, err := s.store.ClaimWith(ctx, s.cfg.Holder, store.ClaimParams{Limit: free, Commands: *s.claimable.Load(), Resumable: s.resumable,
		Ready: s.historySettled})
	if err != nil {
		return 0, err
	}
	s.cfg.Metrics.JobsClaimed.Add(float64(len(claimed)))
	for _, c := range claimed {
		s.cfg.Metrics.ClaimLatency.WithLabelValues(c.Job.Command).Observe(c.QueueWait.Seconds())
		if c.Resume {
			s.cfg.Metrics.Resumes.WithLabelValues(c.Job.Command).Inc()
		}
		s.start(ctx, c)
	}
	return len(claimed), nil
}

// jobKey names one runner, a job under one lease. The same agent may hold a
// job again under a newer lease (it re-claimed a job it released). The older
// runner is stopped and can neither write nor unregister the newer.
type jobKey struct {
	ID    string
	Lease int64
}

// start registers the job and runs it on its own goroutine.
func (s *Service) start(ctx context.Context, c store.Claimed) {
	jctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	info, _ := s.plugins.Info(c.Job.Plugin)
	key := jobKey{c.Job.ID, c.Lease}
	j := &runningJob{key: key, claimed: c, claimedAt: s.exec.now(), ctx: jctx, cancelFn: cancel,
		resumable: info.Has(plugin.CapResume), hasCleanup: info.Has(plugin.CapCleanup), done: make(chan struct{})}
	s.mu.Lock()
	if s.jobs[key] != nil {
		// The database handed this process a lease it already runs under. It
		// lost the claim with its history, and this claim gave it back. The
		// runner goes on. The reconcile stores what else was lost.
		s.mu.Unlock()
		cancel(nil)
		s.log.Error("claimed a job under a lease this agent already runs: the database lost its history", "job", key.ID, "lease", key.Lease)
		s.onHistoryChange(dbhistory.Event{Change: dbhistory.Rewound})
		return
	}
	for k, old := range s.jobs {
		if k.ID == key.ID && k.Lease < key.Lease {
			old.cancel(errLeaseLost) // superseded by our own newer claim
		}
	}
	s.jobs[key] = j
	s.cfg.Metrics.RunningJobs.Set(float64(len(s.jobs)))
	s.mu.Unlock()
	s.logs.track(key, j.resumable)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.logs.untrack(key)
			s.mu.Lock()
			if j.ending {
				s.ending--
			}
			delete(s.jobs, key)
			s.cfg.Metrics.RunningJobs.Set(float64(len(s.jobs)))
			s.mu.Unlock()
			close(j.done)
			kick(s.changed)
			kick(s.wake)
		}()
		newExecutor(s.exec, j).run()
	}()
}

// leaseLost stops the runner whose lease a write or heartbeat found gone.
func (s *Service) leaseLost(key jobKey) {
	s.mu.Lock()
	j := s.jobs[key]
	s.mu.Unlock()
	if j != nil {
		j.cancel(errLeaseLost)
	}
}
