package janitor

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// The two configurations of the reproduced bug (issue 27): agent A
// heartbeats every 3 s and announces dead_after 6 s; agent B checks every
// 500 ms with dead_after 1 s and stale_job 20 s.
var (
	slowTimings = store.Timings{Keepalive: 3 * time.Second, DeadAfter: 6 * time.Second, StaleJob: 120 * time.Second}
	fastTimings = store.Timings{Keepalive: 500 * time.Millisecond, DeadAfter: time.Second, StaleJob: 20 * time.Second}
)

// registerWith registers name as an agent that announces timings, serving
// command c with both plugins.
func (f *fixture) registerWith(name, gen string, timings store.Timings) store.Holder {
	f.t.Helper()
	raw, err := json.Marshal(map[string]any{
		"res": map[string]any{"version": "1", "capabilities": resCaps},
		"sh":  map[string]any{"version": "1", "capabilities": shCaps},
	})
	require.NoError(f.t, err)
	h := store.Holder{Name: name, Generation: gen}
	_, err = f.st.RegisterAgent(f.ctx, store.Registration{Holder: h, Capacity: 1000, Commands: []string{"c"}, Plugins: raw, Timings: timings})
	require.NoError(f.t, err)
	return h
}

// heartbeatsEvery renews h and its leases every period with the agent's own
// statement until the returned stop is called.
func (f *fixture) heartbeatsEvery(period time.Duration, h store.Holder, leases []store.Lease) (stop func()) {
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(period)
		defer ticker.Stop()
		for {
			if _, err := f.st.Heartbeat(ctx, h, leases); err != nil && ctx.Err() == nil {
				f.t.Errorf("heartbeat of %s: %v", h.Name, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// A fast checker judges a slow agent by the slow agent's own announced
// timings. With A's name-lock session killed while A is alive and
// heartbeating every 3 s, B (dead_after 1 s) releases nothing: A is judged
// by its own dead_after of 6 s, and heartbeats within it. B's janitor leaves
// A's running job alone at 30 s of silence (B's stale_job is 20 s, A's
// 120 s). A that is really dead (lock free, silent) is still found dead, 6 s
// after B first saw its lock free, not 1 s.
func TestLivenessJudgesAnAgentByItsOwnTimings(t *testing.T) {
	f := newFixture(t)
	b := f.registerWith("b", "b-g1", fastTimings)
	a := f.registerWith("a", "a-g1", slowTimings)
	lock := f.nameLock("a")
	res, resLease := f.claimed(a, "c", "res", true)
	acc, accLease := f.claimed(a, "c", "res", false)
	leases := []store.Lease{{JobID: res, Lease: resLease}, {JobID: acc, Lease: accLease}}
	stop := f.heartbeatsEvery(slowTimings.Keepalive, a, leases)

	p := &probe{t: t, checked: make(chan Checked), acted: make(chan Acted, 1000)}
	jan := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: b, Metrics: metrics.New(),
		Keepalive: fastTimings.Keepalive, StaleJob: fastTimings.StaleJob, OfflineAfter: 3 * fastTimings.Keepalive})
	lv := NewLiveness(jan, LivenessConfig{Keepalive: fastTimings.Keepalive, DeadAfter: fastTimings.DeadAfter,
		TestSignals: LivenessSignals{Checked: p.checked, Acted: p.acted}})
	require.NoError(t, lv.Start(f.ctx))
	t.Cleanup(lv.Stop)
	p.next()

	// A's lock connection is killed; A lives on and heartbeats.
	var pid uint32
	require.NoError(t, lock.QueryRow(f.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	f.exec(`SELECT pg_terminate_backend($1)`, pid)
	sawFree := false
	p.checksFor(slowTimings.DeadAfter+slowTimings.Keepalive, func(c Checked, acted []Acted) {
		sawFree = sawFree || len(c.Free) == 1
		assert.Empty(t, c.Dead, "A heartbeats within its own dead_after")
		assert.Empty(t, acted)
	})
	require.True(t, sawFree, "B saw A's lock free")
	for _, l := range leases {
		r, ok := f.active(l.JobID)
		require.True(t, ok)
		assert.Equal(t, l.Lease, r.Lease, "A still holds %s", l.JobID)
	}

	// A stops heartbeating: silent 30 s, past B's stale_job, within A's.
	stop()
	f.silence(res, 30*time.Second)
	_, err := jan.Pass(f.ctx)
	require.NoError(t, err)
	r, _ := f.active(res)
	assert.Equal(t, resLease, r.Lease, "B's janitor judges A's running job by A's stale_job")
	// (A's accepted job, claimed over 9 s ago, is past 3 of A's keepalives:
	// requeued by now or at A's death.)

	// A is dead now: lock free, silent. B finds it dead after A's dead_after.
	var dead Checked
	var acted []Acted
	for dead.Dead == nil {
		dead, acted = p.next()
	}
	require.Len(t, dead.Dead, 1)
	assert.Equal(t, "a", dead.Dead[0].Name)
	assert.GreaterOrEqual(t, dead.Now.Sub(dead.Dead[0].FreeSince), slowTimings.DeadAfter, "judged by A's dead_after")
	require.Len(t, acted, 1)
	assert.Equal(t, 1, acted[0].Released, "A's resumable running job")
	_, held := f.active(acc)
	if held {
		r, _ := f.active(acc)
		assert.Nil(t, r.Agent, "A's accepted job requeued")
	}
}
