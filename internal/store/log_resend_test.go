package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/lifecycle"
	"github.com/tetherjobs/tether/internal/store"
)

func recs(first int64, stream string, lines ...string) []store.LogRecord {
	out := make([]store.LogRecord, len(lines))
	for i, l := range lines {
		out[i] = store.LogRecord{Seq: first + int64(i), Stream: stream, At: time.Now(), Data: []byte(l)}
	}
	return out
}

// registerAndClaim submits a job of command c and claims it as agent a.
func registerAndClaim(t *testing.T, st *store.Store) (store.Holder, store.Job, int64) {
	t.Helper()
	a := register(t, st, "a")
	j := submit(t, st, "c")
	return a, j, claimOne(t, st, a, j.ID).Lease
}

// TestAppendLogsResendIsStoredOnce checks a batch sent again after its
// acknowledgement was lost — whole, overlapping the next one, inside a
// checkpoint, or racing its first send on another connection. It stores each
// record once and counts its bytes once. A new lease numbers from 1 again.
func TestAppendLogsResendIsStoredOnce(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, j, lease := registerAndClaim(t, st)
	send := func(rs []store.LogRecord) {
		t.Helper()
		held, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Records: rs}}, 1<<20)
		require.NoError(t, err)
		require.True(t, held[j.ID])
	}

	send(recs(1, "stdout", "a\n", "b\n"))
	send(recs(1, "stdout", "a\n", "b\n"))                                      // the same batch again
	send(append(recs(1, "stdout", "a\n", "b\n"), recs(3, "stderr", "c\n")...)) // put back, with what came after
	send(recs(4, "stdout", "d\n"))
	assert.Equal(t, "a\nb\nd\n", readStream(t, st, j.ID, "stdout"))
	assert.Equal(t, "c\n", readStream(t, st, j.ID, "stderr"))

	// A checkpoint sent twice stores its output once and its handle as sent.
	for range 2 {
		require.NoError(t, st.CheckpointWithOutput(ctx, store.LogBatch{JobID: j.ID, Lease: lease, Records: recs(5, "stdout", "e\n")}, 1<<20, []byte("h5")))
	}
	assert.Equal(t, "a\nb\nd\ne\n", readStream(t, st, j.ID, "stdout"))

	// Two sends of the same records at once. The second waits for the first's
	// row lock, and then skips what the first stored.
	watch, err := pgx.Connect(ctx, st.Pool().Config().ConnString()) // not the pool's: it is full
	require.NoError(t, err)
	defer watch.Close(ctx)
	lock, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `SELECT 1 FROM active_jobs WHERE job_id = $1 FOR UPDATE`, j.ID)
	require.NoError(t, err)
	batch := recs(6, "stdout", "f\n", "g\n")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Records: batch}}, 1<<20)
			errs <- err
		}()
	}
	awaitLockWaits(t, watch, "%idempotent log append%", 2, 10*time.Second) // both sends wait for the row lock
	require.NoError(t, lock.Rollback(ctx))
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	out := readStream(t, st, j.ID, "stdout")
	assert.Equal(t, "a\nb\nd\ne\nf\ng\n", out)
	var outBytes int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT stdout_bytes FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&outBytes))
	assert.Equal(t, int64(len(out)), outBytes, "bytes counted once toward the cap")

	// Records without an identity are stored each time.
	for range 2 {
		_, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Stderr: []byte("x\n")}}, 1<<20)
		require.NoError(t, err)
	}
	assert.Equal(t, "c\nx\nx\n", readStream(t, st, j.ID, "stderr"))

	// A new holder numbers its records from 1 again.
	require.NoError(t, st.Release(ctx, a, j.ID, lease, "test"))
	b := register(t, st, "b")
	again, err := st.Claim(ctx, b, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, again, 1)
	lease = again[0].Lease
	send(recs(1, "stdout", "h\n"))
	assert.True(t, strings.HasSuffix(readStream(t, st, j.ID, "stdout"), "g\nh\n"))
}

