package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/queries"
)

// Holder identifies the agent process that holds leases.
type Holder struct {
	Name       string
	Generation string
}

// Registration is what an agent announces at start.
type Registration struct {
	Holder
	Version  string
	Capacity int
	Commands []string
	Plugins  json.RawMessage // plugin name -> {"version", "capabilities"}
}

// columns returns the commands and plugins as the agents row stores them:
// empty, never NULL.
func (r Registration) columns() ([]string, json.RawMessage) {
	commands, plugins := r.Commands, r.Plugins
	if commands == nil {
		commands = []string{}
	}
	if len(plugins) == 0 {
		plugins = json.RawMessage(`{}`)
	}
	return commands, plugins
}

// RegisterAgent records this process under its name with its generation and
// returns the generation the name had before ("" if new).
func (s *Store) RegisterAgent(ctx context.Context, r Registration) (string, error) {
	commands, plugins := r.columns()
	var prev string
	err := s.pool.QueryRow(ctx, queries.Get("agent_register"),
		r.Name, r.Generation, r.Version, r.Capacity, commands, plugins).Scan(&prev)
	if err != nil {
		return "", fmt.Errorf("registering agent %s: %w", r.Name, err)
	}
	return prev, nil
}

// RegisterAgain records this process again under its name and generation
// after its agents row was deleted (by an operator, or agent retention while
// the process was silent), in state (running or draining). It never replaces
// a row: false means the name has one again (another process registered
// under it meanwhile, which wins), and the next heartbeat says whose.
func (s *Store) RegisterAgain(ctx context.Context, r Registration, state string) (bool, error) {
	commands, plugins := r.columns()
	st := queries.Named("agent_reregister")
	var name string
	err := s.pool.QueryRow(ctx, st.SQL, st.Args(map[string]any{
		"name": r.Name, "generation": r.Generation, "version": r.Version, "capacity": r.Capacity,
		"commands": commands, "plugins": plugins, "state": state,
	})...).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registering agent %s again: %w", r.Name, err)
	}
	return true, nil
}

// SetAgentState records running, draining or stopped for this process.
func (s *Store) SetAgentState(ctx context.Context, h Holder, state string) error {
	if _, err := s.pool.Exec(ctx, queries.Get("agent_set_state"), h.Name, h.Generation, state); err != nil {
		return fmt.Errorf("setting agent %s state %s: %w", h.Name, state, err)
	}
	return nil
}

// Claimed is a job an agent just took a lease on.
type Claimed struct {
	Job    Job
	Lease  int64
	Handle []byte
	// Resume is true when the job was already running under an earlier lease:
	// the plugin must reattach, not start it again.
	Resume bool
	// ActiveTimeout is the job's stamped active_timeout (0 = off);
	// AttemptAge is how long ago this attempt first called the plugin (0 if
	// it has not), by the database clock: a resumed attempt has that much
	// less time left.
	ActiveTimeout time.Duration
	AttemptAge    time.Duration
	// QueueWait is how long the job had been due when claimed, JobAge how
	// long since it was submitted (database clock; for the metrics).
	QueueWait time.Duration
	JobAge    time.Duration
}

// ClaimParams says what a claim may take.
type ClaimParams struct {
	Limit    int      // at most this many jobs
	Commands []string // of these commands
	// Ready, if set, is asked once the claim has its connection, right
	// before it runs: false claims nothing. Acquiring a connection may wait
	// (after a failover the agent holds new connections back until it has
	// checked what the database lost), so a check made before it may be
	// stale by the time the claim would run.
	Ready func() bool
	// Resumable lists the plugins this agent can Resume with (its copy
	// declares the resume capability). A job that must be resumed (it was
	// released while running) is taken only if its plugin is listed, so an
	// agent never takes over work it could only fail. nil means any plugin
	// (the behaviour of Claim); an empty, non-nil list takes no such job.
	Resumable []string
}

