package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/queries"
)

// SubmitParams is a validated submit request.
type SubmitParams struct {
	Command        string
	Plugin         string
	Context        json.RawMessage // a JSON object; nil means {}
	Submitter      string
	IdempotencyKey string // optional
	// Limits are stamped on the job as given. The zero value means no
	// retries, no timeouts and kept forever. Callers resolve them first
	// (limits.Resolve).
	Limits limits.Set
	// Override is the request's own "limits" object, as sent. It is part of
	// the idempotency check. The resolved Limits are not, because a command
	// edit between a request and its retry must not make the retry a
	// conflict.
	Override limits.Override
}

// requestHash identifies the body of a submit for idempotency checks. The
// context is hashed in a canonical form that keeps it exact: object keys
// sorted, no whitespace, and every number as its own text (json.Number), so
// 1.00000000000000001 and 1 differ, and so do 1.0 and 1 (jsonb keeps that
// difference too).
func (p SubmitParams) requestHash() (string, error) {
	var ctx any = map[string]any{}
	if len(p.Context) > 0 {
		dec := json.NewDecoder(bytes.NewReader(p.Context))
		dec.UseNumber()
		if err := dec.Decode(&ctx); err != nil {
			return "", fmt.Errorf("decoding context: %w", err)
		}
	}
	// Re-encoding sorts object keys, so key order in the request does not matter.
	req := map[string]any{"command": p.Command, "context": ctx, "submitter": p.Submitter}
	if p.Override != (limits.Override{}) {
		req["limits"] = p.Override
	}
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encoding request: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Submit inserts a queued job. With an idempotency key the same submitter
// already used for an identical request it returns that job and
// created=false. With a different request it returns ErrIdempotencyConflict.
// Keys are per submitter. Another submitter's key is never seen.
func (s *Store) Submit(ctx context.Context, p SubmitParams) (Job, bool, error) {
	hash, err := p.requestHash()
	if err != nil {
		return Job{}, false, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Job{}, false, fmt.Errorf("generating job id: %w", err)
	}
	jobCtx := p.Context
	if len(jobCtx) == 0 {
		jobCtx = json.RawMessage(`{}`)
	}
	var key *string
	if p.IdempotencyKey != "" {
		key = &p.IdempotencyKey
	}
	var got string
	l := p.Limits
	err = s.pool.QueryRow(ctx, queries.Get("job_submit"),
		id.String(), p.Command, p.Plugin, jobCtx, p.Submitter, key, hash,
		l.MaxRetry, secs(l.RetryBackoff), secs(l.RetryBackoffMax), secs(l.PendingTimeout),
		secs(l.ActiveTimeout), secs(l.TTLSucceeded), secs(l.TTLFailed)).Scan(&got)
	switch {
	case err == nil:
		j, err := s.GetJob(ctx, got)
		return j, true, err
	case !errors.Is(err, pgx.ErrNoRows):
		return Job{}, false, fmt.Errorf("inserting job: %w", err)
	}
	// The key was taken. This is a replay or a conflict.
	var existingHash string
	if err := s.pool.QueryRow(ctx, queries.Get("job_get_by_key"), p.Submitter, p.IdempotencyKey).Scan(&got, &existingHash); err != nil {
		return Job{}, false, fmt.Errorf("looking up idempotency key: %w", err)
	}
	if existingHash != hash {
		return Job{}, false, ErrIdempotencyConflict
	}
	j, err := s.GetJob(ctx, got)
	return j, false, err
}

// scanJob reads one row of queries/fragments/job_columns.sql, the columns
// job_get, job_list and job_list_live select.
func scanJob(row pgx.Row) (Job, error) {
	var j Job
	var backoff, backoffMax, pending, active, ttlOK, ttlFailed float64
	err := row.Scan(&j.ID, &j.Command, &j.Plugin, &j.Status, &j.Context, &j.Attempt,
		&j.Error, &j.ErrorClass, &j.Result, &j.Submitter, &j.IdempotencyKey,
		&j.CreatedAt, &j.UpdatedAt, &j.StartedAt, &j.FinishedAt, &j.Agent, &j.Lease,
		&j.Limits.MaxRetry, &backoff, &backoffMax, &pending, &active, &ttlOK, &ttlFailed,
		&j.AttemptStartedAt, &j.ExpiresAt, &j.RunAfter, &j.WaitingForCleanup)
	j.Limits.RetryBackoff, j.Limits.RetryBackoffMax = fromSecs(backoff), fromSecs(backoffMax)
	j.Limits.PendingTimeout, j.Limits.ActiveTimeout = fromSecs(pending), fromSecs(active)
	j.Limits.TTLSucceeded, j.Limits.TTLFailed = fromSecs(ttlOK), fromSecs(ttlFailed)
	return j, err
}

// secs and fromSecs carry durations to and from SQL as float seconds
// ($n::float8 * interval '1 second', extract(epoch FROM ...)).
func secs(d time.Duration) float64 { return d.Seconds() }

func fromSecs(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// GetJob returns one job, or ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, queries.Get("job_get"), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("reading job %s: %w", id, err)
	}
	return j, nil
}