// TestWritesFencedByHolderGeneration covers a database that lost its history
// and can hand a lease number out again, to another process. Every write a
// holder makes about its job is fenced by its generation too, so the earlier
// holder's writes never land in the new holder's attempt.
func TestWritesFencedByHolderGeneration(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, b := register(t, st, "a"), register(t, st, "b")
	j := submit(t, st, "c")
	got, err := st.Claim(ctx, a, 1, []string{"c"})
	require.NoError(t, err)
	lease := got[0].Lease
	// This is what a lost claim and a new one look like. The lease is the
	// same, b's.
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET agent_name = $2, agent_generation = $3 WHERE job_id = $1`, j.ID, b.Name, b.Generation)
	require.NoError(t, err)

	held, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Generation: a.Generation, Records: recs(1, "stdout", "a's\n")}}, 1<<20)
	require.NoError(t, err)
	assert.False(t, held[j.ID], "log append")
	assert.ErrorIs(t, st.CheckpointWithOutput(ctx, store.LogBatch{JobID: j.ID, Lease: lease, Generation: a.Generation}, 1<<20, []byte("a's")), store.ErrLeaseLost, "checkpoint")
	statuses, err := st.MarkRunningBatch(ctx, []store.Running{{JobID: j.ID, Lease: lease, Generation: a.Generation}})
	require.NoError(t, err)
	assert.Equal(t, []jobstate.JobStatus{""}, statuses, "running")
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: lease, HolderGeneration: a.Generation, Actor: a, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	assert.ErrorIs(t, err, store.ErrLeaseLost, "final end")
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: lease, HolderGeneration: a.Generation, Actor: a,
		Outcome: store.Outcome{Status: store.StatusFailed, ErrorClass: "retriable"}, Plan: lifecycle.Plan{Retry: true}})
	assert.ErrorIs(t, err, store.ErrLeaseLost, "retry")
	assert.ErrorIs(t, st.Release(ctx, a, j.ID, lease, "a's"), store.ErrLeaseLost, "release")
	assert.Empty(t, readStream(t, st, j.ID, ""))

	// b, the holder, writes.
	held, err = st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Generation: b.Generation, Records: recs(1, "stdout", "b's\n")}}, 1<<20)
	require.NoError(t, err)
	assert.True(t, held[j.ID])
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: lease, HolderGeneration: b.Generation, Actor: b, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	require.NoError(t, err)
	assert.Equal(t, "b's\n", readStream(t, st, j.ID, ""))
}

// TestResumableWritesRefuseAGap covers a database that lost output it had
// acknowledged (a standby promoted without the newest history). A resumable
// runner's checkpoint, end-of-attempt output and end carry the highest
// record number they saw acknowledged. Stored past the gap, the handle would
// point beyond lines that are gone, so each is refused with ErrOutputGap and
// stores nothing; without a gap they go through as before.
func TestResumableWritesRefuseAGap(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, j, lease := registerAndClaim(t, st)
	_, err := st.MarkRunning(ctx, j.ID, lease, "")
	require.NoError(t, err)
	out := func(after int64, rs []store.LogRecord) store.LogBatch {
		return store.LogBatch{JobID: j.ID, Lease: lease, Generation: a.Generation, After: after, Records: rs}
	}
	handle := func() string {
		t.Helper()
		var h []byte
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT coalesce(handle, '') FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&h))
		return string(h)
	}

	require.NoError(t, st.CheckpointDescribed(ctx, out(0, recs(1, "stdout", "1\n", "2\n")), 1<<20, []byte("h2"), nil))
	require.NoError(t, st.CheckpointDescribed(ctx, out(2, recs(3, "stdout", "3\n")), 1<<20, []byte("h3"), nil))
	// The history since record 1 is lost: the row says 1, line 2 and 3 are gone.
	_, err = st.Pool().Exec(ctx, `DELETE FROM job_logs WHERE job_id = $1 AND data <> $2`, j.ID, []byte("1\n"))
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET log_seq = 1, handle = 'h1' WHERE job_id = $1`, j.ID)
	require.NoError(t, err)

	err = st.CheckpointDescribed(ctx, out(3, recs(4, "stdout", "4\n")), 1<<20, []byte("h4"), nil)
	require.ErrorIs(t, err, store.ErrOutputGap, "checkpoint")
	assert.Equal(t, "h1", handle(), "the kept checkpoint stands")
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: lease, HolderGeneration: a.Generation, Actor: a, LogAfter: 3,
		Output: out(3, recs(4, "stdout", "4\n")), OutputLimit: 1 << 20, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	require.ErrorIs(t, err, store.ErrOutputGap, "end, with its end-of-attempt output")
	assert.Equal(t, "1\n", readStream(t, st, j.ID, "stdout"), "nothing stored past the gap")
	var status string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, j.ID).Scan(&status))
	assert.Equal(t, "running", status, "the refused end wrote nothing")

	// A runner that agrees with the database (the resume, writing 2 and 3
	// again from the kept checkpoint) goes through, and so does its end.
	require.NoError(t, st.CheckpointDescribed(ctx, out(1, recs(2, "stdout", "2\n", "3\n")), 1<<20, []byte("h3"), nil))
	assert.Equal(t, "h3", handle())
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: lease, HolderGeneration: a.Generation, Actor: a, LogAfter: 3,
		Output: out(3, recs(4, "stdout", "4\n")), OutputLimit: 1 << 20, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	require.NoError(t, err)
	assert.Equal(t, "1\n2\n3\n4\n", readStream(t, st, j.ID, "stdout"))

	// A lease that no longer holds is lost, not a gap.
	_, err = st.EndAttempt(ctx, store.End{JobID: j.ID, Lease: lease, HolderGeneration: a.Generation, Actor: a, LogAfter: 4, Outcome: store.Outcome{Status: store.StatusSucceeded}})
	require.ErrorIs(t, err, store.ErrLeaseLost)
}

