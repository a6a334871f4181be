// Package store is tether's access to PostgreSQL for jobs, leases, agents,
// events and logs. Every statement comes from the queries package. Every
// write about a job that an agent makes is fenced by (job_id, lease). When it
// matches no row the lease was lost and the write changes nothing.
//
// The lock order keeps concurrent statements deadlock-free. An active_jobs
// row is locked before its jobs row.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/queries"
)

// Errors callers branch on.
var (
	ErrNotFound            = errors.New("not found")
	ErrIdempotencyConflict = errors.New("idempotency key already used with a different request")
	ErrInvalidTransition   = errors.New("invalid transition")
	ErrLeaseLost           = errors.New("lease lost")
	// ErrOutputGap refuses a resumable runner's checkpoint or end: the
	// database holds fewer of its output records than it had acknowledged
	// (it lost them with its history). Stored, the write would point past
	// output that is gone. Nothing was stored. The runner releases the job
	// to be resumed from the checkpoint the database kept, whose plugin
	// writes that output again.
	ErrOutputGap = errors.New("the database lost output it had acknowledged")
)

// TransitionError says which state a job was in when an operation did not apply.
type TransitionError struct {
	Op     string
	Status jobstate.JobStatus
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("cannot %s a job that is %s", e.Op, e.Status)
}

func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// Job statuses, under the names the store's callers know them by.
const (
	StatusQueued    = jobstate.StatusQueued
	StatusAccepted  = jobstate.StatusAccepted
	StatusRunning   = jobstate.StatusRunning
	StatusCanceling = jobstate.StatusCanceling
	StatusSucceeded = jobstate.StatusSucceeded
	StatusFailed    = jobstate.StatusFailed
	StatusCanceled  = jobstate.StatusCanceled
)

// Terminal reports whether status is final.
func Terminal(status jobstate.JobStatus) bool { return status.Terminal() }

// NotifyChannel carries the command name of each submitted job, so idle agents
// wake without waiting for their poll interval.
const NotifyChannel = "tether_jobs"

// CancelChannel carries the ID of each job whose cancel was requested, so its
// owner acts before its next heartbeat.
const CancelChannel = "tether_cancel"

// Job is a job as submitters see it. Its JSON is the API's (pkg/api), so
// the store's rows and the wire format cannot drift apart.
type Job = api.Job

// Event is one entry in a job's timeline.
type Event = api.Event

// LogChunk is one stored piece of a job's output. It is one write of the
// plugin's, or what a flush cut of it at the stream's cap.
type LogChunk struct {
	Seq    int64     `json:"seq"`
	Stream string    `json:"stream"`
	At     time.Time `json:"at"` // the agent's clock when it received the write
	// Attempt is the attempt that wrote it. It is 0 for output stored before
	// schema v7.
	Attempt int    `json:"attempt"`
	Data    []byte `json:"-"`
}

// Agent is an agent's registration and liveness.
// Agent is one agents row as the API lists it (api.Agent), with what
// internal/fleet.Classify judges it by (Seen). The caller fills Liveness,
// Reason and Live.
type Agent struct {
	api.Agent
	Seen AgentSeen `json:"-"`
}

// Store wraps a connection pool.
type Store struct {
	pool *pgxpool.Pool
	// begin opens the store's own transactions (inTx) with their idle bound.
	begin pgx.TxOptions
}

// DefaultTxIdle is the bound on idling inside the store's transactions
// unless the caller sets one (TxIdle): the default keepalive.
const DefaultTxIdle = defaults.Keepalive

// minTxIdle is the least bound: one GC pause or a busy host must not end a
// live agent's transaction.
const minTxIdle = time.Second

// Option configures a Store.
type Option func(*Store)

// TxIdle bounds how long a transaction the store opens may idle between
// its statements (at least a second). An agent passes its keepalive, so a
// frozen agent holds its jobs' rows for no longer than that: well inside
// stale_job, after which another agent's janitor must be able to lock them.
func TxIdle(d time.Duration) Option {
	return func(s *Store) { s.begin = beginOptions(max(d, minTxIdle)) }
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool}
	TxIdle(DefaultTxIdle)(s)
	for _, o := range opts {
		o(s)
	}
	return s
}

