package claim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// The tests in this file each reproduce one way the attempt lifecycle broke
// before it was one transition (issue 11's numbered scenarios).

func submitLimits(t *testing.T, st *store.Store, command, jobCtx string, l limits.Set) store.Job {
	t.Helper()
	j, _, err := st.Submit(context.Background(), store.SubmitParams{Command: command, Plugin: commands[command].Plugin, Context: json.RawMessage(jobCtx), Limits: l})
	require.NoError(t, err)
	return j
}

func eventsOf(t *testing.T, st *store.Store, id string) []store.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	return evs
}

func summary(evs []store.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s lease=%d %s", e.Kind, e.Lease, e.Message)
	}
	return b.String()
}

// A resumable plugin that crashes mid-Execute is resumed in the
// same attempt (the host restarts it), not failed and run again.
func TestResumablePluginCrashResumesTheSameAttempt(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 2, nil)
	once := filepath.Join(t.TempDir(), "crashed")
	j := submitLimits(t, st, "noop", fmt.Sprintf(`{"stdout":["before"],"checkpoint":"h1","panic_once":%q,"output":{"ok":true}}`, once),
		limits.Set{MaxRetry: 2, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond})
	done := a.waitEnd(t, st, j.ID, 30*time.Second, store.StatusSucceeded, store.StatusFailed)
	evs := eventsOf(t, st, j.ID)
	require.Equal(t, store.StatusSucceeded, done.Status, "%s; events:%s", done.Error, summary(evs))
	assert.Equal(t, 1, done.Attempt, "the same attempt")
	var resumed, retries int
	for _, e := range evs {
		if e.Kind == "resumed" && strings.Contains(e.Message, "same attempt") {
			resumed++
		}
		if e.Kind == "retry_scheduled" {
			retries++
		}
	}
	assert.Equal(t, 1, resumed, "resumed once after the crash; events:%s", summary(evs))
	assert.Zero(t, retries, "no retry ran the work again; events:%s", summary(evs))
	assert.Contains(t, logs(t, st, j.ID, "stdout"), `resumed `+j.ID+` from "h1"`, "Resume got the checkpointed handle")
}

// With a plugin that has Cleanup, a failed Execute is cleaned up before
// its retry runs, so two attempts' remote work never run side by side.
func TestFailedExecuteIsCleanedUpBeforeTheRetry(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 2, nil)
	dir := t.TempDir()
	j := submitLimits(t, st, "noop", fmt.Sprintf(`{"fail":{"class":"retriable","message":"throttled"},"cleanup_file":%q}`, filepath.Join(dir, "cleaned")),
		limits.Set{MaxRetry: 1, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond})
	// The last attempt's Cleanup runs after its failure is stored, and its
	// end is signalled once that Cleanup is recorded too.
	done := a.waitEnd(t, st, j.ID, 30*time.Second, store.StatusFailed)
	assert.Equal(t, 2, done.Attempt)
	evs := eventsOf(t, st, j.ID)
	// Order matters. Attempt 1's Cleanup is done before attempt 2 is claimed.
	var order []string
	for _, e := range evs {
		switch e.Kind {
		case "claimed", "cleanup_ok", "retry_scheduled", "failed":
			order = append(order, e.Kind)
		}
	}
	assert.Equal(t, []string{"claimed", "retry_scheduled", "cleanup_ok", "claimed", "failed", "cleanup_ok"}, order, "events:%s", summary(evs))
}

// Outcomes PostgreSQL cannot store (a NUL byte in an error, a
// NUL escape in the result) end the job truthfully instead of looping.
func TestUnstorableOutcomesEndTheJob(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 4, nil)
	nulErr := submit(t, st, "noop", `{"fail":{"class":"permanent","message":"stderr tail: bad <NUL> byte"}}`)
	nulOut := submit(t, st, "noop", `{"output":{"s":"a<NUL>b"}}`)

	j := a.waitEnd(t, st, nulErr.ID, 20*time.Second, store.StatusFailed, store.StatusSucceeded)
	assert.Equal(t, store.StatusFailed, j.Status)
	assert.Equal(t, "stderr tail: bad \uFFFD byte", j.Error, "NUL replaced, the rest kept")

	j = a.waitEnd(t, st, nulOut.ID, 20*time.Second, store.StatusFailed, store.StatusSucceeded)
	assert.Equal(t, store.StatusFailed, j.Status)
	assert.Equal(t, jobstate.Permanent, j.ErrorClass)
	assert.Contains(t, j.Error, `NUL character`)
	assert.Contains(t, j.Error, "the job had succeeded")
}

