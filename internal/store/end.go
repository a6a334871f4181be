package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/queries"
)

// Outcome is what one attempt came to.
type Outcome struct {
	Status     jobstate.JobStatus // succeeded, failed or canceled
	Result     json.RawMessage
	Error      string
	ErrorClass jobstate.ErrorClass
	Message    string // for the final event; "" = Error
	EventKind  string // the final event's kind; "" = Status
}

// End is the one transition that ends an attempt (queries/attempt_end.sql):
// the outcome, the Plan internal/lifecycle decided for it, and the fence.
type End struct {
	JobID string
	Lease int64
	// ExpectStatus, when set, is part of the fence. The janitor decided on
	// the status it read under lock.
	ExpectStatus jobstate.JobStatus
	// HolderGeneration, when set, is part of the fence. The holder ends its
	// own attempt (see LogBatch.Generation). The janitor leaves it empty.
	HolderGeneration string
	Actor            Holder
	// EventLease is the lease recorded on the final event. 0 means Lease. The
	// janitor records Lease+1 so its event outranks the old holder's.
	EventLease int64
	Outcome    Outcome
	Plan       lifecycle.Plan
	// CleanupBy names the agent that runs the Cleanup itself right after the
	// write. Its cleanups row is written claimed by it for CleanupHold. ""
	// leaves the Cleanup to the queue's workers.
	CleanupBy   string
	CleanupHold time.Duration
	// LogAfter, when set, is part of the fence of a resumable runner's end.
	// It is the highest output record number the runner saw the database
	// acknowledge. A database that holds fewer lost them with its history,
	// and the end is refused (ErrOutputGap): the job is resumed instead, and
	// its plugin writes that output again.
	LogAfter int64
	// Output is what a resumable runner still holds at its attempt's end.
	// It is stored in the end's own transaction, fenced like the end, at
	// most OutputLimit bytes a stream. Output stored apart from the end
	// would stay when the end is lost (the agent killed between the two
	// writes), and the resume that writes it again would store it twice.
	Output      LogBatch
	OutputLimit int64
}

// Ended is what an End wrote.
type Ended struct {
	// Status is the status stored. It is the outcome's, "queued" for a retry,
	// or "canceled" when a cancel request won over a retry.
	Status  jobstate.JobStatus
	Retried bool
	Attempt int // the job's attempt now
	// RunAfter is when a retry becomes due. It is nil while it waits for
	// Cleanup.
	RunAfter *time.Time
	// Cleanup is the claim on the Cleanup row when CleanupBy holds it. The
	// agent completes it with CleanupDone or CleanupFailed. Zero when no
	// Cleanup was due or the queue holds it.
	Cleanup CleanupClaim
}

// Querier runs a statement returning one row. A pool or a transaction fits.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DataError is a write PostgreSQL refused for what it carried (a value it
// cannot store), not for how it was reached. Retrying it cannot help.
type DataError struct{ Err error }

func (e *DataError) Error() string { return "the database refused the data: " + e.Err.Error() }
func (e *DataError) Unwrap() error { return e.Err }

// dataError wraps err as a *DataError when its SQLSTATE is a data exception
// (class 22), an integrity violation (23) or a program limit (54).
func dataError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 {
		switch pe.Code[:2] {
		case "22", "23", "54":
			return &DataError{Err: err}
		}
	}
	return err
}

// EndAttempt stores e on the pool, with e.Output in the same transaction.
// ErrLeaseLost means nothing was written, and so does ErrOutputGap
// (e.LogAfter).
func (s *Store) EndAttempt(ctx context.Context, e End) (Ended, error) {
	if e.LogAfter <= 0 && len(e.Output.Records) == 0 {
		return EndAttempt(ctx, s.pool, e)
	}
	var out Ended
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := checkNoGap(ctx, tx, LogBatch{JobID: e.JobID, Lease: e.Lease, Generation: e.HolderGeneration, After: e.LogAfter}); err != nil {
			return err
		}
		if len(e.Output.Records) > 0 {
			held, err := appendLogs(ctx, tx, []LogBatch{e.Output}, e.OutputLimit)
			if err != nil {
				return fmt.Errorf("storing the output of job %s with its end: %w", e.JobID, err)
			}
			if !held[e.JobID] {
				return ErrLeaseLost
			}
		}
		plain := e
		plain.LogAfter, plain.Output = 0, LogBatch{} // checked and stored: the end itself goes as any other
		var err error
		out, err = EndAttempt(ctx, tx, plain)
		return err
	})
	return out, err
}

