package janitor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/jobstate"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

type fixture struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	st   *store.Store
}

func newFixture(t *testing.T) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pool := pgtest.DB(t)
	return &fixture{t: t, ctx: ctx, pool: pool, st: store.New(pool)}
}

// agent registers name with generation gen, serving command c with the
// given plugins' capabilities.
func (f *fixture) agent(name, gen string, plugins map[string][]string) store.Holder {
	f.t.Helper()
	return f.agentServing(name, gen, []string{"c"}, plugins)
}

// submit queues a job of command cmd on plugin p.
func (f *fixture) submit(cmd, p string) string {
	f.t.Helper()
	j, _, err := f.st.Submit(f.ctx, store.SubmitParams{Command: cmd, Plugin: p, Context: json.RawMessage(`{"job":"x"}`)})
	require.NoError(f.t, err)
	return j.ID
}

// claimed submits a job and has h claim it, and mark it running if asked.
func (f *fixture) claimed(h store.Holder, cmd, p string, running bool) (string, int64) {
	f.t.Helper()
	id := f.submit(cmd, p)
	cs, err := f.st.Claim(f.ctx, h, 1, []string{cmd})
	require.NoError(f.t, err)
	require.Len(f.t, cs, 1)
	require.Equal(f.t, id, cs[0].Job.ID)
	if running {
		status, err := f.st.MarkRunning(f.ctx, id, cs[0].Lease, "test")
		require.NoError(f.t, err)
		require.Equal(f.t, store.StatusRunning, status)
	}
	return id, cs[0].Lease
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(f.ctx, sql, args...)
	require.NoError(f.t, err)
}

// silence makes a job's lease look silent for d by the database clock. Its
// own last_heartbeat and its holder's last_seen (whose heartbeats renew every
// lease it holds) are set at least d ago. The holder's other leases keep
// their claim time, so a lease claimed just now stays fresh.
func (f *fixture) silence(id string, d time.Duration) {
	f.exec(`UPDATE active_jobs SET last_heartbeat = now() - $2::float8 * interval '1 second' WHERE job_id = $1`, id, d.Seconds())
	f.exec(`UPDATE agents g SET last_seen = least(g.last_seen, now() - $2::float8 * interval '1 second')
	        FROM active_jobs a WHERE a.job_id = $1 AND g.name = a.agent_name AND g.generation = a.agent_generation`, id, d.Seconds())
}

func (f *fixture) agentSilence(name string, d time.Duration) {
	f.exec(`UPDATE agents SET last_seen = now() - $2::float8 * interval '1 second' WHERE name = $1`, name, d.Seconds())
}

func (f *fixture) job(id string) store.Job {
	f.t.Helper()
	j, err := f.st.GetJob(f.ctx, id)
	require.NoError(f.t, err)
	return j
}

