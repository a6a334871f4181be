package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/queries"
)

// Claimed is a job an agent just took a lease on.
type Claimed struct {
	Job    Job
	Lease  int64
	Handle []byte
	// Resume is true when the job was already running under an earlier lease:
	// the plugin must reattach, not start it again.
	Resume bool
	// ActiveTimeout is the job's stamped active_timeout (0 = off). AttemptAge
	// is how long ago this attempt first called the plugin (0 if it has not),
	// by the database clock. A resumed attempt has that much less time left.
	ActiveTimeout time.Duration
	AttemptAge    time.Duration
	// QueueWait is how long the job had been due when claimed, JobAge how
	// long since it was submitted. Both use the database clock and serve the
	// metrics.
	QueueWait time.Duration
	JobAge    time.Duration
}

// ClaimParams says what a claim may take.
type ClaimParams struct {
	Limit    int      // at most this many jobs
	Commands []string // of these commands
	// Ready, if set, is asked once the claim has its connection, right before
	// it runs. false claims nothing. Acquiring a connection may wait (after a
	// failover the agent holds new connections back until it has checked what
	// the database lost), so a check made before it may be stale by the time
	// the claim would run.
	Ready func() bool
	// Resumable lists the plugins this agent can Resume with (its copy
	// declares the resume capability). A job that must be resumed (it was
	// released while running) is taken only if its plugin is listed, so an
	// agent never takes over work it could only fail. nil means any plugin
	// (the behaviour of Claim). An empty, non-nil list takes no such job.
	Resumable []string
}

// Claim takes leases on up to limit claimable jobs of the given commands,
// including jobs that must be resumed whatever their plugin. It is ClaimWith
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
	resumable := nonNilSlice(p.Resumable)
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

// MarkRunning moves a job from accepted to running under lease and returns
// the job's status afterwards. That is running, or the status that stopped
// the change (canceling when a cancel arrived). ErrLeaseLost means the lease
// no longer holds.
func (s *Store) MarkRunning(ctx context.Context, jobID string, lease int64, message string) (jobstate.JobStatus, error) {
	// The batch statement with one row. It makes one statement, one fence,
	// and reads the status that stopped the change in the same snapshot.
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