// A resumable runner's output at its attempt's end goes in the end's own
// transaction (End.Output). An end refused by its fence stores none of the
// output, so the resume that writes it again stores it once. An end that
// lands stores it, and the same end sent again (its answer lost) stores
// nothing twice.
func TestEndStoresItsOutputOrNothing(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a, j, lease := registerAndClaim(t, st)
	_, err := st.MarkRunning(ctx, j.ID, lease, "")
	require.NoError(t, err)
	require.NoError(t, st.CheckpointDescribed(ctx, store.LogBatch{JobID: j.ID, Lease: lease, Generation: a.Generation, Records: recs(1, "stdout", "1\n")}, 1<<20, []byte("h1"), nil))
	end := func(l int64) store.End {
		return store.End{JobID: j.ID, Lease: l, HolderGeneration: a.Generation, Actor: a, LogAfter: 1,
			Output:      store.LogBatch{JobID: j.ID, Lease: l, Generation: a.Generation, After: 1, Records: recs(2, "stdout", "done\n")},
			OutputLimit: 1 << 20, Outcome: store.Outcome{Status: store.StatusSucceeded}}
	}
	assert.False(t, store.FinalBatchable(end(lease)), "an end with output goes alone, in its own transaction")

	_, err = st.EndAttempt(ctx, end(lease+1))
	require.ErrorIs(t, err, store.ErrLeaseLost, "a lease the runner does not hold")
	assert.Equal(t, "1\n", readStream(t, st, j.ID, "stdout"), "a refused end stores none of its output")

	_, err = st.EndAttempt(ctx, end(lease))
	require.NoError(t, err)
	assert.Equal(t, "1\ndone\n", readStream(t, st, j.ID, "stdout"), "the end and its output landed together")

	_, err = st.EndAttempt(ctx, end(lease))
	require.ErrorIs(t, err, store.ErrLeaseLost, "the same end again, its first answer lost")
	assert.Equal(t, "1\ndone\n", readStream(t, st, j.ID, "stdout"), "nothing stored twice")
}
