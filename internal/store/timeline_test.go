package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// A job's claimed and running events live in its jobs row (schema v13)
// until another claim replaces them, which stores them as event rows first:
// the timeline reads the same either way — every event once, in id order,
// each with its own agent, generation, lease and message — and the hot path
// inserts no event row for them.
func TestTimelineKeepsClaimAndRunningAcrossReclaims(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.DB(t)
	st := store.New(pool)
	a, b := register(t, st, "a"), register(t, st, "b")
	j := submit(t, st, "c")

	first, err := st.Claim(ctx, a, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, first, 1)
	_, err = st.MarkRunning(ctx, j.ID, first[0].Lease, "attempt 1 on a")
	require.NoError(t, err)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_events WHERE job_id = $1 AND kind IN ('claimed', 'running')`, j.ID).Scan(&rows))
	assert.Zero(t, rows, "the claim and the running write insert no event row")
	before, err := st.Events(ctx, j.ID, 0, 0)
	require.NoError(t, err)

	// Released and claimed again by b. a's claim becomes event rows, with the
	// ids and times it had.
	require.NoError(t, st.Release(ctx, a, j.ID, first[0].Lease, "handoff: test"))
	second, err := st.Claim(ctx, b, 1, []string{"c"})
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.NoError(t, st.Finish(ctx, b, j.ID, second[0].Lease, store.Outcome{Status: store.StatusSucceeded}))

	evs, err := st.Events(ctx, j.ID, 0, 0)
	require.NoError(t, err)
	type ev struct {
		Kind, Agent, Generation, Message string
		Lease                            int64
	}
	var got []ev
	for i, e := range evs {
		if e.Kind == "released" { // who released it is not this test's subject
			e.Agent, e.Generation, e.Lease = "", "", 0
		}
		got = append(got, ev{e.Kind, e.Agent, e.Generation, e.Message, e.Lease})
		if i > 0 {
			assert.Greater(t, e.ID, evs[i-1].ID, "ids in order")
			assert.False(t, e.At.Before(evs[i-1].At), "times in order: %s after %s", e.Kind, evs[i-1].Kind)
		}
	}
	assert.Equal(t, []ev{
		{Kind: "submitted"},
		{"claimed", "a", a.Generation, "attempt 1", first[0].Lease},
		{"running", "a", a.Generation, "attempt 1 on a", first[0].Lease},
		{"released", "", "", "handoff: test", 0},
		{"claimed", "b", b.Generation, "attempt 1", second[0].Lease},
		{"succeeded", "b", b.Generation, "", second[0].Lease},
	}, got, "the timeline, kinds and holders")
	for i, e := range before {
		assert.Equal(t, e, evs[i], "event %d (%s) kept its id, time and fields when it became a row", i, e.Kind)
	}
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_events WHERE job_id = $1 AND kind IN ('claimed', 'running')`, j.ID).Scan(&rows))
	assert.Equal(t, 2, rows, "only the replaced claim became rows")

	// Paging by id goes through both kinds of event.
	var paged []string
	after := int64(0)
	for {
		page, err := st.Events(ctx, j.ID, after, 1)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].Kind)
		after = page[0].ID
	}
	assert.Equal(t, []string{"submitted", "claimed", "running", "released", "claimed", "succeeded"}, paged)
}
