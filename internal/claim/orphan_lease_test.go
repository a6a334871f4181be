package claim_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// TestOrphanLeaseIsDetached checks a lease the database gives this process's
// generation but the process does not run (its claim's answer was lost). The
// second heartbeat that sees it detaches it, so the agents row stops vouching
// for it. The leases it does run stay covered.
func TestOrphanLeaseIsDetached(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	beats := make(chan store.HeartbeatResult, 16)
	var holder store.Holder
	a := startAgent(t, st, "orphans", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.TestSignals.Heartbeat = beats
		holder = c.Holder
	})
	running := submit(t, st, "shell", `{"script":"sleep 30"}`)
	a.waitCalled(t, st, running.ID)

	// Claimed under the agent's own name and generation, behind its back.
	orphan, _, err := st.Submit(ctx, store.SubmitParams{Command: "unserved", Plugin: "noop", Context: json.RawMessage(`{}`)})
	require.NoError(t, err)
	got, err := st.Claim(ctx, holder, 1, []string{"unserved"})
	require.NoError(t, err)
	require.Len(t, got, 1)

	detached := func(id string) bool {
		var d bool
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT detached FROM active_jobs WHERE job_id = $1`, id).Scan(&d))
		return d
	}
	sightings := 0
	deadline := time.After(10 * time.Second)
	for !detached(orphan.ID) {
		select {
		case res := <-beats:
			for _, o := range res.Orphans {
				if o.JobID == orphan.ID {
					sightings++
				}
			}
		case <-deadline:
			t.Fatalf("the orphan lease was not detached (seen %d times)", sightings)
		}
	}
	assert.GreaterOrEqual(t, sightings, 2, "detached only after two sightings")
	assert.False(t, detached(running.ID), "a lease the agent runs stays covered")
}

// TestStuckDetachDoesNotStopTheHeartbeat checks that an orphan detach that
// hangs on a row lock (another session holds the lease's row) does not stall
// the heartbeat. The heartbeat keeps its rhythm, the agent never self-fences,
// and the detach lands once the lock is gone. The heartbeat goroutine used to
// run the detach itself, with no deadline.
func TestStuckDetachDoesNotStopTheHeartbeat(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	beats := make(chan store.HeartbeatResult, 64)
	fenced := make(chan time.Duration, 1)
	var holder store.Holder
	startAgent(t, st, "stuck-detach", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.SelfFenceAfter = 1200 * time.Millisecond
		c.TestSignals.Heartbeat = beats
		c.TestSignals.SelfFenced = fenced
		holder = c.Holder
	})
	orphan, _, err := st.Submit(ctx, store.SubmitParams{Command: "unserved", Plugin: "noop", Context: json.RawMessage(`{}`)})
	require.NoError(t, err)

	// Another session holds the orphan's active row, so its detach waits.
	lock, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	got, err := st.Claim(ctx, holder, 1, []string{"unserved"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = lock.Exec(ctx, `SELECT 1 FROM active_jobs WHERE job_id = $1 FOR UPDATE`, orphan.ID)
	require.NoError(t, err)

	waiting := func() bool {
		var n int
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%SET detached = true%'`).Scan(&n))
		return n > 0
	}
	deadline := time.After(10 * time.Second)
	for !waiting() {
		select {
		case <-beats:
		case <-deadline:
			t.Fatal("the orphan's detach never waited for the row lock")
		}
	}
	// While the detach is stuck, well past the self-fence point, heartbeats
	// keep coming (≈ 12 at 200 ms). The old code sent none.
	var during int
	hold := time.After(2500 * time.Millisecond)
collect:
	for {
		select {
		case <-beats:
			during++
		case d := <-fenced:
			t.Fatalf("the agent self-fenced after %s of silence while only a detach was stuck", d)
		case <-hold:
			break collect
		}
	}
	assert.GreaterOrEqual(t, during, 3, "heartbeats while the detach waited for its row lock")
	require.NoError(t, lock.Rollback(ctx))

	detached := func() bool {
		var d bool
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT detached FROM active_jobs WHERE job_id = $1`, orphan.ID).Scan(&d))
		return d
	}
	deadline = time.After(10 * time.Second)
	for !detached() {
		select {
		case <-beats:
		case <-deadline:
			t.Fatal("the orphan lease was not detached after the lock was released")
		}
	}
}
