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

// AppendLogs writes many jobs' output in one fenced statement, capping each
// stream at maxPerStream bytes per job. It returns the IDs whose lease held.
// The output of the others was dropped. The jobs' followers are notified
// (tether_logs) when it commits. Records with a Seq at or below the highest
// one already stored for their job's lease are skipped. Sending a batch again
// after its acknowledgement was lost stores nothing twice.
func (s *Store) AppendLogs(ctx context.Context, batches []LogBatch, maxPerStream int64) (map[string]bool, error) {
	return appendLogs(ctx, s.pool, batches, maxPerStream)
}

type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func appendLogs(ctx context.Context, q queryer, batches []LogBatch, maxPerStream int64) (map[string]bool, error) {
	ids := make([]string, len(batches))
	leases := make([]int64, len(batches))
	generation := ""
	for _, b := range batches {
		if b.Generation != "" && generation != "" && b.Generation != generation {
			return nil, fmt.Errorf("appending logs: one statement carries one holder's output (%s and %s)", generation, b.Generation)
		}
		if b.Generation != "" {
			generation = b.Generation
		}
	}
	var (
		recJobs    []int64
		recSeqs    []int64
		recStreams []string
		recAts     []time.Time
		recData    [][]byte
	)
	add := func(job int, seq int64, stream string, at time.Time, data []byte) {
		if len(data) == 0 {
			return
		}
		recJobs = append(recJobs, int64(job+1)) // 1-based, as WITH ORDINALITY counts
		recSeqs = append(recSeqs, seq)
		recStreams = append(recStreams, stream)
		recAts = append(recAts, at)
		recData = append(recData, data)
	}
	now := time.Now()
	for i, b := range batches {
		ids[i], leases[i] = b.JobID, b.Lease
		for _, r := range b.Records {
			add(i, r.Seq, r.Stream, r.At, r.Data)
		}
		add(i, 0, "stdout", now, b.Stdout)
		add(i, 0, "stderr", now, b.Stderr)
	}
	st := queries.Named("log_append")
	rows, err := q.Query(ctx, st.SQL, st.Args(map[string]any{
		"job_ids": ids, "leases": leases,
		"rec_jobs": nonNilSlice(recJobs), "rec_seqs": nonNilSlice(recSeqs), "rec_streams": nonNilSlice(recStreams),
		"rec_ats": nonNilSlice(recAts), "rec_data": nonNilSlice(recData),
		"max": maxPerStream, "generation": generation,
	})...)
	if err != nil {
		return nil, fmt.Errorf("appending logs: %w", err)
	}
	held, err := jobIDs(rows, len(batches))
	if err != nil {
		return nil, fmt.Errorf("appending logs: %w", err)
	}
	return held, nil
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
