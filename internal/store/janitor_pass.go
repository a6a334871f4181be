package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/queries"
)

// JanitorTx is one janitor transaction. It locks a batch of suspicious active
// rows and writes what the janitor decided for them.
type JanitorTx struct{ tx pgx.Tx }

// InJanitorTx runs fn in a transaction opened by queries/tx_begin.sql, with
// no JIT and idle as the bound on idling between its statements. It commits
// when fn returns nil and rolls back otherwise.
func (s *Store) InJanitorTx(ctx context.Context, idle time.Duration, fn func(JanitorTx) error) error {
	return s.inTxIdle(ctx, idle, func(tx pgx.Tx) error { return fn(JanitorTx{tx: tx}) })
}

// JobOwner is the agents row of an active job's holder, as the database
// saw it.
type JobOwner struct {
	Exists     bool // false: no agents row under that name
	Generation string
	State      string // running, draining, stopped
	// LastSeenAge is now() - last_seen (database clock). The silence rules
	// look at the job's own lease, which the owner's heartbeat renews
	// together with last_seen. A dead owner's reasons quote this silence.
	LastSeenAge time.Duration
	// Dead says the liveness check found this generation's name lock free and
	// its agents row silent for dead_after since (CandidateQuery.Dead). Its
	// accepted jobs are requeued and its resumable running jobs released at
	// once.
	Dead bool
	// Timings are what the owner announced (zero: not announced). The
	// janitor judges its jobs by the larger of its own and these
	// (internal/fleet).
	Timings Timings
}

// JanitorCandidate is one locked active row with what the janitor decides
// on. Ages come from the database clock.
type JanitorCandidate struct {
	JobID   string
	Status  jobstate.JobStatus
	Plugin  string
	Command string
	Started bool // jobs.started_at is set
	Lease   int64

	AgentName       string // "" = unowned
	AgentGeneration string
	HeartbeatAge    time.Duration
	Released        bool
	ReleasedAge     time.Duration
	Owner           JobOwner

	// What the live agents serve (queries/janitor_candidates.sql).
	Served       bool
	PluginLoaded bool
	Resumable    bool

	PendingTimeout time.Duration
	QueuedAge      time.Duration
	ActiveTimeout  time.Duration
	AttemptAge     time.Duration

	// SelfRegistered says the acting process has its agents row, which the
	// query counted among the live agents (or not, when it is draining).
	SelfRegistered bool
}

// DeadGeneration is one agent generation the liveness check found dead.
type DeadGeneration struct {
	Name       string
	Generation string
	FreeSince  time.Time
}

// CandidateQuery bounds one batch of queries/janitor_candidates.sql.
type CandidateQuery struct {
	OfflineAfter, AWOLTimeout, StaleJob, ActiveGrace time.Duration
	Batch                                            int
	Skip                                             []string // job IDs already looked at in this pass
	Self                                             Holder
	SelfCommands                                     []string
	// Dead, when set, restricts the batch to these agents' jobs.
	Dead []DeadGeneration
}

// Candidates locks and returns the next batch of active rows that may need
// the janitor, skipping rows other transactions hold.
func (t JanitorTx) Candidates(ctx context.Context, q CandidateQuery) ([]JanitorCandidate, error) {
	// Empty, never nil. A NULL array would turn the regular parts off.
	deadNames, deadGens, deadSince := []string{}, []string{}, []time.Time{}
	for _, d := range q.Dead {
		deadNames = append(deadNames, d.Name)
		deadGens = append(deadGens, d.Generation)
		deadSince = append(deadSince, d.FreeSince)
	}
	rows, err := t.tx.Query(ctx, queries.Get("janitor_candidates"), pgx.NamedArgs{
		"offline_after": secs(q.OfflineAfter), "awol_timeout": secs(q.AWOLTimeout),
		"stale_job": secs(q.StaleJob), "active_grace": secs(q.ActiveGrace),
		"batch": q.Batch, "skip": q.Skip,
		"self_name": q.Self.Name, "self_generation": q.Self.Generation, "self_commands": q.SelfCommands,
		"dead_names": deadNames, "dead_generations": deadGens, "dead_since": deadSince,
	})
	if err != nil {
		return nil, fmt.Errorf("selecting janitor candidates: %w", err)
	}
	cands, err := scanCandidates(rows)
	if err != nil {
		return nil, fmt.Errorf("selecting janitor candidates: %w", err)
	}
	return cands, nil
}

