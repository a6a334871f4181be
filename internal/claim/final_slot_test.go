package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// A job whose plugin call has returned waits for its final write without a
// slot. The test runs with capacity 1 and a final batch that waits 2 s for
// company. The next job is claimed before the first one's end is stored, and
// the one after that only once the batch has landed (at most another capacity
// of ends waiting). It reads from the jobs' own timelines (database clock).
func TestAJobWaitingForItsFinalWriteHoldsNoSlot(t *testing.T) {
	st := store.New(pgtest.DB(t))
	jobs := make([]store.Job, 3)
	for i := range jobs {
		jobs[i] = submit(t, st, "noop", `{}`)
	}
	const window = 2 * time.Second
	a := startAgent(t, st, "slots", 1, func(c *claim.Config) { c.FinalWindow = window })
	at := map[string]map[string]time.Time{} // job → kind → when
	for _, j := range jobs {
		a.waitEnd(t, st, j.ID, 30*time.Second, store.StatusSucceeded)
		evs, err := st.Events(context.Background(), j.ID, 0, 0)
		require.NoError(t, err)
		at[j.ID] = map[string]time.Time{}
		for _, e := range evs {
			at[j.ID][e.Kind] = e.At
		}
		require.Contains(t, at[j.ID], "claimed", j.ID)
		require.Contains(t, at[j.ID], "succeeded", j.ID)
	}
	first, second, third := at[jobs[0].ID], at[jobs[1].ID], at[jobs[2].ID]
	assert.True(t, second["claimed"].Before(first["succeeded"]),
		"the second job was claimed (%s) before the first one's end was stored (%s)", second["claimed"], first["succeeded"])
	assert.GreaterOrEqual(t, first["succeeded"].Sub(first["running"]), window/2, "the first end waited in its batch")
	assert.False(t, third["claimed"].Before(first["succeeded"]),
		"the third job waited for the batch (claimed %s, first end %s): capacity 1 holds at most 2", third["claimed"], first["succeeded"])
}
