// Package claim runs an agent's share of the work: it claims jobs under fenced
// leases, keeps those leases alive with one heartbeat statement per tick, runs
// each job through its plugin, streams the job's output into job_logs, and
// writes each job's final status exactly once.
package claim

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// Plugins is the part of the plugin manager the claim loop uses.
type Plugins interface {
	Info(name string) (plugin.Info, bool)
	Execute(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error)
	Resume(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error)
	Cleanup(ctx context.Context, name string, job *plugin.Job) error
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
	// SelfFenceAfter stops every job when no heartbeat has succeeded for this
	// long (stale_job − 2×keepalive), before the janitor could act on them:
	// resumable jobs are detached, others killed. 0 disables it.
	SelfFenceAfter time.Duration
	// EnqueueCleanup queues a Cleanup that failed here for retries with
	// backoff (the janitor's cleanup queue). Nil: a failure is only recorded.
	EnqueueCleanup func(ctx context.Context, jobID, reason string) error
	CleanupTimeout time.Duration // bound on one Cleanup call (2m)

	Logger  *slog.Logger
	Metrics *metrics.Metrics // nil: a private set nobody scrapes
}

func (c *Config) setDefaults() {
	if c.Capacity <= 0 {
		c.Capacity = 10
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.Keepalive <= 0 {
		c.Keepalive = 5 * time.Second
	}
	if c.LogFlush <= 0 {
		c.LogFlush = 200 * time.Millisecond
	}
	if c.LogMaxBytes <= 0 {
		c.LogMaxBytes = 10 << 20
	}
	if c.FinalTimeout <= 0 {
		c.FinalTimeout = 10 * time.Second
	}
	if c.CleanupTimeout <= 0 {
		c.CleanupTimeout = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
}

// Why a job's context was cancelled.
var (
	errCancelRequested = errors.New("cancel requested")
	errLeaseLost       = errors.New("lease lost")
	errShutdown        = errors.New("agent shut down before the job finished")
	errSuperseded      = errors.New("another process registered under this agent's name")
	errSelfFenced      = errors.New("self-fenced: the agent could not renew its leases")
	errHandoff         = errors.New("handed off to another agent")
	errDetached        = errors.New("detached at shutdown; left to the janitor")
	errActiveTimeout   = errors.New("active_timeout exceeded")
)

// Service is one agent's claim loop, heartbeat and job runners.
type Service struct {
	cfg     Config
	store   *store.Store
	plugins Plugins
	log     *slog.Logger
	logs    *logFlusher

	commands []string

	mu   sync.Mutex
	jobs map[string]*runningJob

	draining       atomic.Bool   // no more claims
	changed        chan struct{} // a job ended (for WaitIdle)
	wake           chan struct{} // claim now
	beat           chan struct{} // heartbeat now
	wg             sync.WaitGroup
	superseded     chan struct{}
	supersededOnce sync.Once

	// lastBeat is when the last successful heartbeat was sent (monotonic);
	// the database stamped it no earlier, so fencing on it is safe.
	lastBeat time.Time
	// deferred are fenced writes that must wait for the database to return.
	deferred []deferredWrite

	// Test signals: a test may wait on these to observe the loop.
	TestSignals TestSignals
}

// TestSignals lets tests observe the service without sleeping.
type TestSignals struct {
	// Heartbeat, if set, receives the result of every heartbeat.
	Heartbeat chan<- store.HeartbeatResult
}

// New returns a Service. It does nothing until Run.
func New(st *store.Store, plugins Plugins, cfg Config) *Service {
	cfg.setDefaults()
	cmds := make([]string, 0, len(cfg.Commands))
	for name := range cfg.Commands {
		cmds = append(cmds, name)
	}
	sort.Strings(cmds)
	s := &Service{
		cfg:        cfg,
		store:      st,
		plugins:    plugins,
		log:        cfg.Logger.With("agent", cfg.Holder.Name),
		commands:   cmds,
		jobs:       map[string]*runningJob{},
		wake:       make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
		beat:       make(chan struct{}, 1),
		superseded: make(chan struct{}),
	}
	s.lastBeat = time.Now()
	s.logs = newLogFlusher(st, cfg.LogMaxBytes, cfg.LogFlush, s.log, s.leaseLost, cfg.Metrics)
	return s
}

// Run claims and runs jobs until ctx is cancelled, then stops every job it
// holds and returns when they are all accounted for. It returns an error if
// the agent must exit (another process took its name).
func (s *Service) Run(ctx context.Context) error {
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()

	var loops sync.WaitGroup
	loops.Add(3)
	go func() { defer loops.Done(); s.heartbeatLoop(loopCtx) }()
	go func() { defer loops.Done(); s.logs.run(loopCtx) }()
	go func() { defer loops.Done(); s.listenLoop(loopCtx) }()

	err := s.claimLoop(loopCtx)

	// Shutdown: stop every job, wait for the runners to write what they can.
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
	stopLoops()
	loops.Wait()
	return err
}

// Running returns the IDs of the jobs this agent is running.
func (s *Service) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (s *Service) kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Service) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Capacity - len(s.jobs)
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
		for ctx.Err() == nil {
			n, err := s.claimOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("claiming jobs", "err", err)
				}
				break
			}
			if n == 0 || s.free() == 0 {
				break // nothing more now, or full: a finishing job wakes us
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(s.cfg.PollInterval)
	}
}

func (s *Service) claimOnce(ctx context.Context) (int, error) {
	free := s.free()
	if free <= 0 || s.draining.Load() {
		return 0, nil
	}
	claimed, err := s.store.Claim(ctx, s.cfg.Holder, free, s.commands)
	if err != nil {
		return 0, err
	}
	s.cfg.Metrics.JobsClaimed.Add(float64(len(claimed)))
	for _, c := range claimed {
		s.start(ctx, c)
	}
	return len(claimed), nil
}

// start registers the job and runs it on its own goroutine.
func (s *Service) start(ctx context.Context, c store.Claimed) {
	jctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	info, _ := s.plugins.Info(c.Job.Plugin)
	j := &runningJob{claimed: c, ctx: jctx, cancelFn: cancel, resumable: info.Has(plugin.CapResume), done: make(chan struct{})}
	s.mu.Lock()
	s.jobs[c.Job.ID] = j
	s.cfg.Metrics.RunningJobs.Set(float64(len(s.jobs)))
	s.mu.Unlock()
	s.logs.track(c.Job.ID, c.Lease)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			if !j.deferred {
				s.logs.untrack(c.Job.ID) // else after the deferred write
			}
			s.mu.Lock()
			delete(s.jobs, c.Job.ID)
			s.cfg.Metrics.RunningJobs.Set(float64(len(s.jobs)))
			s.mu.Unlock()
			close(j.done)
			s.kick(s.changed)
			s.kick(s.wake)
		}()
		s.run(j)
	}()
}

// leaseLost stops a job whose lease a write or heartbeat found gone.
func (s *Service) leaseLost(jobID string) {
	s.mu.Lock()
	j := s.jobs[jobID]
	s.mu.Unlock()
	if j != nil {
		j.cancel(errLeaseLost)
	}
}