// beginOptions opens a transaction with queries/tx_begin.sql, the bound
// idle written in. A begin query takes no arguments, and a number formatted
// here cannot inject.
func beginOptions(idle time.Duration) pgx.TxOptions {
	ms := strconv.FormatInt(idle.Milliseconds(), 10)
	return pgx.TxOptions{BeginQuery: strings.ReplaceAll(queries.Get("tx_begin"), "@idle_ms", "'"+ms+"'")}
}

// inTx runs fn in a transaction whose idling is bounded (TxIdle) and
// without JIT. It commits when fn returns nil and rolls back otherwise.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, s.begin, fn)
}

// inTxIdle is inTx with a bound of the caller's (a janitor pass's, a
// liveness check's).
func (s *Store) inTxIdle(ctx context.Context, idle time.Duration, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, beginOptions(idle), fn)
}

// Pool returns the underlying pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.pool.QueryRow(ctx, queries.Get("ping")).Scan(&one); err != nil {
		return fmt.Errorf("pinging database: %w", err)
	}
	return nil
}

// genericPlan is the first statement of queryGeneric's pipeline. For the rest
// of its (implicit) transaction, prepared statements use their generic plan
// and JIT is off (queries/hot_generic_plan.sql).
var genericPlan = queries.Named("hot_generic_plan").SQL

// noJIT is the first statement of QueryHot's pipeline. For the rest of its
// transaction, JIT is off (queries/hot_no_jit.sql).
var noJIT = queries.Named("hot_no_jit").SQL

// queryGeneric runs one statement with the generic plan of its prepared
// statement, and without JIT. The hot path's multi-row statements (claim, the
// running and final batches) take array arguments, and PostgreSQL's default
// plan cache mode kept re-planning them on every call. That was measured at
// 0.6 ms of planning per claim, more than the claim itself. Their SQL is
// written so that the generic plan is the index plan (ANY (ARRAY(...))
// joins). That plan's cost estimate grows with the backlog and passed
// jit_above_cost at ~600,000 queued jobs of one command. JIT then cost 34 ms
// of a 35 ms claim (issue 25). The settings are local to the pipeline's
// implicit transaction (one round trip, one Sync), so they never leak into
// other statements on the connection, also through PgBouncer in transaction
// mode.
func (s *Store) queryGeneric(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return queryAfter(ctx, s.pool, genericPlan, sql, args...)
}

// Batcher runs a pipeline of statements. A pool, a connection or a
// transaction fits.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// QueryHot runs one hot statement with JIT off. A hot statement is one every
// agent runs often whose planner estimate grows with a backlog or with held
// leases while it reads few rows (the heartbeat, the liveness check, the
// queue gauges), where compiling would cost more than running. It keeps the
// statement's usual plan (see queryGeneric for the statements that also force
// the generic one). JIT is off for the rest of the transaction. That is the
// pipeline's implicit one on a pool or connection (one round trip), and the
// caller's own on a transaction.
func QueryHot(ctx context.Context, db Batcher, sql string, args ...any) (pgx.Rows, error) {
	return queryAfter(ctx, db, noJIT, sql, args...)
}

// queryAfter runs setup and then sql in one pipeline and returns the rows of
// sql. Closing them (or reading them to the end) closes the pipeline.
func queryAfter(ctx context.Context, db Batcher, setup, sql string, args ...any) (pgx.Rows, error) {
	var b pgx.Batch
	b.Queue(setup)
	b.Queue(sql, args...)
	br := db.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows is the rows of the last statement of a batch. Closing them closes
// the batch, whose error Err reports.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

// Next closes the batch after the last row, so that Err, read after the
// rows as pgx.CollectRows and a loop over Next do, also reports what the end
// of the pipeline said (its implicit transaction's commit).
func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.closeErr = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}
