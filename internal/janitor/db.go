package janitor

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/queries"
)

// candidate is one locked active row with what Decide needs.
type candidate struct {
	JobID   string
	Command string
	Lease   int64
	Input   Input
}

func scanCandidates(rows pgx.Rows) ([]candidate, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		var hbAge, relAge, seenAge, pending, queuedAge, active, attemptAge float64
		in := &c.Input
		err := r.Scan(&c.JobID, &in.Status, &in.Plugin, &c.Command, &in.Started,
			&in.AgentName, &in.AgentGeneration, &c.Lease,
			&hbAge, &in.Released, &relAge,
			&in.Owner.Exists, &in.Owner.Generation, &in.Owner.State, &seenAge,
			&in.PluginLoaded, &in.Resumable,
			&pending, &queuedAge, &active, &attemptAge)
		in.PendingTimeout, in.QueuedAge = secondsDuration(pending), secondsDuration(queuedAge)
		in.ActiveTimeout, in.AttemptAge = secondsDuration(active), secondsDuration(attemptAge)
		in.HeartbeatAge = secondsDuration(hbAge)
		in.ReleasedAge = secondsDuration(relAge)
		in.Owner.LastSeenAge = secondsDuration(seenAge)
		return c, err
	})
}

func secondsDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

func secs(d time.Duration) float64 { return d.Seconds() }

// apply writes one decided action inside tx, fenced by (job_id, lease,
// status). It reports whether the fence held.
func apply(ctx context.Context, tx pgx.Tx, actor store.Holder, c candidate, a Action) (bool, error) {
	var n int
	var err error
	switch a.Kind {
	case None:
		return false, nil
	case Requeue:
		err = tx.QueryRow(ctx, queries.Get("janitor_requeue"), c.JobID, c.Lease, c.Input.Status,
			actor.Name, actor.Generation, a.Reason).Scan(&n)
	case Release:
		msg := fmt.Sprintf("released: %s (was held by %s)", a.Reason, c.Input.AgentName)
		err = tx.QueryRow(ctx, queries.Get("janitor_release"), c.JobID, c.Lease, c.Input.Status,
			actor.Name, actor.Generation, a.Reason, msg).Scan(&n)
	case Fail, FailAWOL, FailActiveTimeout:
		// Retriable: retried when the job has retries left.
		err = tx.QueryRow(ctx, queries.Get("janitor_finish"), c.JobID, c.Lease, c.Input.Status,
			store.StatusFailed, a.Reason, "retriable", actor.Name, actor.Generation, a.Cleanup, "failed",
			true, rand.Float64()).Scan(&n)
	case FailPending:
		// Waiting longer would not help: never retried.
		err = tx.QueryRow(ctx, queries.Get("janitor_finish"), c.JobID, c.Lease, c.Input.Status,
			store.StatusFailed, a.Reason, "permanent", actor.Name, actor.Generation, false, "failed",
			false, 0.0).Scan(&n)
	case Cancel:
		err = tx.QueryRow(ctx, queries.Get("janitor_finish"), c.JobID, c.Lease, c.Input.Status,
			store.StatusCanceled, a.Reason, nil, actor.Name, actor.Generation, a.Cleanup, "canceled",
			false, 0.0).Scan(&n)
	default:
		return false, fmt.Errorf("unknown janitor action %q", a.Kind)
	}
	if err != nil {
		return false, fmt.Errorf("applying %s to job %s: %w", a.Kind, c.JobID, err)
	}
	return n > 0, nil
}

// Execer runs a statement; both pgx.Tx and *pgxpool.Pool are one.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Enqueue queues a plugin Cleanup for a job. Call it in the transaction that
// commits the job's terminal status, or after that commit: Cleanup must never
// run before the outcome is durable. A Cleanup already pending for the job is
// kept as it is. reason says why the remote work must go (the job's error).
func Enqueue(ctx context.Context, db Execer, jobID, reason string) error {
	if _, err := db.Exec(ctx, queries.Get("cleanup_enqueue"), jobID, reason); err != nil {
		return fmt.Errorf("queueing cleanup of job %s: %w", jobID, err)
	}
	return nil
}

// Cleanup is one pending Cleanup call.
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

// ListCleanups returns up to limit pending Cleanups with job IDs after
// after, in job ID order, so a Cleanup that keeps failing stays visible.
func ListCleanups(ctx context.Context, pool *pgxpool.Pool, after string, limit int) ([]Cleanup, error) {
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

// pendingCleanups counts the queue.
func pendingCleanups(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, queries.Get("cleanup_count")).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting cleanups: %w", err)
	}
	return n, nil
}

// claimedCleanup is a Cleanup this worker holds.
type claimedCleanup struct {
	JobID, Plugin, Command string
	Context                json.RawMessage
	Attempt                int // the job's attempt
	Attempts               int // Cleanup calls including this one
}

func claimCleanups(ctx context.Context, pool *pgxpool.Pool, worker string, plugins []string, limit int, hold time.Duration) ([]claimedCleanup, error) {
	rows, err := pool.Query(ctx, queries.Get("cleanup_claim"), worker, plugins, limit, secs(hold))
	if err != nil {
		return nil, fmt.Errorf("claiming cleanups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimedCleanup, error) {
		var c claimedCleanup
		err := r.Scan(&c.JobID, &c.Plugin, &c.Command, &c.Context, &c.Attempt, &c.Attempts)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming cleanups: %w", err)
	}
	return out, nil
}

func cleanupDone(ctx context.Context, pool *pgxpool.Pool, worker store.Holder, c claimedCleanup, kind, msg string) error {
	if _, err := pool.Exec(ctx, queries.Get("cleanup_done"), c.JobID, worker.Name, c.Attempts, worker.Generation, kind, msg); err != nil {
		return fmt.Errorf("recording cleanup of job %s: %w", c.JobID, err)
	}
	return nil
}

func cleanupFailed(ctx context.Context, pool *pgxpool.Pool, worker store.Holder, c claimedCleanup, retryIn time.Duration, cause error) error {
	if _, err := pool.Exec(ctx, queries.Get("cleanup_failed"), c.JobID, worker.Name, c.Attempts, worker.Generation, secs(retryIn), cause.Error()); err != nil {
		return fmt.Errorf("recording failed cleanup of job %s: %w", c.JobID, err)
	}
	return nil
}

// liftOrphanGates makes claimable up to limit retries that wait for a
// Cleanup no longer queued.
func liftOrphanGates(ctx context.Context, pool *pgxpool.Pool, limit int) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, queries.Get("retry_gate_lift"), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("releasing retries whose Cleanup is gone: %w", err)
	}
	return n, nil
}
