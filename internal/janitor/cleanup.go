package janitor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tetherjobs/tether/internal/jobctx"
	"github.com/tetherjobs/tether/internal/startstop"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// The Cleanup worker's defaults (Config). The backoff after a failed Cleanup
// starts at a second and doubles up to five minutes. Four Cleanup calls run
// at once.
const (
	defaultCleanupBackoffMin  = time.Second
	defaultCleanupBackoffMax  = 5 * time.Minute
	defaultCleanupConcurrency = 4
)

// resultTimeout bounds the write of a Cleanup's outcome, which runs even when
// the agent is shutting down.
const resultTimeout = 10 * time.Second

// CleanupWorker is the service that runs a CleanupPass at once and then
// every jittered clean_interval. Database errors are logged and retried next
// pass.
func (s *Service) CleanupWorker() *startstop.Loop {
	return s.periodic("cleanup pass", s.CleanupPass)
}

// CleanupPass runs the due Cleanups of the plugins this agent has loaded,
// CleanupConcurrency at a time, until none is due. It returns how many it
// attempted.
func (s *Service) CleanupPass(ctx context.Context) (int, error) {
	names := slices.Sorted(maps.Keys(s.plugins.Infos()))
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
