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

// TestOrphanLeaseIsDetached: a lease the database gives this process's
// generation but the process does not run (its claim's answer was lost) is
// detached by the second heartbeat that sees it, so the agents row stops
// vouching for it; the leases it does run stay covered.
func TestOrphanLeaseIsDetached(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	beats := make(chan store.HeartbeatResult, 16)
	var holder store.Holder
	startAgent(t, st, "orphans", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.TestSignals.Heartbeat = beats
		holder = c.Holder
	})
	running := submit(t, st, "shell", `{"script":"sleep 30"}`)
	waitStatus(t, st, running.ID, 10*time.Second, store.StatusRunning)

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
