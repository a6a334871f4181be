package claim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// forget makes the database look as if it lost a job's claim with its
// history. The job is unowned again under the lease before, queued, and its
// output is gone. With hold, the job is not due for an hour, so the agent
// cannot claim it again before the test has told it of the change.
func forget(t *testing.T, st *store.Store, id string, hold bool) {
	t.Helper()
	ctx := context.Background()
	due := "now()"
	if hold {
		due = "now() + interval '1 hour'"
	}
	// One transaction. A claim landing between the statements would have
	// its accepted status overwritten by queued.
	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, q := range []string{
		`UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL, lease = lease - 1, log_lease = NULL, log_seq = 0,
		        stdout_bytes = 0, stderr_bytes = 0, run_after = ` + due + ` WHERE job_id = $1`,
		`UPDATE jobs SET status = 'queued', running_event_id = NULL, running_at = NULL, running_message = NULL WHERE id = $1`,
		`DELETE FROM job_logs WHERE job_id = $1`,
	} {
		_, err := tx.Exec(ctx, q, id)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}

// rewind tells the tracker the server's WAL position went back, as a
// heartbeat after lost commits would, and waits for the reconcile.
func rewind(t *testing.T, tr *dbhistory.Tracker, done <-chan dbhistory.Event) {
	t.Helper()
	known, ok := tr.Known()
	require.True(t, ok, "the tracker has a baseline")
	require.Equal(t, dbhistory.Rewound, tr.Observe(dbhistory.Position{Timeline: known.Timeline}))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the reconcile did not end")
	}
}

