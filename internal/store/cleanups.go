package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/queries"
)

// The cleanup queue is the durable list of plugin Cleanup calls. A row is
// written by the transition that ends an attempt (EndAttempt), in the same
// statement as the outcome. So Cleanup only ever runs after the outcome is
// durable, and it is never forgotten if the agent dies. The agent that
// ended the attempt holds the first claim and runs the Cleanup itself.
// Janitor workers claim due rows whose claim lapsed or failed and retry
// them with backoff. A row leaves the queue only when a Cleanup succeeded.
// A retry or requeue waiting for it becomes claimable then.

// CleanupClaim fences a worker's answer about one queued Cleanup.
type CleanupClaim struct {
	Worker   string
	Attempts int
}

// Held reports whether the claim is someone's.
func (c CleanupClaim) Held() bool { return c.Worker != "" }

// Cleanup is one pending Cleanup call, as the API lists it.
type Cleanup = api.Cleanup

// ClaimedCleanup is a Cleanup a worker holds.
type ClaimedCleanup struct {
	JobID, Plugin, Command string
	Context                json.RawMessage
	Attempt                int    // the job's attempt that left remote work
	Handle                 []byte // that attempt's last checkpointed handle
	Claim                  CleanupClaim
}

// EnqueueCleanup queues a Cleanup for a job whose terminal status is
// committed. A Cleanup already pending is kept. reason says why the remote
// work must go.
func (s *Store) EnqueueCleanup(ctx context.Context, jobID, reason string) error {
	if _, err := s.pool.Exec(ctx, queries.Get("cleanup_enqueue"), jobID, reason); err != nil {
		return fmt.Errorf("queueing cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// ListCleanups returns up to limit pending Cleanups with job IDs after
// after, in job ID order, so a Cleanup that keeps failing stays visible.
func (s *Store) ListCleanups(ctx context.Context, after string, limit int) ([]Cleanup, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, queries.Get("cleanup_list"), after, limit)
	if err != nil {
		return nil, fmt.Errorf("listing cleanups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cleanup, error) {
		var c Cleanup
		var lastErr, claimedBy *string
		err := r.Scan(&c.JobID, &c.Plugin, &c.Command, &c.Reason, &c.Attempts, &c.NextAt,
			&lastErr, &c.CreatedAt, &claimedBy, &c.ClaimedUntil)
		if lastErr != nil {
			c.LastError = *lastErr
		}
		if claimedBy != nil {
			c.ClaimedBy = *claimedBy
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing cleanups: %w", err)
	}
	return out, nil
}

// CountCleanups returns how many Cleanups are pending.
func (s *Store) CountCleanups(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, queries.Get("cleanup_count")).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting cleanups: %w", err)
	}
	return n, nil
}

// CleanupBacklog returns how many Cleanups are queued and how long the
// oldest has waited, by the database clock. The metrics export it.
func (s *Store) CleanupBacklog(ctx context.Context) (int, time.Duration, error) {
	var n int
	var oldest float64
	if err := s.pool.QueryRow(ctx, queries.Get("cleanup_stats")).Scan(&n, &oldest); err != nil {
		return 0, 0, fmt.Errorf("reading the cleanup backlog: %w", err)
	}
	return n, time.Duration(oldest * float64(time.Second)), nil
}

// ClaimCleanups takes up to limit due Cleanups of the given plugins for
// hold.
func (s *Store) ClaimCleanups(ctx context.Context, worker string, plugins []string, limit int, hold time.Duration) ([]ClaimedCleanup, error) {
	rows, err := s.pool.Query(ctx, queries.Get("cleanup_claim"), worker, plugins, limit, hold.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claiming cleanups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedCleanup, error) {
		c := ClaimedCleanup{Claim: CleanupClaim{Worker: worker}}
		err := r.Scan(&c.JobID, &c.Plugin, &c.Command, &c.Context, &c.Attempt, &c.Claim.Attempts, &c.Handle)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming cleanups: %w", err)
	}
	return out, nil
}

// CleanupDone records a successful Cleanup, fenced by the claim. kind is the
// event's, cleanup_ok, or cleanup_skipped when none was needed. The row goes,
// and a retry or requeue waiting for it becomes claimable at its retry_at.
func (s *Store) CleanupDone(ctx context.Context, jobID string, claim CleanupClaim, generation, kind, msg string) error {
	if _, err := s.pool.Exec(ctx, queries.Get("cleanup_done"), jobID, claim.Worker, claim.Attempts, generation, kind, msg); err != nil {
		return fmt.Errorf("recording cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// CleanupFailed records a failed Cleanup, fenced by the claim. It is due
// again after retryIn, for any worker.
func (s *Store) CleanupFailed(ctx context.Context, jobID string, claim CleanupClaim, generation string, retryIn time.Duration, cause error) error {
	if _, err := s.pool.Exec(ctx, queries.Get("cleanup_failed"), jobID, claim.Worker, claim.Attempts, generation, retryIn.Seconds(), cause.Error()); err != nil {
		return fmt.Errorf("recording failed cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// LiftOrphanGates makes claimable up to limit retries that wait for a
// Cleanup no longer queued.
func (s *Store) LiftOrphanGates(ctx context.Context, limit int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, queries.Get("retry_gate_lift"), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("releasing retries whose Cleanup is gone: %w", err)
	}
	return n, nil
}
