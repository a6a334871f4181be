package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/queries"
)

// Running is one job to move from accepted to running (MarkRunningBatch).
type Running struct {
	JobID string
	Lease int64
	// Generation, when set, also fences the write by the holder's process
	// generation (see LogBatch.Generation).
	Generation string
	Message    string
}

// MarkRunningBatch is MarkRunning for many jobs in one statement, each fenced
// by its own lease (which names its holder, so the running event takes the
// holder its claim recorded). It returns each job's status afterwards, in the
// order given. That is running, "" when the lease no longer holds
// (ErrLeaseLost for MarkRunning), or the status that stopped the change.
func (s *Store) MarkRunningBatch(ctx context.Context, rs []Running) ([]jobstate.JobStatus, error) {
	ids, leases, msgs := make([]string, len(rs)), make([]int64, len(rs)), make([]string, len(rs))
	gens := make([]string, len(rs))
	for i, r := range rs {
		ids[i], leases[i], gens[i], msgs[i] = r.JobID, r.Lease, r.Generation, r.Message
	}
	st := queries.Named("job_mark_running_batch")
	rows, err := s.queryGeneric(ctx, st.SQL, st.Args(map[string]any{
		"jobs": ids, "leases": leases, "generations": gens, "messages": msgs})...)
	if err != nil {
		return nil, fmt.Errorf("marking %d jobs running: %w", len(rs), err)
	}
	got, err := byJobID[jobstate.JobStatus](rows, len(rs))
	if err != nil {
		return nil, fmt.Errorf("marking %d jobs running: %w", len(rs), dataError(err))
	}
	out := make([]jobstate.JobStatus, len(rs))
	for i, r := range rs {
		out[i] = got[r.JobID]
	}
	return out, nil
}

// FinalBatchable reports whether e can be stored by EndFinalBatch. It can
// when e is a final plan, with no retry and no Cleanup (the hot path).
func FinalBatchable(e End) bool {
	return !e.Plan.Retry && !e.Plan.Cleanup && e.LogAfter <= 0 && len(e.Output.Records) == 0
}

// EndFinalBatch stores many final ends of one actor's (each FinalBatchable,
// all with Actor h) in one statement, each fenced by its own lease (and
// expected status, when it has one) exactly as EndAttempt. stored[i] is false
// when e[i]'s fence no longer held (ErrLeaseLost for EndAttempt). An error
// means nothing was stored. A *DataError then says the database refused one
// of the outcomes.
func (s *Store) EndFinalBatch(ctx context.Context, h Holder, es []End) (stored []bool, err error) {
	st, args, err := finalEnds(h, es)
	if err != nil {
		return nil, err
	}
	n := len(es)
	rows, err := s.queryGeneric(ctx, st.SQL, st.Args(args)...)
	if err != nil {
		return nil, fmt.Errorf("ending %d attempts: %w", n, dataError(err))
	}
	ended, err := jobIDs(rows, n)
	if err != nil {
		return nil, fmt.Errorf("ending %d attempts: %w", n, dataError(err))
	}
	stored = make([]bool, n)
	for i, e := range es {
		stored[i] = ended[e.JobID]
	}
	return stored, nil
}

// finalEnds is attempt_end_final_batch.sql and its arguments for es, all
// FinalBatchable ends by actor h.
func finalEnds(h Holder, es []End) (queries.Statement, map[string]any, error) {
	n := len(es)
	ids, leases, evLeases, holders := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n)
	expects, statuses, kinds, msgs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	results, errs, classes := make([]*string, n), make([]*string, n), make([]*string, n)
	for i, e := range es {
		if !FinalBatchable(e) || e.Actor != h {
			return queries.Statement{}, nil, fmt.Errorf("ending job %s in a batch of %s: not a holder's final end", e.JobID, h.Name)
		}
		kind, msg, evLease := e.event()
		ids[i], leases[i], evLeases[i], expects[i], holders[i] = e.JobID, e.Lease, evLease, string(e.ExpectStatus), e.HolderGeneration
		statuses[i], kinds[i], msgs[i] = string(e.Outcome.Status), kind, msg
		results[i], errs[i], classes[i] = textOrNil(string(e.Outcome.Result)), textOrNil(e.Outcome.Error), textOrNil(string(e.Outcome.ErrorClass))
	}
	return queries.Named("attempt_end_final_batch"), map[string]any{
		"jobs": ids, "leases": leases, "holders": holders, "expects": expects, "statuses": statuses, "results": results, "errors": errs,
		"error_classes": classes, "event_kinds": kinds, "event_leases": evLeases, "messages": msgs,
		"agent": h.Name, "generation": h.Generation}, nil
}

func textOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// jobIDs reads a result of one job ID per row into a set. It closes rows.
func jobIDs(rows pgx.Rows, capacity int) (map[string]bool, error) {
	set := make(map[string]bool, capacity)
	var id string
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		set[id] = true
		return nil
	})
	return set, err
}

// byJobID reads a result of (job ID, value) rows into a map. It closes rows.
func byJobID[V any](rows pgx.Rows, capacity int) (map[string]V, error) {
	m := make(map[string]V, capacity)
	var id string
	var v V
	_, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		m[id] = v
		return nil
	})
	return m, err
}