func (f *fixture) events(id string, kind string) []store.Event {
	f.t.Helper()
	evs, err := f.st.Events(f.ctx, id, 0, 0)
	require.NoError(f.t, err)
	var out []store.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

type activeRow struct {
	Agent    *string
	Lease    int64
	Released bool
	Reason   *string
}

func (f *fixture) active(id string) (activeRow, bool) {
	f.t.Helper()
	var r activeRow
	err := f.pool.QueryRow(f.ctx, `SELECT agent_name, lease, released_at IS NOT NULL, release_reason FROM active_jobs WHERE job_id = $1`, id).
		Scan(&r.Agent, &r.Lease, &r.Released, &r.Reason)
	if err != nil {
		return activeRow{}, false
	}
	return r, true
}

func (f *fixture) cleanupQueued(id string) bool {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM cleanups WHERE job_id = $1`, id).Scan(&n))
	return n == 1
}

// fakePlugins is the plugin manager's unit boundary. It has capabilities and
// a Cleanup that fails a set number of times per job before it succeeds.
type fakePlugins struct {
	infos map[string]plugin.Info

	mu       sync.Mutex
	failures int // failures before success, per job
	calls    map[string][]*plugin.Job
}

func newFakePlugins(infos ...plugin.Info) *fakePlugins {
	m := map[string]plugin.Info{}
	for _, i := range infos {
		m[i.Name] = i
	}
	return &fakePlugins{infos: m, calls: map[string][]*plugin.Job{}}
}

func (p *fakePlugins) Info(name string) (plugin.Info, bool) {
	i, ok := p.infos[name]
	return i, ok
}

func (p *fakePlugins) Infos() map[string]plugin.Info { return p.infos }

func (p *fakePlugins) Cleanup(ctx context.Context, name string, job *plugin.Job) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[job.ID] = append(p.calls[job.ID], job)
	if len(p.calls[job.ID]) <= p.failures {
		return fmt.Errorf("remote API unavailable (call %d)", len(p.calls[job.ID]))
	}
	return nil
}

func (p *fakePlugins) jobCalls(id string) []*plugin.Job {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*plugin.Job(nil), p.calls[id]...)
}

var (
	resCaps = []string{plugin.CapResume, plugin.CapCleanup}
	shCaps  = []string{plugin.CapCleanup}
)

// shNoResume is the reason a running job of command c on plugin sh (no
// resume) is failed rather than released.
func shNoResume(prefix string) string {
	return prefix + ` (plugin "sh" does not declare resume on any live agent serving command "c", so the job cannot be resumed)`
}

func TestPassAppliesEachActionOnce(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"res": resCaps, "sh": shCaps})
	dead := f.agent("dead", "dead-g1", map[string][]string{"res": resCaps, "sh": shCaps, "gone": resCaps})
	old := f.agent("rest", "rest-g1", map[string][]string{"res": resCaps, "sh": shCaps})

	staleRes, staleResLease := f.claimed(dead, "c", "res", true)
	staleSh, _ := f.claimed(dead, "c", "sh", true)
	offlineAcc, _ := f.claimed(dead, "c", "res", false)
	restartedRes, _ := f.claimed(old, "c", "res", true)
	restartedSh, _ := f.claimed(old, "c", "sh", true)
	restartedAcc, _ := f.claimed(old, "c", "sh", false)
	fresh, freshLease := f.claimed(live, "c", "sh", true)
	offlineRunning, _ := f.claimed(dead, "c", "sh", true) // silent past offline_after, not stale_job
	awol, _ := f.claimed(dead, "c", "res", true)
	releasedRecent, _ := f.claimed(dead, "c", "res", true)
	canceling, _ := f.claimed(dead, "c", "sh", true)
	pluginGone, _ := f.claimed(dead, "c", "gone", true)
	finished, finishedLease := f.claimed(live, "c", "sh", true)

	for _, id := range []string{staleRes, staleSh, awol, releasedRecent, canceling, pluginGone} {
		f.silence(id, 200*time.Second)
	}
	f.silence(offlineAcc, 30*time.Second)
	f.silence(offlineRunning, 30*time.Second)
	f.agentSilence("dead", 10*time.Minute) // so its plugins no longer count as loaded
	f.agent("rest", "rest-g2", map[string][]string{"res": resCaps, "sh": shCaps})
	f.exec(`UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL, lease = lease + 1, resume = true,
	        released_at = now() - interval '2 hours', release_reason = 'test' WHERE job_id = $1`, awol)
	f.exec(`UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL, lease = lease + 1, resume = true,
	        released_at = now() - interval '10 minutes', release_reason = 'test' WHERE job_id = $1`, releasedRecent)
	_, err := f.st.Cancel(f.ctx, canceling, "")
	require.NoError(t, err)
	require.NoError(t, f.st.Finish(f.ctx, live, finished, finishedLease, store.Outcome{Status: store.StatusSucceeded}))

	m := metrics.New()
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: live, Metrics: m})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 9, n, "actions applied")

	// Released. It is claimable, still running, with its lease bumped and its
	// reason recorded.
	r, ok := f.active(staleRes)
	require.True(t, ok)
	assert.Nil(t, r.Agent)
	assert.Equal(t, staleResLease+1, r.Lease)
	assert.True(t, r.Released)
	require.NotNil(t, r.Reason)
	assert.Regexp(t, `^stale for 2\d\ds$`, *r.Reason)
	assert.Equal(t, store.StatusRunning, f.job(staleRes).Status)
	rel := f.events(staleRes, "released")
	require.Len(t, rel, 1)
	assert.Regexp(t, `^released: stale for 2\d\ds \(was held by dead\)$`, rel[0].Message)
	assert.Equal(t, "live", rel[0].Agent)
	assert.Equal(t, staleResLease+1, rel[0].Lease)
	assert.False(t, f.cleanupQueued(staleRes), "a released job is not cleaned up")
	// The old holder's fenced writes are refused.
	assert.ErrorIs(t, f.st.Finish(f.ctx, dead, staleRes, staleResLease, store.Outcome{Status: store.StatusSucceeded}), store.ErrLeaseLost)

	// Failed, not resumable. It has the awol message, its Cleanup is queued
	// and its active row is gone.
	j := f.job(staleSh)
	assert.Equal(t, store.StatusFailed, j.Status)
	assert.Regexp(t, `^awol: agent dead silent for 2\d\ds \(plugin "sh" does not declare resume on any live agent serving command "c", so the job cannot be resumed\)$`, j.Error)
	assert.Equal(t, jobstate.Retriable, j.ErrorClass)
	assert.NotNil(t, j.FinishedAt)
	_, ok = f.active(staleSh)
	assert.False(t, ok)
	assert.True(t, f.cleanupQueued(staleSh))
	assert.Len(t, f.events(staleSh, "failed"), 1)

	// Requeued. It is queued, unowned and claimable again.
	for _, id := range []string{offlineAcc, restartedAcc} {
		assert.Equal(t, store.StatusQueued, f.job(id).Status, id)
		r, ok := f.active(id)
		require.True(t, ok)
		assert.Nil(t, r.Agent)
		assert.Len(t, f.events(id, "requeued"), 1)
		assert.False(t, f.cleanupQueued(id))
	}
	assert.Contains(t, f.events(offlineAcc, "requeued")[0].Message, "agent dead offline, silent for 30s")
	assert.Contains(t, f.events(restartedAcc, "requeued")[0].Message, "agent rest restarted")

	// Restarted owner. It is acted on at once although its heartbeat is
	// fresh.
	r, ok = f.active(restartedRes)
	require.True(t, ok)
	require.NotNil(t, r.Reason)
	assert.Equal(t, "agent restarted", *r.Reason)
	assert.Equal(t, store.StatusFailed, f.job(restartedSh).Status)
	assert.Equal(t, shNoResume("agent restarted"), f.job(restartedSh).Error)
	assert.True(t, f.cleanupQueued(restartedSh))

	// Fresh owner and merely offline running owner. Both are untouched.
	r, ok = f.active(fresh)
	require.True(t, ok)
	require.NotNil(t, r.Agent)
	assert.Equal(t, freshLease, r.Lease)
	r, ok = f.active(offlineRunning)
	require.True(t, ok)
	assert.NotNil(t, r.Agent)

	// Released past awol_timeout means failed + Cleanup. A recent release is
	// untouched.
	assert.Equal(t, store.StatusFailed, f.job(awol).Status)
	assert.Equal(t, "awol: not resumed within awol_timeout (1h0m0s)", f.job(awol).Error)
	assert.True(t, f.cleanupQueued(awol))
	assert.Equal(t, store.StatusRunning, f.job(releasedRecent).Status)
	_, ok = f.active(releasedRecent)
	assert.True(t, ok)

	// Canceling with a silent owner. It is canceled, then Cleanup runs.
	assert.Equal(t, store.StatusCanceled, f.job(canceling).Status)
	assert.Len(t, f.events(canceling, "canceled"), 1)
	assert.True(t, f.cleanupQueued(canceling))

	// Plugin no live agent loads. It is failed, not released.
	assert.Equal(t, store.StatusFailed, f.job(pluginGone).Status)
	assert.Contains(t, f.job(pluginGone).Error, `plugin "gone" is not loaded by any live agent`)

	// Terminal jobs are untouched.
	assert.Equal(t, store.StatusSucceeded, f.job(finished).Status)
	assert.Empty(t, f.events(finished, "failed"))

	// Metrics.
	assert.Equal(t, 2.0, metricValue(t, m, "tether_janitor_actions_total", "release"))
	assert.Equal(t, 3.0, metricValue(t, m, "tether_janitor_actions_total", "fail"))
	assert.Equal(t, 2.0, metricValue(t, m, "tether_janitor_actions_total", "requeue"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_janitor_actions_total", "fail_awol"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_janitor_actions_total", "cancel"))
	assert.Equal(t, 5.0, metricValue(t, m, "tether_cleanups_pending", ""))
	// By cause. These are the stale owner's release and the restarted
	// owner's.
	actions, err := m.Registry().Gather()
	require.NoError(t, err)
	byCause := map[string]float64{}
	for _, mf := range actions {
		if mf.GetName() != "tether_janitor_actions_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			byCause[mt.GetLabel()[0].GetValue()+"/"+mt.GetLabel()[1].GetValue()] = mt.GetCounter().GetValue()
		}
	}
	assert.Equal(t, 1.0, byCause["release/agent_silent"], "%v", byCause)
	assert.Equal(t, 1.0, byCause["release/agent_restarted"], "%v", byCause)
	assert.Equal(t, 1.0, byCause["fail_awol/timeout"], "%v", byCause)
	assert.Equal(t, 1.0, byCause["cancel/canceled"], "%v", byCause)
	assert.Greater(t, metricValue(t, m, "tether_cleanups_oldest_seconds", ""), 0.0, "five Cleanups are queued")

	// A second pass finds nothing more to do.
	n, err = svc.Pass(f.ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Len(t, f.events(staleRes, "released"), 1)
}

func TestConcurrentJanitorsActOnEachJobOnce(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"res": resCaps, "sh": shCaps})
	dead := f.agent("dead", "dead-g1", nil)
	const n = 200
	for i := range n {
		p := "res"
		if i%2 == 1 {
			p = "sh"
		}
		f.submit("c", p)
	}
	cs, err := f.st.Claim(f.ctx, dead, n, []string{"c"})
	require.NoError(t, err)
	require.Len(t, cs, n)
	for _, c := range cs {
		_, err := f.st.MarkRunning(f.ctx, c.Job.ID, c.Lease, "test")
		require.NoError(t, err)
	}
	f.exec(`UPDATE active_jobs SET last_heartbeat = now() - interval '10 minutes'`)
	f.agentSilence("dead", 10*time.Minute)

	other := store.Holder{Name: "live2", Generation: "live2-g1"}
	var total sync.WaitGroup
	counts := make([]int, 2)
	for i, h := range []store.Holder{live, other} {
		svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: h, BatchSize: 7})
		total.Go(func() {
			c, err := svc.Pass(f.ctx)
			assert.NoError(t, err)
			counts[i] = c
		})
	}
	total.Wait()
	assert.Equal(t, n, counts[0]+counts[1], "every job settled by exactly one pass")

	var perJob []int
	rows, err := f.pool.Query(f.ctx, `SELECT count(e.id) FROM jobs j LEFT JOIN job_timeline e
	    ON e.job_id = j.id AND e.kind IN ('released', 'failed') GROUP BY j.id`)
	require.NoError(t, err)
	for rows.Next() {
		var c int
		require.NoError(t, rows.Scan(&c))
		perJob = append(perJob, c)
	}
	require.NoError(t, rows.Err())
	require.Len(t, perJob, n)
	for _, c := range perJob {
		require.Equal(t, 1, c, "one janitor action per job")
	}
	var queued int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM cleanups`).Scan(&queued))
	assert.Equal(t, n/2, queued, "one Cleanup per failed shell job")
}