// Claim takes leases on up to limit claimable jobs of the given commands,
// including jobs that must be resumed whatever their plugin: it is ClaimWith
// with Resumable nil.
func (s *Store) Claim(ctx context.Context, h Holder, limit int, commands []string) ([]Claimed, error) {
	return s.ClaimWith(ctx, h, ClaimParams{Limit: limit, Commands: commands})
}

// ClaimWith takes leases on up to p.Limit claimable jobs of p.Commands, the
// oldest due first (see queries/claim.sql). Each command's rows are read
// through its own index range, so the cost does not depend on other
// commands' backlog. Each Claimed carries the job's stamped limits.
func (s *Store) ClaimWith(ctx context.Context, h Holder, p ClaimParams) ([]Claimed, error) {
	if p.Limit <= 0 || len(p.Commands) == 0 {
		return nil, nil
	}
	resumable := p.Resumable
	if resumable == nil {
		resumable = []string{}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	defer conn.Release()
	if p.Ready != nil && !p.Ready() {
		return nil, nil
	}
	st := queries.Named("claim")
	rows, err := queryAfter(ctx, conn, genericPlan, st.SQL, st.Args(map[string]any{
		"agent": h.Name, "generation": h.Generation, "limit": p.Limit, "commands": p.Commands,
		"any_plugin": p.Resumable == nil, "resumable": resumable,
	})...)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		var backoff, backoffMax, pending, active, ttlOK, ttlFailed, age, wait, jobAge float64
		l := &c.Job.Limits
		err := r.Scan(&c.Job.ID, &c.Job.Command, &c.Job.Plugin, &c.Job.Status, &c.Job.Context,
			&c.Job.Attempt, &c.Lease, &c.Handle,
			&l.MaxRetry, &backoff, &backoffMax, &pending, &active, &ttlOK, &ttlFailed, &age, &wait, &jobAge)
		l.RetryBackoff, l.RetryBackoffMax = fromSecs(backoff), fromSecs(backoffMax)
		l.PendingTimeout, l.ActiveTimeout = fromSecs(pending), fromSecs(active)
		l.TTLSucceeded, l.TTLFailed = fromSecs(ttlOK), fromSecs(ttlFailed)
		c.ActiveTimeout, c.AttemptAge = l.ActiveTimeout, fromSecs(age)
		c.QueueWait, c.JobAge = fromSecs(wait), fromSecs(jobAge)
		c.Job.Agent, c.Job.Lease = h.Name, c.Lease
		c.Resume = c.Job.Status == StatusRunning
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	return out, nil
}

// Held is one lease the heartbeat confirmed, with the job's current status.
type Held struct {
	JobID  string
	Lease  int64
	Status jobstate.JobStatus
}

// HeartbeatResult is the answer to one heartbeat.
type HeartbeatResult struct {
	// Registered is false when this process's agents row was not renewed;
	// nothing was then, and Held is empty whatever the leases are.
	Registered bool
	// Missing, when Registered is false, says the name has no agents row at
	// all (an operator or agent retention deleted it): the process registers
	// again (RegisterAgain) and carries on. Otherwise another process
	// registered under the name since: this process must stop.
	Missing bool
	Held    []Held
	// Orphans are leases the database says this generation holds that the
	// call did not list (and that are not detached): a claim whose answer
	// was lost, or one committed while the list was being made.
	Orphans []Lease
	// Position is where the server's history was when it answered
	// (dbhistory.Position): a failover or lost commits show in it.
	Position dbhistory.Position
}

// Lease is one job an agent believes it holds.
type Lease struct {
	JobID string
	Lease int64
}

// Heartbeat renews the agent's row, which renews every lease it holds, and
// reads back which of leases it still holds (with their status) and which
// other leases the database says it holds (Orphans). It writes one row
// however many leases there are.
func (s *Store) Heartbeat(ctx context.Context, h Holder, leases []Lease) (HeartbeatResult, error) {
	ids := make([]string, len(leases))
	nums := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], nums[i] = l.JobID, l.Lease
	}
	st := queries.Named("heartbeat")
	rows, err := QueryHot(ctx, s.pool, st.SQL, st.Args(map[string]any{
		"name": h.Name, "generation": h.Generation, "job_ids": ids, "leases": nums})...)
	if err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	defer rows.Close()
	var res HeartbeatResult
	var named bool // the name has a row, of any generation
	var lsn, timeline string
	for rows.Next() {
		var id, status *string
		var lease *int64
		var orphan *bool
		if err := rows.Scan(&res.Registered, &named, &id, &lease, &status, &orphan, &lsn, &timeline); err != nil {
			return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
		}
		switch {
		case id == nil:
		case *orphan:
			res.Orphans = append(res.Orphans, Lease{JobID: *id, Lease: *lease})
		default:
			res.Held = append(res.Held, Held{JobID: *id, Lease: *lease, Status: jobstate.JobStatus(*status)})
		}
	}
	if err := rows.Err(); err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	res.Missing = !res.Registered && !named
	if res.Position, err = dbhistory.ParsePosition(lsn, timeline); err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	return res, nil
}