// EndAttempt stores e through q (a transaction, for the janitor).
func EndAttempt(ctx context.Context, q Querier, e End) (Ended, error) {
	if FinalBatchable(e) {
		return endFinal(ctx, q, e)
	}
	o := e.Outcome
	kind, msg, evLease := e.event()
	args := pgx.NamedArgs{
		"job": e.JobID, "lease": e.Lease, "expect": e.ExpectStatus, "holder": e.HolderGeneration,
		"status": o.Status, "result": nullJSON(o.Result), "error": nullText(o.Error), "error_class": nullText(string(o.ErrorClass)),
		"agent": e.Actor.Name, "generation": e.Actor.Generation, "event_lease": evLease,
		"event_kind": kind, "message": msg,
		"retry": e.Plan.Retry, "wait_s": secs(e.Plan.Wait),
		"cleanup": e.Plan.Cleanup, "cleanup_by": e.CleanupBy, "cleanup_hold_s": secs(e.CleanupHold),
	}
	var n int
	var out Ended
	st := queries.Named("attempt_end")
	err := q.QueryRow(ctx, st.SQL, st.Args(args)...).Scan(&n, &out.Retried, &out.Status, &out.Attempt,
		&out.RunAfter, &out.Cleanup.Worker, &out.Cleanup.Attempts)
	if err != nil {
		return Ended{}, fmt.Errorf("ending attempt of job %s: %w", e.JobID, dataError(err))
	}
	if n == 0 {
		return Ended{}, ErrLeaseLost
	}
	if out.Cleanup.Worker != e.CleanupBy || e.CleanupBy == "" {
		out.Cleanup = CleanupClaim{}
	}
	return out, nil
}

// endFinal stores a plan with neither retry nor Cleanup (the hot path)
// through q. It uses the agent's batch statement with one row, which skips
// the statement nodes such a plan could never use.
func endFinal(ctx context.Context, q Querier, e End) (Ended, error) {
	st, args, err := finalEnds(e.Actor, []End{e})
	if err != nil {
		return Ended{}, err
	}
	var id string
	err = q.QueryRow(ctx, st.SQL, st.Args(args)...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Ended{}, ErrLeaseLost
	}
	if err != nil {
		return Ended{}, fmt.Errorf("ending attempt of job %s: %w", e.JobID, dataError(err))
	}
	return Ended{Status: e.Outcome.Status}, nil
}

// event is the final event's kind, message and lease.
func (e End) event() (kind, msg string, lease int64) {
	return cmp.Or(e.Outcome.EventKind, string(e.Outcome.Status)), cmp.Or(e.Outcome.Message, e.Outcome.Error), cmp.Or(e.EventLease, e.Lease)
}

// Levers returns a job's attempt and the stamped levers a retry decision
// needs.
func Levers(ctx context.Context, q Querier, jobID string) (attempt int, l limits.Set, err error) {
	var backoff, backoffMax float64
	err = q.QueryRow(ctx, queries.Get("job_levers"), pgx.NamedArgs{"job": jobID}).Scan(&attempt, &l.MaxRetry, &backoff, &backoffMax)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, l, ErrNotFound
	}
	if err != nil {
		return 0, l, fmt.Errorf("reading the levers of job %s: %w", jobID, err)
	}
	l.RetryBackoff, l.RetryBackoffMax = fromSecs(backoff), fromSecs(backoffMax)
	return attempt, l, nil
}

// Finish ends an attempt whose plugin left nothing to clean up, deciding a
// retry from the job's stamped levers (read first). The agent does not use
// it. It decides with the levers its claim returned. ErrLeaseLost means
// nothing was written.
func (s *Store) Finish(ctx context.Context, h Holder, jobID string, lease int64, o Outcome) error {
	attempt, l, err := Levers(ctx, s.pool, jobID)
	if err != nil {
		return err
	}
	plan := lifecycle.Decide(lifecycle.Input{Status: o.Status, ErrorClass: o.ErrorClass, Attempt: attempt, Levers: l})
	_, err = s.EndAttempt(ctx, End{JobID: jobID, Lease: lease, Actor: h, Outcome: o, Plan: plan})
	return err
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// PriorEnd reports whether h already ended (or released) its attempt of jobID
// under lease. A fenced end or release sent again after its acknowledgement
// was lost finds its own earlier write, not a lost lease. kind is the event
// that write recorded (succeeded, failed, canceled, retry_scheduled or
// released). ended is what it stored as far as the runner needs it, with the
// Cleanup claim it gave cleanupBy if that claim still holds. found is false
// when h wrote no such event. Then the lease was really lost.
func (s *Store) PriorEnd(ctx context.Context, h Holder, jobID string, lease int64, cleanupBy string) (kind string, ended Ended, found bool, err error) {
	st := queries.Named("attempt_end_prior")
	err = s.pool.QueryRow(ctx, st.SQL, st.Args(map[string]any{
		"job": jobID, "lease": lease, "agent": h.Name, "generation": h.Generation, "cleanup_by": cleanupBy,
	})...).Scan(&kind, &ended.Attempt, &ended.Cleanup.Worker, &ended.Cleanup.Attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", Ended{}, false, nil
	}
	if err != nil {
		return "", Ended{}, false, fmt.Errorf("reading whether job %s's attempt under lease %d was already ended: %w", jobID, lease, err)
	}
	switch kind {
	case "retry_scheduled":
		ended.Status, ended.Retried = StatusQueued, true
	case "released":
		ended.Status = StatusRunning
	default:
		ended.Status = jobstate.JobStatus(kind)
	}
	return kind, ended, true, nil
}