// TestReconcileReassertsALostClaim covers a database that forgot a running
// shell job's claim and output. The agent gives the claim back to itself
// under the lease it had, stores running again, and says on the job which
// output is lost. The job runs on to success, neither stopped nor run twice.
func TestReconcileReassertsALostClaim(t *testing.T) {
	st := store.New(pgtest.DB(t))
	tr := dbhistory.NewTracker()
	done := make(chan dbhistory.Event, 4)
	a := startAgent(t, st, "reassert", 2, func(c *claim.Config) {
		c.Keepalive = time.Minute // no heartbeat between forget and rewind (see baseline)
		c.History, c.TestSignals.Reconciled = tr, done
	})
	j := submit(t, st, "shell", `{"script":"echo one; sleep 1; echo two; sleep 1; echo three"}`)
	a.waitCalled(t, st, j.ID)
	a.waitFlushed(t, j.ID) // the first line
	baseline(t, st, tr)
	var lease int64
	require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT lease FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&lease))

	forget(t, st, j.ID, true)
	rewind(t, tr, done)

	var agent *string
	var now int64
	require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT agent_name, lease FROM active_jobs WHERE job_id = $1`, j.ID).Scan(&agent, &now))
	require.NotNil(t, agent)
	assert.Equal(t, "reassert", *agent)
	assert.Equal(t, lease, now, "the lease it had, handed out once")
	assert.Equal(t, store.StatusRunning, getJob(t, st, j.ID).Status)
	lost := eventsOfKind(t, st, j.ID, "database_history_lost")
	require.Len(t, lost, 1)
	assert.Contains(t, lost[0].Message, "re-asserted")
	assert.Contains(t, lost[0].Message, "cannot be written again", "the lost line is named")

	end := a.waitEnd(t, st, j.ID, 15*time.Second, store.StatusSucceeded, store.StatusFailed)
	require.Equal(t, store.StatusSucceeded, end.Status, end.Error)
	out := logText(t, st, j.ID)
	assert.NotContains(t, out, "one", "lost with the history")
	assert.Contains(t, out, "three")
	assert.Equal(t, 1, strings.Count(out, "three"))
}

// TestReclaimOfALeaseItRunsRepairs covers a database that forgot a running
// job's claim. The agent, not told of any change (through a pooler, before
// its next heartbeat), claims the job again — under the very lease its runner
// holds. It keeps the runner (never a second one). The reconcile that claim
// starts stores running again and names the lost output. The job runs on to
// success.
func TestReclaimOfALeaseItRunsRepairs(t *testing.T) {
	st := store.New(pgtest.DB(t))
	done := make(chan dbhistory.Event, 4)
	// No heartbeat in the test's time. A real loss of history also moves the
	// WAL position, which the heartbeat sees before the leases.
	a := startAgent(t, st, "reclaim", 2, func(c *claim.Config) { c.Keepalive, c.TestSignals.Reconciled = time.Minute, done })
	j := submit(t, st, "shell", `{"script":"echo one; sleep 1; echo two; sleep 1; echo three"}`)
	a.waitCalled(t, st, j.ID)
	a.waitFlushed(t, j.ID) // the first line

	forget(t, st, j.ID, false)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("claiming its own lease again started no reconcile")
	}
	lost := eventsOfKind(t, st, j.ID, "database_history_lost")
	require.Len(t, lost, 1)
	assert.Contains(t, lost[0].Message, "the database had lost that the plugin was called; stored again")
	end := a.waitEnd(t, st, j.ID, 15*time.Second, store.StatusSucceeded, store.StatusFailed)
	require.Equal(t, store.StatusSucceeded, end.Status, end.Error)
	assert.Equal(t, 1, strings.Count(logText(t, st, j.ID), "three"), "one runner: its line once")
}

// TestReconcileStopsAJobAnotherProcessHolds covers a database that lost its
// history and gave the job's lease number to another process. The agent stops
// its runner and writes nothing more for it, and says so on the job.
func TestReconcileStopsAJobAnotherProcessHolds(t *testing.T) {
	st := store.New(pgtest.DB(t))
	tr := dbhistory.NewTracker()
	done := make(chan dbhistory.Event, 4)
	ended := make(chan claim.Ended, 4)
	a := startAgent(t, st, "stopped", 2, func(c *claim.Config) {
		c.Keepalive = time.Minute // no heartbeat between takeover and rewind (see baseline)
		c.History, c.TestSignals.Reconciled, c.TestSignals.Ended = tr, done, ended
	})
	j := submit(t, st, "shell", `{"script":"echo one; sleep 30"}`)
	a.waitCalled(t, st, j.ID)
	baseline(t, st, tr)
	_, err := st.Pool().Exec(context.Background(), `UPDATE active_jobs SET agent_name = 'other', agent_generation = 'other-g' WHERE job_id = $1`, j.ID)
	require.NoError(t, err)
	rewind(t, tr, done)
	select {
	case e := <-ended:
		assert.Equal(t, "history_lost", e.Status)
	case <-time.After(20 * time.Second):
		t.Fatal("the runner was not stopped")
	}
	lost := eventsOfKind(t, st, j.ID, "database_history_lost")
	require.Len(t, lost, 1)
	assert.Contains(t, lost[0].Message, "held by other")
	assert.Equal(t, store.StatusRunning, getJob(t, st, j.ID).Status, "nothing written for the other process's lease")
	assert.Empty(t, eventsOfKind(t, st, j.ID, "lease_lost"))
}

func logText(t *testing.T, st *store.Store, id string) string {
	t.Helper()
	chunks, err := st.Logs(context.Background(), id, "", 0, 0)
	require.NoError(t, err)
	var b strings.Builder
	for _, c := range chunks {
		b.Write(c.Data)
	}
	return b.String()
}

func eventsOfKind(t *testing.T, st *store.Store, id, kind string) []store.Event {
	t.Helper()
	evs := eventsOf(t, st, id)
	var out []store.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// baseline sets the tracker's newest known position to the server's own,
// as a heartbeat would. The tests that take a lease away and then rewind
// run with no heartbeat in between. A heartbeat there would see a plain
// lost lease, which is not what they are about.
func baseline(t *testing.T, st *store.Store, tr *dbhistory.Tracker) {
	t.Helper()
	pos, err := dbhistory.Read(context.Background(), st.Pool())
	require.NoError(t, err)
	require.Equal(t, dbhistory.Same, tr.Observe(pos))
}
