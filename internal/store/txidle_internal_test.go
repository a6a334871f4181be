package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// The store's own transactions (a checkpoint, an end with its output check,
// a cancel) bound their idling. A transaction frozen between its statements
// with a job's row locked, as in an agent stopped by SIGSTOP, is ended by
// the server after the bound: another session (a janitor) gets the row
// long before the agent wakes, and the frozen transaction changes nothing.
func TestFrozenTransactionDoesNotHoldTheJobsRow(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.DB(t)
	st := New(pool, TxIdle(time.Second))
	j, _, err := st.Submit(ctx, SubmitParams{Command: "c", Plugin: "noop", Context: json.RawMessage(`{}`)})
	require.NoError(t, err)

	locked, wake := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.inTx(ctx, func(tx pgx.Tx) error {
			var setting string
			if err := tx.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout')`).Scan(&setting); err != nil {
				return err
			}
			if setting != "1s" {
				t.Errorf("idle bound inside the transaction is %q, want 1s", setting)
			}
			if err := tx.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&setting); err != nil {
				return err
			}
			if setting != "off" {
				t.Errorf("jit inside the transaction is %q, want off", setting)
			}
			if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, j.ID); err != nil {
				return err
			}
			close(locked)
			<-wake // frozen
			_, err := tx.Exec(ctx, `UPDATE jobs SET error = 'written by the frozen transaction' WHERE id = $1`, j.ID)
			return err
		})
	}()
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("the transaction ended before it locked the row: %v", err)
	}

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pe *pgconn.PgError
	_, err = conn.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE NOWAIT`, j.ID)
	require.ErrorAs(t, err, &pe, "the frozen transaction holds the row")
	require.Equal(t, "55P03", pe.Code, "lock_not_available")
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var id string
	require.NoError(t, conn.QueryRow(wctx, `SELECT id FROM jobs WHERE id = $1 FOR UPDATE`, j.ID).Scan(&id),
		"the row stayed locked by the frozen transaction")

	close(wake)
	err = <-done
	require.Error(t, err, "the frozen transaction was ended under it")
	got, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Empty(t, got.Error, "nothing of the frozen transaction was stored")

	// The bound was the transaction's only: the connection's own setting is
	// untouched (a pooler shares server sessions).
	var after string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout')`).Scan(&after))
	assert.Equal(t, "0", after)
}

func TestBeginSQLBound(t *testing.T) {
	begin := func(d time.Duration) string { return New(nil, TxIdle(d)).begin.BeginQuery }
	assert.Contains(t, begin(250*time.Millisecond), "'1000'", "at least a second")
	assert.Contains(t, begin(5*time.Second), "'5000'")
	assert.NotContains(t, begin(5*time.Second), "@idle_ms")
	assert.Contains(t, beginOptions(300*time.Millisecond).BeginQuery, "'300'", "a janitor's own bound is kept as given")
}