// Detach stops the agents row from renewing a lease its holder's process
// does not know it holds (an orphan on consecutive heartbeats): the janitor
// then judges it by its claim time. Fenced by holder and lease; it reports
// whether the row still matched.
func (s *Store) Detach(ctx context.Context, h Holder, l Lease) (bool, error) {
	st := queries.Named("lease_detach")
	tag, err := s.pool.Exec(ctx, st.SQL, st.Args(map[string]any{
		"job_id": l.JobID, "lease": l.Lease, "name": h.Name, "generation": h.Generation})...)
	if err != nil {
		return false, fmt.Errorf("detaching lease %d of job %s: %w", l.Lease, l.JobID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// MarkRunning moves a job from accepted to running under lease and returns the
// job's status afterwards: running, or the status that stopped the change (a
// cancel arrived: canceling). ErrLeaseLost means the lease no longer holds.
func (s *Store) MarkRunning(ctx context.Context, jobID string, lease int64, message string) (jobstate.JobStatus, error) {
	// The batch statement with one row: one statement, one fence, and the
	// status that stopped the change read in the same snapshot.
	statuses, err := s.MarkRunningBatch(ctx, []Running{{JobID: jobID, Lease: lease, Message: message}})
	if err != nil {
		return "", fmt.Errorf("marking job %s running: %w", jobID, err)
	}
	if statuses[0] == "" {
		return "", ErrLeaseLost
	}
	return statuses[0], nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// Checkpoint stores a job's resumable handle, fenced by lease, with no
// output to store alongside (see CheckpointWithOutput).
func (s *Store) Checkpoint(ctx context.Context, jobID string, lease int64, handle []byte) error {
	return s.CheckpointWithOutput(ctx, LogBatch{JobID: jobID, Lease: lease}, 0, handle)
}

// RecordEvent appends an event to a job's timeline. It is not fenced: use it
// only for what an agent observed (lease_lost), never for a change of state.
func (s *Store) RecordEvent(ctx context.Context, h Holder, jobID string, lease int64, kind, message string) error {
	if _, err := s.pool.Exec(ctx, queries.Get("event_insert"), jobID, kind, h.Name, h.Generation, lease, message); err != nil {
		return fmt.Errorf("recording %s event for %s: %w", kind, jobID, err)
	}
	return nil
}

// LogBatch is the output of one job gathered since the last flush.
type LogBatch struct {
	JobID string
	Lease int64
	// Generation, when set, is part of the fence: the holder's process
	// generation. A database that lost its history can hand the same
	// lease number to another process; the agent always sets it. "" (tests,
	// tools) fences by lease alone.
	Generation string
	// Records are the writes in the order they arrived, both streams
	// interleaved. Stdout and Stderr are a shorthand for callers with no
	// order to keep and nothing to send twice (tests, tools): appended after
	// Records, all of stdout then all of stderr, stamped with the time of
	// the append, with no identity (Seq 0).
	Records        []LogRecord
	Stdout, Stderr []byte
}

// LogRecord is one write of a plugin's output as the agent received it.
type LogRecord struct {
	// Seq numbers the record in its runner's write order (1, 2, … per job
	// and lease): a record sent again after a lost acknowledgement is
	// stored once. 0 means no identity: stored every time it is sent.
	Seq    int64
	Stream string    // stdout or stderr
	At     time.Time // the agent's clock at receipt
	Data   []byte
}

// AppendLogs writes many jobs' output in one fenced statement, capping each
// stream at maxPerStream bytes per job. It returns the IDs whose lease held;
// the output of the others was dropped. The jobs' followers are notified
// (tether_logs) when it commits. Records with a Seq at or below the highest
// one already stored for their job's lease are skipped: sending a batch
// again after its acknowledgement was lost stores nothing twice.
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
	held := make(map[string]bool, len(batches))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("appending logs: %w", err)
		}
		held[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("appending logs: %w", err)
	}
	return held, nil
}

// nonNilSlice passes an empty array, not NULL, for no records: unnest of
// NULL yields no rows either, but its element type would be unknown.
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Release gives up a job this holder leases without finishing it: the job
// stays running, becomes claimable at once, and the next holder resumes it.
// ErrLeaseLost means someone else already holds it.
func (s *Store) Release(ctx context.Context, h Holder, jobID string, lease int64, reason string) error {
	released, err := s.ReleaseMany(ctx, h, []Lease{{JobID: jobID, Lease: lease}}, reason)
	if err != nil {
		return err
	}
	if !released[jobID] {
		return ErrLeaseLost
	}
	return nil
}

// ReleaseMany releases many leases in one fenced statement and returns the IDs
// it released; the others had already been taken over.
func (s *Store) ReleaseMany(ctx context.Context, h Holder, leases []Lease, reason string) (map[string]bool, error) {
	ids := make([]string, len(leases))
	nums := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], nums[i] = l.JobID, l.Lease
	}
	rows, err := s.pool.Query(ctx, queries.Get("job_release"), ids, nums, h.Name, h.Generation, reason)
	if err != nil {
		return nil, fmt.Errorf("releasing %d jobs: %w", len(leases), err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("releasing %d jobs: %w", len(leases), err)
	}
	out := make(map[string]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// CheckpointWithOutput stores a job's output written since its last
// checkpoint and its new handle in one transaction, fenced by lease: a
// handle that points past output (a log position) is never stored without
// that output, and the output never without the handle, so a resuming agent
// neither skips nor copies a line. ErrLeaseLost means nothing was stored.
func (s *Store) CheckpointWithOutput(ctx context.Context, out LogBatch, maxPerStream int64, handle []byte) error {
	return s.CheckpointDescribed(ctx, out, maxPerStream, handle, nil)
}

// CheckpointDescribed is CheckpointWithOutput that also records, under the
// same fence, what the plugin said the handle points at (a remote event,
// when it changed; see recordRemote). described nil records nothing.
func (s *Store) CheckpointDescribed(ctx context.Context, out LogBatch, maxPerStream int64, handle []byte, described *Described) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(out.Records) > 0 || len(out.Stdout) > 0 || len(out.Stderr) > 0 {
			held, err := appendLogs(ctx, tx, []LogBatch{out}, maxPerStream)
			if err != nil {
				return err
			}
			if !held[out.JobID] {
				return ErrLeaseLost
			}
		}
		st := queries.Named("job_checkpoint")
		tag, err := tx.Exec(ctx, st.SQL, st.Args(map[string]any{
			"job_id": out.JobID, "lease": out.Lease, "handle": handle, "generation": out.Generation})...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrLeaseLost
		}
		return recordRemote(ctx, tx, out.JobID, out.Lease, described)
	})
	if errors.Is(err, ErrLeaseLost) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("checkpointing job %s: %w", out.JobID, err)
	}
	return nil
}