// ListParams filters and pages ListJobs. Empty strings match everything.
type ListParams struct {
	Status             jobstate.JobStatus
	Command, Submitter string
	IdempotencyKey     string // exact; '' = any
	// Agent lists only the jobs this agent holds now ('' = any holder or none).
	Agent string
	// Since and Until bound created_at, as since ≤ created_at < until. Zero
	// means unbounded.
	Since, Until time.Time
	After        string // cursor: the last ID of the previous page
	Limit        int
}

// IDClockSkew is how far an agent's clock (which makes the UUIDv7 job IDs)
// may be from the database's (which stamps created_at) for a time-bounded
// list to still find every job. The ID bounds are widened by it.
const IDClockSkew = time.Hour

// uuidV7Floor is the smallest UUIDv7 text made at t (its 48-bit millisecond
// prefix followed by zeros), for comparing with job IDs as text.
func uuidV7Floor(t time.Time) string {
	ms := t.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	if ms >= 1<<48 {
		ms = 1<<48 - 1
	}
	h := fmt.Sprintf("%012x", ms)
	return h[:8] + "-" + h[8:] + "-0000-0000-000000000000"
}

// listStatement is the list query for a status and agent filter. The live
// statuses, which no index of jobs names (so that a job's claim and running
// write are HOT updates), and an agent's held jobs are listed through
// active_jobs. Every other filter is listed through jobs' own indexes.
func listStatement(status jobstate.JobStatus, agent string) string {
	switch {
	case agent != "", status == StatusQueued, status == StatusAccepted, status == StatusRunning:
		return "job_list_live"
	default:
		return "job_list"
	}
}

// filterArgs are the named values of p's filters, as the list and count
// statements read them.
func filterArgs(p ListParams) map[string]any {
	args := map[string]any{
		"status": p.Status, "command": p.Command, "submitter": p.Submitter,
		"idempotency_key": p.IdempotencyKey, "after": p.After, "agent": p.Agent,
	}
	if !p.Since.IsZero() {
		args["since"], args["since_id"] = p.Since, uuidV7Floor(p.Since.Add(-IDClockSkew))
	}
	if !p.Until.IsZero() {
		args["until"], args["until_id"] = p.Until, uuidV7Floor(p.Until.Add(IDClockSkew))
	}
	return args
}

// ListJobs returns jobs newest first and the cursor of the next page ("" at the end).
func (s *Store) ListJobs(ctx context.Context, p ListParams) ([]Job, string, error) {
	if p.Limit <= 0 {
		p.Limit = 50
	}
	args := filterArgs(p)
	args["limit"] = p.Limit + 1
	st := queries.Named(listStatement(p.Status, p.Agent))
	rows, err := s.pool.Query(ctx, st.SQL, st.Args(args)...)
	if err != nil {
		return nil, "", fmt.Errorf("listing jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
	if err != nil {
		return nil, "", fmt.Errorf("listing jobs: %w", err)
	}
	next := ""
	if len(jobs) > p.Limit {
		jobs = jobs[:p.Limit]
		next = jobs[len(jobs)-1].ID
	}
	return jobs, next, nil
}

// Cancel cancels a queued job at once and asks the owner of a claimed one to
// stop it (status canceling). Canceling twice is harmless. A finished job
// gives a *TransitionError.
func (s *Store) Cancel(ctx context.Context, id, reason string) (Job, error) {
	reason = cmp.Or(reason, "canceled by request")
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, queries.Get("job_cancel_lock_active"), id); err != nil {
			return fmt.Errorf("locking active job: %w", err)
		}
		var status jobstate.JobStatus
		var owned bool
		err := tx.QueryRow(ctx, queries.Get("job_cancel_lock"), id).Scan(&status, &owned)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("locking job: %w", err)
		}
		switch {
		case Terminal(status):
			return &TransitionError{Op: "cancel", Status: status}
		case status == StatusCanceling:
			return nil
		case !owned && status == StatusQueued:
			_, err = tx.Exec(ctx, queries.Get("job_cancel_queued"), id, reason)
		default:
			_, err = tx.Exec(ctx, queries.Get("job_cancel_request"), id, reason)
		}
		if err != nil {
			return fmt.Errorf("canceling job: %w", err)
		}
		return nil
	})
	if err != nil {
		return Job{}, err
	}
	return s.GetJob(ctx, id)
}

// Events returns up to limit events of a job after event id after.
func (s *Store) Events(ctx context.Context, jobID string, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.pool.Query(ctx, queries.Get("job_events"), jobID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading events of %s: %w", jobID, err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.JobID, &e.At, &e.Kind, &e.Agent, &e.Generation, &e.Lease, &e.Message)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading events of %s: %w", jobID, err)
	}
	return evs, nil
}

// Logs returns up to limit chunks of a job's output after seq, in write
// order. stream "" means both.
func (s *Store) Logs(ctx context.Context, jobID, stream string, after int64, limit int) ([]LogChunk, error) {
	return s.LogPage(ctx, LogQuery{JobID: jobID, Stream: stream, After: after, Limit: limit})
}

