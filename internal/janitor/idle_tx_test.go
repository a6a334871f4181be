package janitor

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
)

// TestFrozenPassDoesNotHoldRows checks a janitor pass that stops inside its
// transaction with rows locked (its agent frozen, say). PostgreSQL ends its
// session after IdleInTransaction, so the rows are free for everyone else
// long before the agent wakes. The pass fails and changes nothing.
func TestFrozenPassDoesNotHoldRows(t *testing.T) {
	f := newFixture(t)
	gone := f.agent("gone", "g1", map[string][]string{"p": nil})
	id, _ := f.claimed(gone, "c", "p", false)
	f.silence(id, time.Hour) // its accepted job is a candidate

	self := f.agent("self", "s1", map[string][]string{"p": nil})
	s := New(f.pool, newFakePlugins(), Config{Holder: self, Logger: quiet, IdleInTransaction: 300 * time.Millisecond})
	locked := make(chan struct{})
	wake := make(chan struct{})
	s.afterCandidates = func(ctx context.Context) {
		close(locked)
		select { // frozen until the test says so
		case <-wake:
		case <-ctx.Done():
		}
	}
	passDone := make(chan error, 1)
	go func() { _, err := s.Pass(f.ctx); passDone <- err }()
	select {
	case <-locked:
	case <-time.After(20 * time.Second):
		t.Fatal("the pass never locked its candidates")
	}

	// Another session waits for the row the frozen pass holds. It gets it
	// once the server ended the idle transaction (well before the 20 s).
	conn, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pe *pgconn.PgError
	_, err = conn.Exec(f.ctx, `SELECT 1 FROM active_jobs WHERE job_id = $1 FOR UPDATE NOWAIT`, id)
	require.ErrorAs(t, err, &pe, "the frozen pass holds the job's row")
	require.Equal(t, "55P03", pe.Code, "lock_not_available")
	wctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	var got string
	require.NoError(t, conn.QueryRow(wctx, `SELECT job_id FROM active_jobs WHERE job_id = $1 FOR UPDATE`, id).Scan(&got),
		"the row stayed locked by the frozen pass")

	close(wake)
	err = <-passDone
	require.Error(t, err, "the pass's transaction was ended under it")
	if assert.ErrorAs(t, err, &pe) {
		assert.Equal(t, "25P03", pe.Code, "idle_in_transaction_session_timeout") // SQLSTATE idle_in_transaction_session_timeout
	}
	assert.Equal(t, jobstate.StatusAccepted, f.job(id).Status, "nothing of the frozen pass was applied")
}

// TestFrozenLivenessCheckDoesNotHoldTheTurn checks a liveness check that
// stops inside its transaction after taking the fleet's turn (its agent
// frozen). PostgreSQL ends its session after the check's idle bound, so
// another agent takes the turn and checks, long before the frozen one
// wakes.
func TestFrozenLivenessCheckDoesNotHoldTheTurn(t *testing.T) {
	f := newFixture(t)
	x := f.agent("x", "x-g1", bothPlugins)
	y := f.agent("y", "y-g1", bothPlugins)
	cfg := LivenessConfig{Keepalive: testKeepalive, DeadAfter: testDeadAfter}
	lx := NewLiveness(New(f.pool, newFakePlugins(), Config{Holder: x, Logger: quiet, Keepalive: testKeepalive}), cfg)
	ly := NewLiveness(New(f.pool, newFakePlugins(), Config{Holder: y, Logger: quiet, Keepalive: testKeepalive}), cfg)
	locked, wake := make(chan struct{}), make(chan struct{})
	lx.afterTurn = func(ctx context.Context) {
		close(locked)
		select { // frozen until the test says so
		case <-wake:
		case <-ctx.Done():
		}
	}
	done := make(chan error, 1)
	go func() { _, err := lx.Check(f.ctx); done <- err }()
	select {
	case <-locked:
	case <-time.After(20 * time.Second):
		t.Fatal("x did not take the turn")
	}
	// y checks in turn once x's session is ended, within a few seconds.
	deadline := time.Now().Add(lx.idleBound() + 10*time.Second)
	for {
		c, err := ly.Check(f.ctx)
		require.NoError(t, err)
		if c.Turn {
			break
		}
		require.True(t, time.Now().Before(deadline), "y never got the turn while x was frozen in its check")
		time.Sleep(testKeepalive / 2) // y's next tick
	}
	close(wake)
	require.Error(t, <-done, "the frozen check's session was ended: it changed nothing")
}
