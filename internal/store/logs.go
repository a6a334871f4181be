package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// LogBatch is the output of one job gathered since the last flush.
type LogBatch struct {
	JobID string
	Lease int64
	// Generation, when set, is part of the fence. It is the holder's process
	// generation. A database that lost its history can hand the same lease
	// number to another process. The agent always sets it. "" (tests, tools)
	// fences by lease alone.
	Generation string
	// Records are the writes in the order they arrived, both streams
	// interleaved. Stdout and Stderr are a shorthand for callers with no
	// order to keep and nothing to send twice (tests, tools). They are
	// appended after Records, all of stdout then all of stderr, stamped with
	// the time of the append, with no identity (Seq 0).
	Records        []LogRecord
	Stdout, Stderr []byte
	// After, when set, is the highest record number the runner saw the
	// database acknowledge under this lease before this batch. The
	// statements that store a resumable runner's output (CheckpointDescribed,
	// and EndAttempt with End.Output) refuse the batch with ErrOutputGap when
	// the database holds fewer. Plain flushes ignore it.
	After int64
}

// LogRecord is one write of a plugin's output as the agent received it.
type LogRecord struct {
	// Seq numbers the record in its runner's write order (1, 2, … per job and
	// lease). A record sent again after a lost acknowledgement is stored
	// once. 0 means no identity, so it is stored every time it is sent.
	Seq    int64
	Stream string    // stdout or stderr
	At     time.Time // the agent's clock at receipt
	Data   []byte
}

// AppendLogs writes many jobs' output in one fenced transaction, capping
// each stream at maxPerStream bytes per job. It returns the IDs whose lease
// held. The output of the others was dropped. The jobs' followers are
// notified (tether_logs) when it commits. Records with a Seq at or below the
// highest one already stored for their job's lease are skipped. Sending a
// batch again after its acknowledgement was lost stores nothing twice.
func (s *Store) AppendLogs(ctx context.Context, batches []LogBatch, maxPerStream int64) (map[string]bool, error) {
	var held map[string]bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		held, err = appendLogs(ctx, tx, batches, maxPerStream)
		return err
	})
	if err != nil {
		return nil, err
	}
	return held, nil
}

// logTx is the transaction a log append runs in (pgx.Tx has it).
type logTx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// logColumns are the columns of job_logs a log append fills. The id
// (bigserial) is given in COPY order, which is write order.
var logColumns = []string{"job_id", "stream", "at", "attempt", "data"}

// appendLogs stores batches in tx, with the cheapest write that keeps each
// record's identity: it locks and reads the jobs' active rows
// (log_lock.sql), plans the rows in Go (planLogs: what is new, what fits
// under the cap), copies them into job_logs with COPY, and records on the
// active rows what was stored (log_account.sql). It returns the IDs whose
// lease held.
func appendLogs(ctx context.Context, tx logTx, batches []LogBatch, maxPerStream int64) (map[string]bool, error) {
	states, err := lockLogs(ctx, tx, batches)
	if err != nil {
		return nil, fmt.Errorf("appending logs: %w", err)
	}
	rows, accounts := planLogs(batches, states, maxPerStream, time.Now())
	if len(rows) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"job_logs"}, logColumns, pgx.CopyFromRows(rows)); err != nil {
			return nil, fmt.Errorf("appending logs: copying %d chunks: %w", len(rows), err)
		}
	}
	if err := accountLogs(ctx, tx, accounts); err != nil {
		return nil, fmt.Errorf("appending logs: %w", err)
	}
	held := make(map[string]bool, len(states))
	for id := range states {
		held[id] = true
	}
	return held, nil
}

// lockLogs locks the active rows of batches' jobs whose fence holds and
// reads their log state, by job ID.
func lockLogs(ctx context.Context, tx logTx, batches []LogBatch) (map[string]logState, error) {
	generation, err := batchGeneration(batches)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(batches))
	leases := make([]int64, len(batches))
	for i, b := range batches {
		ids[i], leases[i] = b.JobID, b.Lease
	}
	st := queries.Named("log_lock")
	rows, err := tx.Query(ctx, st.SQL, st.Args(map[string]any{"job_ids": ids, "leases": leases, "generation": generation})...)
	if err != nil {
		return nil, err
	}
	states := make(map[string]logState, len(batches))
	var id string
	var ls logState
	_, err = pgx.ForEachRow(rows, []any{&id, &ls.storedSeq, &ls.bytes[0], &ls.bytes[1], &ls.truncated[0], &ls.truncated[1], &ls.attempt}, func() error {
		states[id] = ls
		return nil
	})
	return states, err
}

