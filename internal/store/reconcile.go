package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/queries"
)

// HeldState is what the database says now about a job an agent holds or
// recently ended (ReadHeld), for the reconcile after its history changed.
type HeldState struct {
	JobID   string
	Status  jobstate.JobStatus
	Attempt int
	// Active is false when the job has no active row (it ended).
	Active            bool
	Agent, Generation string // its holder; "" when unowned
	Lease             int64
	LogSeq            int64 // the highest log record stored under Lease
	Handle            []byte
}

// ReadHeld reads the state of the jobs ids. A job the database does not have
// is missing from the answer.
func (s *Store) ReadHeld(ctx context.Context, ids []string) (map[string]HeldState, error) {
	st := queries.Named("reconcile_read")
	rows, err := s.pool.Query(ctx, st.SQL, st.Args(map[string]any{"ids": ids})...)
	if err != nil {
		return nil, fmt.Errorf("reading %d held jobs: %w", len(ids), err)
	}
	out := make(map[string]HeldState, len(ids))
	var h HeldState
	_, err = pgx.ForEachRow(rows, []any{&h.JobID, &h.Status, &h.Attempt, &h.Active, &h.Agent, &h.Generation, &h.Lease, &h.LogSeq, &h.Handle}, func() error {
		out[h.JobID] = h
		h.Handle = nil // the next row scans into a fresh slice
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %d held jobs: %w", len(ids), err)
	}
	return out, nil
}

// Reassert gives h back its claim of jobID under lease in attempt, which the
// database lost with its history (queries/lease_reassert.sql). It does so
// only while the job is unowned under a lower lease of that attempt and not
// ended. running says the plugin was called. ErrLeaseLost means the database
// has moved on (another holder, another attempt, an end) and nothing was
// written.
func (s *Store) Reassert(ctx context.Context, h Holder, jobID string, lease int64, attempt int, running bool) error {
	st := queries.Named("lease_reassert")
	var id string
	err := s.pool.QueryRow(ctx, st.SQL, st.Args(map[string]any{
		"job": jobID, "lease": lease, "attempt": attempt, "running": running,
		"agent": h.Name, "generation": h.Generation,
	})...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("re-asserting lease %d of job %s: %w", lease, jobID, err)
	}
	return nil
}