// heartbeats records when each heartbeat result arrived and what it held.
type heartbeats struct {
	mu    sync.Mutex
	at    []time.Time
	holds []map[string]bool
}

func (h *heartbeats) drain(ch <-chan store.HeartbeatResult) {
	for r := range ch {
		held := map[string]bool{}
		for _, x := range r.Held {
			held[x.JobID] = true
		}
		h.mu.Lock()
		h.at = append(h.at, time.Now())
		h.holds = append(h.holds, held)
		h.mu.Unlock()
	}
}

// maxGap is the longest wait between two heartbeats in [from, to], and
// whether every one of them renewed job id.
func (h *heartbeats) maxGap(from, to time.Time, id string) (time.Duration, int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var gap time.Duration
	prev := from
	n, renewed := 0, true
	for i, at := range h.at {
		if at.Before(from) || at.After(to) {
			continue
		}
		gap = max(gap, at.Sub(prev))
		prev = at
		n++
		renewed = renewed && h.holds[i][id]
	}
	return max(gap, to.Sub(prev)), n, renewed
}

// A slow Cleanup after a write that waited for the database ran
// on the heartbeat's goroutine and left every other job unrenewed.
func TestSlowCleanupNeverDelaysHeartbeats(t *testing.T) {
	cluster, st := privateStore(t)
	ctx := context.Background()
	beats := make(chan store.HeartbeatResult)
	hb := &heartbeats{}
	go hb.drain(beats)
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.SelfFenceAfter = time.Minute
		c.TestSignals.Heartbeat = beats
	})
	dir := t.TempDir()
	started := filepath.Join(dir, "cleanup-started")
	// It fails while the database is down. Its write waits, then its Cleanup
	// takes 3 s.
	slow := submit(t, st, "noop", fmt.Sprintf(`{"stdout":["x"],"checkpoint":"h","sleep_ms":1500,"fail":{"class":"permanent","message":"boom"},"cleanup_sleep_ms":3000,"cleanup_started_file":%q}`, started))
	other := submit(t, st, "noop", `{"wait":true,"stdout":["y"],"checkpoint":"h"}`)
	a.waitCheckpointed(t, slow.ID)
	a.waitCheckpointed(t, other.ID)
	require.NoError(t, cluster.StopServer(ctx))
	time.Sleep(2 * time.Second) // the slow job fails meanwhile
	require.NoError(t, cluster.StartServer(ctx))
	waitFile(t, started, 20*time.Second)
	from := time.Now()
	time.Sleep(2 * time.Second) // inside the 3 s Cleanup
	gap, n, renewed := hb.maxGap(from, time.Now(), other.ID)
	assert.Less(t, gap, time.Second, "heartbeats kept their 200ms keepalive while a Cleanup ran (%d beats)", n)
	assert.True(t, renewed, "every heartbeat renewed the other job")
	j := a.waitEnd(t, st, slow.ID, 20*time.Second, store.StatusFailed)
	assert.Equal(t, "boom", j.Error)
}

// The same agent claims a job it still runs (it was released behind its
// back). The old runner is stopped without writing. It can neither unregister
// the new runner nor drop its output.
func TestReclaimBySameAgentKeepsOneRunnerPerLease(t *testing.T) {
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 2, nil)
	j := submit(t, st, "noop", `{"wait":true,"stdout":["working"],"checkpoint":"h"}`)
	a.waitCheckpointed(t, j.ID)
	old := getJob(t, st, j.ID)
	require.Equal(t, store.StatusRunning, old.Status)

	// Released as the janitor releases a stale job. The only agent around
	// claims it again and resumes it.
	_, err := st.Pool().Exec(ctx, `UPDATE active_jobs SET agent_name = NULL, agent_generation = NULL, lease = lease + 1,
		released_at = now(), release_reason = 'test', resume = true WHERE job_id = $1`, j.ID)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `SELECT pg_notify('tether_jobs', 'noop')`)
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 20*time.Second, "lease_lost") // the old runner was fenced off
	assert.True(t, slices.ContainsFunc(eventsOf(t, st, j.ID), func(e store.Event) bool { return e.Kind == "lease_lost" && e.Lease == old.Lease }),
		"the old runner recorded its lease lost")
	a.waitResumed(t, j.ID)
	assert.Contains(t, logs(t, st, j.ID, "stdout"), `resumed `+j.ID+` from "h"`, "the new runner stores its output")
	now, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Greater(t, now.Lease, old.Lease+1)
	assert.Equal(t, []string{j.ID}, a.svc.Running(), "the old runner's exit left the new one registered")

	_, err = st.Cancel(ctx, j.ID, "done")
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusCanceled)
	a.waitIdle(t)
}