// PreviousQuery pages through the jobs earlier generations of Self.Name
// hold (queries/janitor_previous.sql).
type PreviousQuery struct {
	Self     Holder
	After    string // the last job ID of the previous page
	Batch    int
	StaleJob time.Duration
}

// PreviousCandidates locks and returns the next page of jobs earlier
// generations of q.Self.Name still hold.
func (t JanitorTx) PreviousCandidates(ctx context.Context, q PreviousQuery) ([]JanitorCandidate, error) {
	rows, err := t.tx.Query(ctx, queries.Get("janitor_previous"), pgx.NamedArgs{
		"self_name": q.Self.Name, "self_generation": q.Self.Generation,
		"after": q.After, "batch": q.Batch, "stale_job": secs(q.StaleJob),
	})
	if err != nil {
		return nil, fmt.Errorf("selecting jobs of earlier generations: %w", err)
	}
	cands, err := scanCandidates(rows)
	if err != nil {
		return nil, fmt.Errorf("selecting jobs of earlier generations: %w", err)
	}
	return cands, nil
}

func scanCandidates(rows pgx.Rows) ([]JanitorCandidate, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JanitorCandidate, error) {
		var c JanitorCandidate
		var hbAge, relAge, seenAge, pending, queuedAge, active, attemptAge float64
		var keepalive, deadAfter, staleJob float64
		err := r.Scan(&c.JobID, &c.Status, &c.Plugin, &c.Command, &c.Started,
			&c.AgentName, &c.AgentGeneration, &c.Lease,
			&hbAge, &c.Released, &relAge,
			&c.Owner.Exists, &c.Owner.Generation, &c.Owner.State, &seenAge,
			&c.Served, &c.PluginLoaded, &c.Resumable,
			&pending, &queuedAge, &active, &attemptAge,
			&c.SelfRegistered, &c.Owner.Dead, &keepalive, &deadAfter, &staleJob)
		c.Owner.Timings = Timings{Keepalive: secondsDuration(keepalive), DeadAfter: secondsDuration(deadAfter),
			StaleJob: secondsDuration(staleJob)}
		c.PendingTimeout, c.QueuedAge = secondsDuration(pending), secondsDuration(queuedAge)
		c.ActiveTimeout, c.AttemptAge = secondsDuration(active), secondsDuration(attemptAge)
		c.HeartbeatAge = secondsDuration(hbAge)
		c.ReleasedAge = secondsDuration(relAge)
		c.Owner.LastSeenAge = secondsDuration(seenAge)
		return c, err
	})
}

// secondsDuration is s seconds, truncated to the nanosecond as the janitor
// always read its ages (fromSecs rounds).
func secondsDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// JanitorFence is the fence of a janitor's write. It holds the lease and
// status it read under lock.
type JanitorFence struct {
	JobID  string
	Lease  int64
	Status jobstate.JobStatus
}

// Requeue puts a job nobody started back in the queue
// (queries/janitor_requeue.sql), with message as its event. It reports
// whether the fence held.
func (t JanitorTx) Requeue(ctx context.Context, f JanitorFence, actor Holder, message string) (bool, error) {
	var n int
	err := t.tx.QueryRow(ctx, queries.Get("janitor_requeue"), f.JobID, f.Lease, f.Status,
		actor.Name, actor.Generation, message).Scan(&n)
	return n > 0, err
}

// Release makes a running job claimable again for another agent to resume
// (queries/janitor_release.sql). It reports whether the fence held.
func (t JanitorTx) Release(ctx context.Context, f JanitorFence, actor Holder, reason, message string) (bool, error) {
	var n int
	err := t.tx.QueryRow(ctx, queries.Get("janitor_release"), f.JobID, f.Lease, f.Status,
		actor.Name, actor.Generation, reason, message).Scan(&n)
	return n > 0, err
}

// Levers returns a job's attempt and stamped levers, read under the row
// lock the candidate query took.
func (t JanitorTx) Levers(ctx context.Context, jobID string) (int, limits.Set, error) {
	return Levers(ctx, t.tx, jobID)
}

// EndAttempt stores e in the transaction. ErrLeaseLost means nothing was
// written.
func (t JanitorTx) EndAttempt(ctx context.Context, e End) (Ended, error) {
	return EndAttempt(ctx, t.tx, e)
}
