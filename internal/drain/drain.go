// Package drain is what an agent does between SIGTERM and exit, so that a
// rolling deploy neither fails nor delays remote work:
//
//  1. Stop claiming (the agent is already marked draining and not ready).
//  2. Hand resumable jobs to other agents at once (or at the deadline, or
//     leave them to the janitor, per drain.handoff).
//  3. Wait for the other jobs up to shutdown_timeout, or until hurried by a
//     second signal.
//  4. Stop what is left. The plugin cancels it, it is recorded failed
//     ("agent shut down before the job finished", retriable) and cleaned up.
//
// The caller then shuts the HTTP server down, marks the agent stopped and exits.
package drain

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetherjobs/tether/internal/config"
)

// Jobs is the part of the claim service a drain drives.
type Jobs interface {
	StopClaiming()
	Counts() (resumable, other int)
	HandOff(ctx context.Context, reason string) (int, error)
	Detach(ctx context.Context) int
	WaitIdle(ctx context.Context, includeResumable bool) error
	StopJobs(ctx context.Context) error
}

// Config is how one drain runs.
type Config struct {
	Handoff         string        // config.HandoffImmediate, HandoffDeadline or HandoffNever
	ShutdownTimeout time.Duration // how long jobs may run on after the signal
	// StopTimeout bounds step 4. It covers the plugin's own grace (kill_grace
	// for shell) plus the final writes.
	StopTimeout time.Duration
	AgentName   string
	Logger      *slog.Logger
}

// Result says what a drain did.
type Result struct {
	HandedOff int  // resumable jobs released to other agents
	Detached  int  // resumable jobs left to the janitor (handoff never)
	Stopped   int  // jobs still running at the deadline, now stopped
	Hurried   bool // a second signal cut the wait short
}

// Run drains jobs. hurry is closed by a second signal. ctx bounds the whole
// drain (it should outlive ShutdownTimeout + StopTimeout).
func Run(ctx context.Context, jobs Jobs, hurry <-chan struct{}, cfg Config) (Result, error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	var res Result
	reason := fmt.Sprintf("handoff: agent %s draining", cfg.AgentName)
	deadline := time.Now().Add(cfg.ShutdownTimeout)

	jobs.StopClaiming()
	r, o := jobs.Counts()
	log.Info("draining", "handoff", cfg.Handoff, "resumable_jobs", r, "other_jobs", o,
		"shutdown_timeout", cfg.ShutdownTimeout)

	handOff := func() {
		n, err := jobs.HandOff(ctx, reason)
		res.HandedOff += n
		if err != nil {
			log.Error("handing off resumable jobs", "err", err)
		}
	}
	switch cfg.Handoff {
	case config.HandoffImmediate, "":
		handOff()
	case config.HandoffNever:
		res.Detached = jobs.Detach(ctx)
	}

	// Wait for what is left. That is the other jobs, and with handoff at the
	// deadline the resumable ones too (they may finish on their own
	// meanwhile).
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	idle := make(chan error, 1)
	go func() { idle <- jobs.WaitIdle(waitCtx, cfg.Handoff == config.HandoffDeadline) }()
	select {
	case <-idle:
	case <-hurry:
		res.Hurried = true
		log.Info("second signal: not waiting for running jobs")
		cancel()
		<-idle
	}
	cancel()

	if cfg.Handoff == config.HandoffDeadline {
		handOff()
	}
	_, res.Stopped = jobs.Counts()
	if res.Stopped > 0 {
		log.Warn("stopping jobs still running", "jobs", res.Stopped)
	}
	stopCtx, cancelStop := context.WithTimeout(ctx, cfg.StopTimeout)
	defer cancelStop()
	if err := jobs.StopJobs(stopCtx); err != nil {
		return res, err
	}
	log.Info("drained", "handed_off", res.HandedOff, "detached", res.Detached, "stopped", res.Stopped, "hurried", res.Hurried)
	return res, nil
}