// On the host side, a checkpoint during a database outage waits for
// the database instead of failing the job, and its output is stored once.
func TestCheckpointWaitsThroughAnOutage(t *testing.T) {
	cluster, st := privateStore(t)
	ctx := context.Background()
	a := startAgent(t, st, "a1", 2, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.SelfFenceAfter = time.Minute
	})
	j := submit(t, st, "noop", `{"stdout":["one"],"checkpoint":"h1","sleep_ms":1000,"stdout2":["two"],"checkpoint2":"h2","output":{"ok":true}}`)
	a.waitCheckpointed(t, j.ID)
	require.NoError(t, cluster.StopServer(ctx))
	time.Sleep(3 * time.Second) // the second checkpoint comes while it is down
	require.NoError(t, cluster.StartServer(ctx))
	done := a.waitEnd(t, st, j.ID, 30*time.Second, store.StatusSucceeded, store.StatusFailed)
	require.Equal(t, store.StatusSucceeded, done.Status, done.Error)
	assert.Equal(t, "one\ntwo\n", logs(t, st, j.ID, "stdout"), "each line stored once")
}

// The self-fence fires at SelfFenceAfter of silence, on its
// own timer, not a keepalive later.
func TestSelfFenceFiresOnTime(t *testing.T) {
	cluster, st := privateStore(t)
	ctx := context.Background()
	fenced := make(chan time.Duration, 4)
	a := startAgent(t, st, "a1", 2, func(c *claim.Config) {
		c.Keepalive = time.Second
		c.SelfFenceAfter = 2 * time.Second
		c.TestSignals.SelfFenced = fenced
	})
	j := submit(t, st, "shell", `{"script":"sleep 300"}`)
	a.waitCalled(t, st, j.ID)
	require.NoError(t, cluster.StopServer(ctx))
	defer func() { require.NoError(t, cluster.StartServer(ctx)) }()
	select {
	case silent := <-fenced:
		assert.GreaterOrEqual(t, silent, 2*time.Second)
		assert.Less(t, silent, 2*time.Second+500*time.Millisecond, "fired at the self-fence point, not a keepalive (1s) later")
	case <-time.After(20 * time.Second):
		t.Fatal("the self-fence did not fire")
	}
}

// A released job that must be resumed is claimed only by an agent whose copy
// of its plugin can Resume. Here the agent runs only the shell plugin, which
// cannot. The job is never failed or executed beside its work.
func TestAgentWithoutResumeNeverClaimsAJobToResume(t *testing.T) {
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	j := submit(t, st, "shell", `{"script":"true"}`)
	// As a release leaves it. It is running, unowned, and to be resumed.
	_, err := st.Pool().Exec(ctx, `WITH a AS (UPDATE active_jobs SET lease = lease + 1, released_at = now(), resume = true WHERE job_id = $1)
		UPDATE jobs SET status = 'running', started_at = now(), attempt_started_at = now() WHERE id = $1`, j.ID)
	require.NoError(t, err)
	beats := make(chan store.HeartbeatResult)
	startAgent(t, st, "shell-only", 2, func(c *claim.Config) {
		c.Commands = map[string]claim.Command{"shell": commands["shell"]}
		c.TestSignals.Heartbeat = beats
	})
	for range 3 { // claim rounds pass meanwhile (poll 100ms, keepalive 1s)
		<-beats
	}
	got, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, got.Status)
	assert.Empty(t, got.Agent, "not claimed by an agent that cannot resume it; events:%s", summary(eventsOf(t, st, j.ID)))
}
