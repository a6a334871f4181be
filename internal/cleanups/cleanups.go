// Package cleanups owns the durable queue of plugin Cleanup calls. A row is
// written by the transition that ends an attempt (store.EndAttempt), in the
// same statement as the outcome, so Cleanup only ever runs after the outcome
// is durable and is never forgotten if the agent dies. The agent that ended
// the attempt holds the first claim and runs the Cleanup itself; janitor
// workers claim due rows whose claim lapsed or failed and retry them with
// backoff. A row leaves the queue only when a Cleanup succeeded; a retry or
// requeue waiting for it becomes claimable then.
package cleanups

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/queries"
)

// Execer runs a statement; both pgx.Tx and *pgxpool.Pool are one.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Enqueue queues a Cleanup for a job whose terminal status is committed (or
// commits in the same transaction). A Cleanup already pending is kept.
// reason says why the remote work must go.
func Enqueue(ctx context.Context, db Execer, jobID, reason string) error {
	if _, err := db.Exec(ctx, queries.Get("cleanup_enqueue"), jobID, reason); err != nil {
		return fmt.Errorf("queueing cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// Cleanup is one pending Cleanup call, as the API lists it.
type Cleanup struct {
	JobID        string     `json:"job_id"`
	Plugin       string     `json:"plugin"`
	Command      string     `json:"command"`
	Reason       string     `json:"reason"`
	Attempts     int        `json:"attempts"`
	NextAt       time.Time  `json:"next_at"`
	LastError    string     `json:"last_error,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	ClaimedBy    string     `json:"claimed_by,omitempty"`
	ClaimedUntil *time.Time `json:"claimed_until,omitempty"`
}

// List returns up to limit pending Cleanups with job IDs after after, in job
// ID order, so a Cleanup that keeps failing stays visible.
func List(ctx context.Context, pool *pgxpool.Pool, after string, limit int) ([]Cleanup, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := pool.Query(ctx, queries.Get("cleanup_list"), after, limit)
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

// Count returns how many Cleanups are pending.
func Count(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, queries.Get("cleanup_count")).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting cleanups: %w", err)
	}
	return n, nil
}

// Stats returns how many Cleanups are queued and how long the oldest has
// waited, by the database clock (the backlog the metrics export).
func Stats(ctx context.Context, pool *pgxpool.Pool) (int, time.Duration, error) {
	var n int
	var oldest float64
	if err := pool.QueryRow(ctx, queries.Get("cleanup_stats")).Scan(&n, &oldest); err != nil {
		return 0, 0, fmt.Errorf("reading the cleanup backlog: %w", err)
	}
	return n, time.Duration(oldest * float64(time.Second)), nil
}

// Claimed is a Cleanup a worker holds.
type Claimed struct {
	JobID, Plugin, Command string
	Context                json.RawMessage
	Attempt                int    // the job's attempt that left remote work
	Handle                 []byte // that attempt's last checkpointed handle
	Claim                  store.CleanupClaim
}

// Claim takes up to limit due Cleanups of the given plugins for hold.
func Claim(ctx context.Context, pool *pgxpool.Pool, worker string, plugins []string, limit int, hold time.Duration) ([]Claimed, error) {
	rows, err := pool.Query(ctx, queries.Get("cleanup_claim"), worker, plugins, limit, hold.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claiming cleanups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		c := Claimed{Claim: store.CleanupClaim{Worker: worker}}
		err := r.Scan(&c.JobID, &c.Plugin, &c.Command, &c.Context, &c.Attempt, &c.Claim.Attempts, &c.Handle)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming cleanups: %w", err)
	}
	return out, nil
}

// Done records a successful Cleanup (event kind cleanup_ok, or
// cleanup_skipped when none was needed), fenced by the claim: the row goes,
// and a retry or requeue waiting for it becomes claimable at its retry_at.
func Done(ctx context.Context, db Execer, jobID string, claim store.CleanupClaim, generation, kind, msg string) error {
	if _, err := db.Exec(ctx, queries.Get("cleanup_done"), jobID, claim.Worker, claim.Attempts, generation, kind, msg); err != nil {
		return fmt.Errorf("recording cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// Failed records a failed Cleanup, fenced by the claim: due again after
// retryIn, for any worker.
func Failed(ctx context.Context, db Execer, jobID string, claim store.CleanupClaim, generation string, retryIn time.Duration, cause error) error {
	if _, err := db.Exec(ctx, queries.Get("cleanup_failed"), jobID, claim.Worker, claim.Attempts, generation, retryIn.Seconds(), cause.Error()); err != nil {
		return fmt.Errorf("recording failed cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// LiftOrphanGates makes claimable up to limit retries that wait for a
// Cleanup no longer queued.
func LiftOrphanGates(ctx context.Context, pool *pgxpool.Pool, limit int) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, queries.Get("retry_gate_lift"), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("releasing retries whose Cleanup is gone: %w", err)
	}
	return n, nil
}

// Backoff is the wait after the attempts-th failed call: lo doubling per
// attempt, capped at hi.
func Backoff(attempts int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempts && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}