func TestCleanupRetriesWithBackoffUntilItSucceeds(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"sh": shCaps})
	dead := f.agent("dead", "dead-g1", nil)
	id, _ := f.claimed(dead, "c", "sh", true)
	f.silence(id, 10*time.Minute)

	plugins := newFakePlugins(plugin.Info{Name: "sh", Capabilities: shCaps})
	plugins.failures = 3
	m := metrics.New()
	svc := New(f.pool, plugins, Config{
		Logger: quiet, Holder: live, Metrics: m, CleanupBackoffMin: time.Second, CleanupBackoffMax: 3 * time.Second,
		Commands: map[string]json.RawMessage{"c": json.RawMessage(`{"default":true,"job":"default"}`)},
	})
	n, err := svc.Pass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Each failure keeps the row, visible with its error, due after a
	// doubling (capped) wait.
	for attempt, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		got, err := svc.CleanupPass(f.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, got)
		var wait float64
		var attempts int
		var lastErr string
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT extract(epoch FROM next_at - now())::float8, attempts, last_error FROM cleanups WHERE job_id = $1`, id).
			Scan(&wait, &attempts, &lastErr))
		assert.Equal(t, attempt+1, attempts)
		assert.InDelta(t, want.Seconds(), wait, 0.5)
		assert.Contains(t, lastErr, fmt.Sprintf("remote API unavailable (call %d)", attempt+1))
		list, err := f.st.ListCleanups(f.ctx, "", 10)
		require.NoError(t, err)
		require.Len(t, list, 1)
		assert.Equal(t, id, list[0].JobID)
		assert.Equal(t, attempt+1, list[0].Attempts)

		// Not due yet, so nothing is attempted.
		got, err = svc.CleanupPass(f.ctx)
		require.NoError(t, err)
		assert.Zero(t, got)
		f.exec(`UPDATE cleanups SET next_at = now() WHERE job_id = $1`, id)
	}
	got, err := svc.CleanupPass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, got)
	assert.False(t, f.cleanupQueued(id), "a successful Cleanup leaves the queue")

	failed := f.events(id, "cleanup_failed")
	require.Len(t, failed, 3)
	for i, e := range failed {
		assert.Contains(t, e.Message, fmt.Sprintf("attempt %d: ", i+1))
		assert.Equal(t, "live", e.Agent)
	}
	ok := f.events(id, "cleanup_ok")
	require.Len(t, ok, 1)
	assert.Equal(t, "attempt 4", ok[0].Message)
	// Cleanup ran only after the terminal status, with the merged context.
	calls := plugins.jobCalls(id)
	require.Len(t, calls, 4)
	assert.Equal(t, "c", calls[0].Command)
	assert.JSONEq(t, `{"default":true,"job":"x"}`, string(calls[0].Context))
	assert.Equal(t, 3.0, metricValue(t, m, "tether_cleanup_attempts_total", "failed"))
	assert.Equal(t, 1.0, metricValue(t, m, "tether_cleanup_attempts_total", "ok"))
}

func TestCleanupClaimLapsesAndOtherPluginsWait(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", nil)
	done := f.submit("c", "sh")
	other := f.submit("c", "ecs")
	bare := f.submit("c", "bare")
	for _, id := range []string{done, other, bare} {
		require.NoError(t, f.st.EnqueueCleanup(f.ctx, id, "test"))
	}
	require.NoError(t, f.st.EnqueueCleanup(f.ctx, done, "again"), "enqueueing twice keeps one row")

	// A worker died holding a claim. Its claim lapses.
	claimed, err := f.st.ClaimCleanups(f.ctx, "crashed", []string{"sh"}, 10, 200*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	plugins := newFakePlugins(plugin.Info{Name: "sh", Capabilities: shCaps}, plugin.Info{Name: "bare"})
	svc := New(f.pool, plugins, Config{Logger: quiet, Holder: live})
	n, err := svc.CleanupPass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the plugin without Cleanup: sh is claimed by the crashed worker")
	assert.False(t, f.cleanupQueued(bare))
	assert.Len(t, f.events(bare, "cleanup_skipped"), 1)

	// The crashed worker's 200 ms claim lapses. It is a real duration, not a
	// poll.
	time.Sleep(200 * time.Millisecond)
	n, err = svc.CleanupPass(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the lapsed claim of sh is taken over")
	assert.False(t, f.cleanupQueued(done))
	assert.Len(t, plugins.jobCalls(done), 1)
	assert.Equal(t, "attempt 2", f.events(done, "cleanup_ok")[0].Message)

	// A plugin this agent does not load stays queued and visible.
	assert.True(t, f.cleanupQueued(other))
	list, err := f.st.ListCleanups(f.ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, other, list[0].JobID)
	assert.Equal(t, "ecs", list[0].Plugin)
}

func TestReleasePrevious(t *testing.T) {
	f := newFixture(t)
	g1 := f.agent("a", "a-g1", map[string][]string{"res": resCaps, "sh": shCaps})
	acc, _ := f.claimed(g1, "c", "res", false)
	res, resLease := f.claimed(g1, "c", "res", true)
	sh, _ := f.claimed(g1, "c", "sh", true)
	canceling, _ := f.claimed(g1, "c", "sh", true)
	_, err := f.st.Cancel(f.ctx, canceling, "")
	require.NoError(t, err)
	otherAgent := f.agent("b", "b-g1", nil)
	others, otherLease := f.claimed(otherAgent, "c", "sh", true)

	g2 := store.Holder{Name: "a", Generation: "a-g2"}
	caps := func(name string) (plugin.Info, bool) {
		switch name {
		case "res":
			return plugin.Info{Name: "res", Capabilities: resCaps}, true
		case "sh":
			return plugin.Info{Name: "sh", Capabilities: shCaps}, true
		}
		return plugin.Info{}, false
	}
	n, err := ReleasePrevious(f.ctx, f.pool, g2, caps)
	require.NoError(t, err)
	assert.Equal(t, 4, n)

	assert.Equal(t, store.StatusQueued, f.job(acc).Status)
	assert.Len(t, f.events(acc, "requeued"), 1)

	r, ok := f.active(res)
	require.True(t, ok)
	assert.Nil(t, r.Agent)
	assert.Equal(t, resLease+1, r.Lease)
	require.NotNil(t, r.Reason)
	assert.Equal(t, "agent restarted", *r.Reason)
	assert.Equal(t, store.StatusRunning, f.job(res).Status)

	assert.Equal(t, store.StatusFailed, f.job(sh).Status)
	assert.Equal(t, shNoResume("agent restarted"), f.job(sh).Error)
	assert.True(t, f.cleanupQueued(sh))

	assert.Equal(t, store.StatusCanceled, f.job(canceling).Status)
	assert.True(t, f.cleanupQueued(canceling))

	r, ok = f.active(others)
	require.True(t, ok)
	assert.Equal(t, otherLease, r.Lease, "another agent's job is untouched")

	// The new generation's own jobs are not touched. A second call is a
	// no-op.
	mine, mineLease := f.claimed(g2, "c2", "sh", true)
	n, err = ReleasePrevious(f.ctx, f.pool, g2, caps)
	require.NoError(t, err)
	assert.Zero(t, n)
	r, ok = f.active(mine)
	require.True(t, ok)
	assert.Equal(t, mineLease, r.Lease)
}

func TestRunStopsOnCancel(t *testing.T) {
	f := newFixture(t)
	live := f.agent("live", "live-g1", map[string][]string{"res": resCaps})
	dead := f.agent("dead", "dead-g1", nil)
	id, _ := f.claimed(dead, "c", "res", true)
	f.silence(id, time.Hour)

	ctx, cancel := context.WithCancel(f.ctx)
	passed := make(chan Passed)
	svc := New(f.pool, newFakePlugins(), Config{Logger: quiet, Holder: live, CleanInterval: 20 * time.Millisecond,
		TestSignals: TestSignals{Passed: passed}})
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	p := await(t, passed, 5*time.Second, "Run's first janitor pass")
	require.NoError(t, p.Err)
	assert.Equal(t, 1, p.Actions)
	r, ok := f.active(id)
	require.True(t, ok)
	assert.Nil(t, r.Agent, "Run releases the stale job")
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// metricValue reads a counter or gauge (with label value lv, or unlabelled)
// from the agent's registry, as a scrape would.
func metricValue(t *testing.T, m *metrics.Metrics, name, lv string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		// The sum over the series whose first label is lv (the actions
		// counter also has a cause label).
		var sum float64
		found := false
		for _, mt := range mf.GetMetric() {
			if lv != "" && (len(mt.GetLabel()) == 0 || mt.GetLabel()[0].GetValue() != lv) {
				continue
			}
			found = true
			if mt.GetCounter() != nil {
				sum += mt.GetCounter().GetValue()
			} else {
				sum += mt.GetGauge().GetValue()
			}
		}
		if found {
			return sum
		}
	}
	t.Fatalf("metric %s{%s} not registered", name, lv)
	return 0
}
