package store

import (
	"context"
	"fmt"

	"github.com/tetherjobs/tether/queries"
)

// Running is one job to move from accepted to running (MarkRunningBatch).
type Running struct {
	JobID   string
	Lease   int64
	Message string
}

// MarkRunningBatch is MarkRunning for many jobs of one holder in one
// statement, each fenced by its own lease. It returns each job's status
// afterwards, in the order given: running, "" when the lease no longer holds
// (ErrLeaseLost for MarkRunning), or the status that stopped the change.
func (s *Store) MarkRunningBatch(ctx context.Context, h Holder, rs []Running) ([]string, error) {
	ids, leases, msgs := make([]string, len(rs)), make([]int64, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ids[i], leases[i], msgs[i] = r.JobID, r.Lease, r.Message
	}
	st := queries.Named("job_mark_running_batch")
	rows, err := s.queryGeneric(ctx, st.SQL, st.Args(map[string]any{
		"jobs": ids, "leases": leases, "messages": msgs, "agent": h.Name, "generation": h.Generation})...)
	if err != nil {
		return nil, fmt.Errorf("marking %d jobs running: %w", len(rs), err)
	}
	defer rows.Close()
	got := make(map[string]string, len(rs))
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, fmt.Errorf("marking %d jobs running: %w", len(rs), err)
		}
		got[id] = status
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("marking %d jobs running: %w", len(rs), dataError(err))
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = got[r.JobID]
	}
	return out, nil
}

// FinalBatchable reports whether e can be stored by EndFinalBatch: the
// plan of the hot path (final, no retry, no Cleanup) by a holder (no
// expected status).
func FinalBatchable(e End) bool {
	return !e.Plan.Retry && !e.Plan.Cleanup && e.ExpectStatus == ""
}

// EndFinalBatch stores many final ends of one holder's jobs (each
// FinalBatchable, all with Actor h) in one statement, each fenced by its own
// lease exactly as EndAttempt. stored[i] is false when e[i]'s lease no
// longer held (ErrLeaseLost for EndAttempt). An error means nothing was
// stored; a *DataError then says the database refused one of the outcomes.
func (s *Store) EndFinalBatch(ctx context.Context, h Holder, es []End) (stored []bool, err error) {
	n := len(es)
	ids, leases, evLeases := make([]string, n), make([]int64, n), make([]int64, n)
	statuses, kinds, msgs := make([]string, n), make([]string, n), make([]string, n)
	results, errs, classes := make([]*string, n), make([]*string, n), make([]*string, n)
	for i, e := range es {
		if !FinalBatchable(e) || e.Actor != h {
			return nil, fmt.Errorf("ending job %s in a batch: not a holder's final end", e.JobID)
		}
		kind, msg, evLease := e.event()
		ids[i], leases[i], evLeases[i] = e.JobID, e.Lease, evLease
		statuses[i], kinds[i], msgs[i] = e.Outcome.Status, kind, msg
		results[i], errs[i], classes[i] = textOrNil(string(e.Outcome.Result)), textOrNil(e.Outcome.Error), textOrNil(e.Outcome.ErrorClass)
	}
	st := queries.Named("attempt_end_final_batch")
	rows, err := s.queryGeneric(ctx, st.SQL, st.Args(map[string]any{
		"jobs": ids, "leases": leases, "statuses": statuses, "results": results, "errors": errs,
		"error_classes": classes, "event_kinds": kinds, "event_leases": evLeases, "messages": msgs,
		"agent": h.Name, "generation": h.Generation})...)
	if err != nil {
		return nil, fmt.Errorf("ending %d attempts: %w", n, dataError(err))
	}
	defer rows.Close()
	ended := make(map[string]bool, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("ending %d attempts: %w", n, err)
		}
		ended[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ending %d attempts: %w", n, dataError(err))
	}
	stored = make([]bool, n)
	for i, e := range es {
		stored[i] = ended[e.JobID]
	}
	return stored, nil
}

func textOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