// batchGeneration is the holder generation batches are fenced by: "" when
// none sets one. One statement carries one holder's output.
func batchGeneration(batches []LogBatch) (string, error) {
	generation := ""
	for _, b := range batches {
		if b.Generation != "" && generation != "" && b.Generation != generation {
			return "", fmt.Errorf("one statement carries one holder's output (%s and %s)", generation, b.Generation)
		}
		if b.Generation != "" {
			generation = b.Generation
		}
	}
	return generation, nil
}

// accountLogs records what planLogs stored on the jobs' active rows and
// notifies their followers.
func accountLogs(ctx context.Context, tx logTx, accounts []logAccount) error {
	if len(accounts) == 0 {
		return nil
	}
	n := len(accounts)
	ids, topSeqs := make([]string, n), make([]int64, n)
	outKept, errKept := make([]int64, n), make([]int64, n)
	outCut, errCut, notify := make([]bool, n), make([]bool, n), make([]bool, n)
	for i, a := range accounts {
		ids[i], topSeqs[i], notify[i] = a.jobID, a.topSeq, a.rows > 0
		outKept[i], errKept[i] = a.kept[0], a.kept[1]
		outCut[i], errCut[i] = a.cut[0], a.cut[1]
	}
	st := queries.Named("log_account")
	var count int64
	err := tx.QueryRow(ctx, st.SQL, st.Args(map[string]any{
		"job_ids": ids, "out_kept": outKept, "err_kept": errKept, "out_cut": outCut, "err_cut": errCut,
		"top_seqs": topSeqs, "notify": notify,
	})...).Scan(&count)
	if err != nil {
		return fmt.Errorf("recording the output stored: %w", err)
	}
	return nil
}

// nonNilSlice passes an empty array, not NULL, for no records. unnest of NULL
// yields no rows either, but its element type would be unknown.
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// RecordEvent appends an event to a job's timeline. It is not fenced. Use it
// only for what an agent observed (lease_lost), never for a change of state.
func (s *Store) RecordEvent(ctx context.Context, h Holder, jobID string, lease int64, kind, message string) error {
	if _, err := s.pool.Exec(ctx, queries.Get("event_insert"), jobID, kind, h.Name, h.Generation, lease, message); err != nil {
		return fmt.Errorf("recording %s event for %s: %w", kind, jobID, err)
	}
	return nil
}

// checkNoGap returns ErrOutputGap when the database holds fewer of the
// lease's records than out.After, and ErrLeaseLost when the lease no longer
// holds. A zero After checks nothing. The stored number only grows under
// one lease, so a check that passes still holds when the statements after
// it in the transaction run.
func checkNoGap(ctx context.Context, q Querier, out LogBatch) error {
	if out.After <= 0 {
		return nil
	}
	stored, err := storedSeq(ctx, q, out.JobID, out.Lease, out.Generation)
	if err != nil {
		return err
	}
	if stored < out.After {
		return fmt.Errorf("job %s, lease %d: %w (it holds records up to %d, %d had been acknowledged)", out.JobID, out.Lease, ErrOutputGap, stored, out.After)
	}
	return nil
}

// storedSeq reads the highest output record number the database holds for a
// job's lease. ErrLeaseLost means the lease (or generation) no longer holds.
func storedSeq(ctx context.Context, q Querier, jobID string, lease int64, generation string) (int64, error) {
	st := queries.Named("log_stored_seq")
	var n int64
	err := q.QueryRow(ctx, st.SQL, st.Args(map[string]any{"job_id": jobID, "lease": lease, "generation": generation})...).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrLeaseLost
	}
	if err != nil {
		return 0, fmt.Errorf("reading the output stored for job %s: %w", jobID, err)
	}
	return n, nil
}
