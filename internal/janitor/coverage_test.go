package janitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeartbeatCoversLeases checks that a lease is as fresh as its holder's
// agents row (its heartbeats renew every lease it holds), unless the
// heartbeat detached it. Then only its own last_heartbeat (the claim time)
// counts.
func TestHeartbeatCoversLeases(t *testing.T) {
	f := newFixture(t)
	janitor := f.agent("janitor", "janitor-g1", map[string][]string{"res": resCaps})
	holder := f.agent("holder", "holder-g1", map[string][]string{"res": resCaps})

	covered, coveredLease := f.claimed(holder, "c", "res", true)
	detached, detachedLease := f.claimed(holder, "c", "res", true)
	fresh, _ := f.claimed(holder, "c", "res", true)
	// Two were claimed 10 minutes ago, one just now. The holder heartbeat
	// just now.
	f.exec(`UPDATE active_jobs SET last_heartbeat = now() - interval '10 minutes', claimed_at = now() - interval '10 minutes'
	        WHERE job_id IN ($1, $2)`, covered, detached)
	f.exec(`UPDATE active_jobs SET detached = true WHERE job_id = $1`, detached)

	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: janitor})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the detached lease is stale")
	r, ok := f.active(covered)
	require.True(t, ok)
	require.NotNil(t, r.Agent, "a lease covered by a fresh agents row is not stale")
	assert.Equal(t, coveredLease, r.Lease)
	r, ok = f.active(detached)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "the detached lease was released")
	assert.Equal(t, detachedLease+1, r.Lease)
	require.NotNil(t, r.Reason)
	assert.Regexp(t, `^stale for (599|6\d\d)s$`, *r.Reason)

	// The holder falls silent. Its covered lease goes stale with it, while
	// the lease it claimed just now stays fresh until stale_job after that
	// claim.
	f.agentSilence("holder", 10*time.Minute)
	n, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	r, ok = f.active(covered)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "released with its silent holder")
	r, ok = f.active(fresh)
	require.True(t, ok)
	assert.NotNil(t, r.Agent, "claimed just now: fresh by its claim time")
}