// LogQuery selects chunks of one job's output.
type LogQuery struct {
	JobID  string
	Stream string    // "stdout", "stderr" or "" for both
	After  int64     // only chunks with a larger seq
	Since  time.Time // only chunks received at or after it; zero: any
	Limit  int       // chunks at most; 0 means 1000
}

func (q LogQuery) args() map[string]any {
	var since *time.Time
	if !q.Since.IsZero() {
		since = &q.Since
	}
	return map[string]any{"job": q.JobID, "stream": q.Stream, "after": q.After, "since": since, "lim": cmp.Or(max(q.Limit, 0), 1000)}
}

// LogPage returns the first chunks q selects, in write order.
func (s *Store) LogPage(ctx context.Context, q LogQuery) ([]LogChunk, error) {
	return s.logChunks(ctx, "job_logs", q)
}

// LogTail returns the last chunks q selects, in write order.
func (s *Store) LogTail(ctx context.Context, q LogQuery) ([]LogChunk, error) {
	return s.logChunks(ctx, "job_logs_tail", q)
}

func (s *Store) logChunks(ctx context.Context, query string, q LogQuery) ([]LogChunk, error) {
	st := queries.Named(query)
	rows, err := s.pool.Query(ctx, st.SQL, st.Args(q.args())...)
	if err != nil {
		return nil, fmt.Errorf("reading logs of %s: %w", q.JobID, err)
	}
	chunks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LogChunk, error) {
		var c LogChunk
		err := r.Scan(&c.Seq, &c.Stream, &c.At, &c.Attempt, &c.Data)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading logs of %s: %w", q.JobID, err)
	}
	return chunks, nil
}

// JobStatus returns a job's status, or ErrNotFound.
// AddFollower records that a stream follows job id, so the job's end sends
// its NOTIFY (see migration 0008). Call RemoveFollower with the returned id
// when the stream ends.
func (s *Store) AddFollower(ctx context.Context, id string) (int64, error) {
	var fid int64
	err := s.pool.QueryRow(ctx, queries.Get("follower_add"), pgx.NamedArgs{"job": id}).Scan(&fid)
	if err != nil {
		return 0, fmt.Errorf("recording a follower of %s: %w", id, err)
	}
	return fid, nil
}

// RemoveFollower forgets the follower AddFollower returned.
func (s *Store) RemoveFollower(ctx context.Context, fid int64) error {
	if _, err := s.pool.Exec(ctx, queries.Get("follower_remove"), pgx.NamedArgs{"id": fid}); err != nil {
		return fmt.Errorf("removing follower %d: %w", fid, err)
	}
	return nil
}

func (s *Store) JobStatus(ctx context.Context, id string) (jobstate.JobStatus, error) {
	var status jobstate.JobStatus
	err := s.pool.QueryRow(ctx, queries.Get("job_exists"), id).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("reading status of %s: %w", id, err)
	}
	return status, nil
}

// AgentListParams say which agents ListAgents returns.
type AgentListParams struct {
	// All lists every row, stopped and long-silent agents too. Otherwise it
	// lists only the live ones.
	All bool
	// LiveWithin is how recently a running or draining agent must have been
	// seen to be listed without All (the answering agent's stale_job; the
	// agent's own when longer).
	LiveWithin time.Duration
	// Name, when set, lists only that agent.
	Name string
}

// ListAgents returns the agents not stopped and seen within
// p.LiveWithin (or all of them), sorted by name, each with what
// internal/fleet.Classify judges it by (Seen). The caller fills Liveness,
// Reason and Live.
func (s *Store) ListAgents(ctx context.Context, p AgentListParams) ([]Agent, error) {
	st := queries.Named("agent_list")
	rows, err := s.pool.Query(ctx, st.SQL, st.Args(map[string]any{"all": p.All, "live_s": p.LiveWithin.Seconds(), "name": p.Name})...)
	if err != nil {
		return nil, fmt.Errorf("listing agents: %w", err)
	}
	agents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Agent, error) {
		var a Agent
		t := seenScan{a: &a.Seen}
		var d drainScan
		err := r.Scan(slices.Concat([]any{&a.Name, &a.Generation, &a.StartedAt, &a.LastSeen, &a.SilentFor,
			&a.State, &a.Version, &a.Capacity, &a.Commands, &a.Plugins, &a.ActiveJobs, &a.UnhealthyPlugins}, d.targets(), t.targets())...)
		t.done()
		a.DrainRequest = d.request()
		a.Seen.Name, a.Seen.State, a.Seen.Commands, a.Seen.LastSeen = a.Name, a.State, a.Commands, a.LastSeen
		a.Seen.SilentFor = secondsDuration(a.SilentFor)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing agents: %w", err)
	}
	return agents, nil
}

// Now returns the database's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, queries.Get("db_now")).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("reading the database clock: %w", err)
	}
	return now, nil
}
