package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/queries"
)

// RequeueParams is a validated operator requeue.
type RequeueParams struct {
	JobID  string
	Reason string // required
	Key    string // idempotency key; "" = none
	By     string // who asked (the API's submitter identity); "" = unknown
}

func (p RequeueParams) hash() string {
	b, _ := json.Marshal(map[string]string{"job": p.JobID, "reason": p.Reason, "by": p.By}) // strings always encode
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Requeue puts a failed or canceled job back in the queue as a new attempt,
// with an event recording who, why and the key. With a key it is idempotent.
// The same request again returns the first answer and replayed=true. The key
// with a different request is ErrIdempotencyConflict. Keys are per By. One
// operator's key never answers, or conflicts with, another's. A job in any
// other status is a *TransitionError, and an unknown job ErrNotFound.
func (s *Store) Requeue(ctx context.Context, p RequeueParams) (job Job, replayed bool, err error) {
	hash := p.hash()
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		// The job's row lock comes first. A concurrent duplicate waits here
		// and then finds the key taken.
		var status jobstate.JobStatus
		err := tx.QueryRow(ctx, queries.Get("requeue_lock"), p.JobID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("locking job: %w", err)
		}
		if p.Key != "" {
			var got string
			err := tx.QueryRow(ctx, queries.Get("requeue_key_insert"), p.By, p.Key, p.JobID, hash).Scan(&got)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				var prevHash string
				var prev json.RawMessage
				if err := tx.QueryRow(ctx, queries.Get("requeue_key_get"), p.By, p.Key).Scan(&prevHash, &prev); err != nil {
					return fmt.Errorf("reading requeue key: %w", err)
				}
				if prevHash != hash {
					return ErrIdempotencyConflict
				}
				if err := json.Unmarshal(prev, &job); err != nil {
					return fmt.Errorf("decoding the stored requeue answer: %w", err)
				}
				replayed = true
				return nil
			case err != nil:
				return fmt.Errorf("storing requeue key: %w", err)
			}
		}
		if status != StatusFailed && status != StatusCanceled {
			return &TransitionError{Op: "requeue", Status: status}
		}
		msg := "requeued by " + orUnknown(p.By)
		if p.Key != "" {
			msg += " (key " + p.Key + ")"
		}
		msg += ": " + p.Reason
		if _, err := tx.Exec(ctx, queries.Get("requeue"), p.JobID, msg); err != nil {
			return fmt.Errorf("requeueing job: %w", err)
		}
		job, err = scanJob(tx.QueryRow(ctx, queries.Get("job_get"), p.JobID))
		if err != nil {
			return fmt.Errorf("reading requeued job: %w", err)
		}
		if p.Key != "" {
			b, err := json.Marshal(job)
			if err != nil {
				return fmt.Errorf("encoding requeue answer: %w", err)
			}
			if _, err := tx.Exec(ctx, queries.Get("requeue_key_answer"), p.By, p.Key, b); err != nil {
				return fmt.Errorf("storing requeue answer: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return Job{}, false, err
	}
	return job, replayed, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed operator"
	}
	return s
}

// DeleteExpired deletes up to limit terminal jobs past their retention
// (expires_at), with their events, logs, Cleanups and requeue keys, and
// returns how many it deleted.
func (s *Store) DeleteExpired(ctx context.Context, limit int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, queries.Get("retention_delete"), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("deleting expired jobs: %w", err)
	}
	return n, nil
}
