package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// shutdownError is what a non-resumable job cut off by a drain fails with.
const shutdownError = "agent shut down before the job finished"

// handoffMessage is the released event's message when name drains.
func handoffMessage(name string) string { return "handoff: agent " + name + " draining" }

// drainTimings make stale_job far longer than any test. A job resumed
// quickly can only have been handed off, never released by the janitor.
func drainTimings() timings {
	tm := fast()
	tm.Keepalive = 500 * time.Millisecond
	tm.StaleJob = 60 * time.Second
	tm.OfflineAfter = 3 * time.Second
	tm.CleanInterval = time.Second
	tm.AWOLTimeout = 120 * time.Second
	tm.KillGrace = time.Second
	return tm
}

// drainEnv overrides the harness's shutdown_timeout (and handoff mode, if set).
func drainEnv(shutdownTimeout time.Duration, handoff string) []string {
	env := []string{"TETHER_AGENT_SHUTDOWN_TIMEOUT=" + shutdownTimeout.String()}
	if handoff != "" {
		env = append(env, "TETHER_DRAIN_HANDOFF="+handoff)
	}
	return env
}

// handoffGap is the longest a handed-off job may wait to be resumed: a
// couple of claim intervals, nowhere near stale_job.
func handoffGap(tm timings) time.Duration { return 2*tm.PollInterval + time.Second }

// handoffs pairs each of the job's handoff releases by agent name with the
// first resumed event after it (zero if none).
func handoffs(evs []event, name string) (pairs [][2]event) {
	for i, e := range evs {
		if e.Kind != "released" || e.Message != handoffMessage(name) {
			continue
		}
		var next event
		for _, f := range evs[i+1:] {
			if f.Kind == "resumed" {
				next = f
				break
			}
		}
		pairs = append(pairs, [2]event{e, next})
	}
	return pairs
}

func (h *harness) agentState(ctx context.Context, name string) string {
	h.t.Helper()
	var state string
	require.NoError(h.t, h.pool.QueryRow(ctx, `SELECT state FROM agents WHERE name = $1`, name).Scan(&state))
	return state
}

// assertHandedOff checks that the job was released by from's drain, at once,
// and resumed by to within handoffGap, its work started once.
func (h *harness) assertHandedOff(ctx context.Context, id string, from, to *agentProc, signaledAt time.Time) {
	h.t.Helper()
	evs := h.events(ctx, id)
	pairs := handoffs(evs, from.name)
	if !assert.Len(h.t, pairs, 1, "job %s: one handoff by %s expected: %s", id, from.name, h.eventSummary(ctx, id)) {
		return
	}
	rel, res := pairs[0][0], pairs[0][1]
	assert.Less(h.t, rel.At.Sub(signaledAt), 2*time.Second, "job %s: released %s after the signal; immediate handoff expected", id, rel.At.Sub(signaledAt))
	if assert.NotZero(h.t, res.ID, "job %s: never resumed after the handoff: %s", id, h.eventSummary(ctx, id)) {
		assert.Equal(h.t, to.gen, res.Generation, "job %s: resumed by the wrong agent: %s", id, h.eventSummary(ctx, id))
		assert.Less(h.t, res.At.Sub(rel.At), handoffGap(h.tm), "job %s: handoff → resume gap", id)
	}
	assert.Equal(h.t, 1, h.startCount(id), "job %s: its work must be started exactly once", id)
}

// SIGTERM an agent holding 5 running resumable jobs and 2 shell jobs that
// end before shutdown_timeout, with a second agent up. The resumable jobs
// are handed off at once and resumed by the second agent, the shell jobs
// run to success on the draining agent, and it exits 0.
func TestDrainHandsOffResumableAndWaitsForShell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), drainTimings())

	a := h.startAgent(ctx, "drain-a", drainEnv(20*time.Second, "")...)
	res, sh := h.submitMix(ctx, 5, 2, 10*time.Second, 6*time.Second)
	h.waitStarted(ctx, res, sh)
	b := h.startAgent(ctx, "drain-b")

	signaledAt := h.dbNow(ctx)
	h.signal(a, syscall.SIGTERM)
	code := h.waitExit(a, 20*time.Second+10*time.Second)
	assert.Equal(t, 0, code, "a drained agent exits 0")
	assert.Equal(t, "stopped", h.agentState(ctx, a.name))

	all := append(append([]string(nil), res...), sh...)
	h.waitTerminal(ctx, all, 30*time.Second)
	for _, id := range res {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "resumable job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		final := h.checkTimeline(ctx, id)
		assert.Equal(t, b.gen, final.Generation, "resumable job %s must finish on the second agent", id)
		h.assertHandedOff(ctx, id, a, b, signaledAt)
	}
	for _, id := range sh {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusSucceeded, j.Status, "shell job %s: %s; events: %s", id, j.Error, h.eventSummary(ctx, id))
		final := h.checkTimeline(ctx, id)
		assert.Equal(t, a.gen, final.Generation, "shell job %s must finish on the draining agent", id)
		assert.True(t, final.At.After(signaledAt), "shell job %s ended before the signal; the drain did not wait for anything", id)
		for _, e := range h.events(ctx, id) {
			assert.NotEqual(t, "released", e.Kind, "shell job %s must not be released: %s", id, h.eventSummary(ctx, id))
		}
		if pgid := h.shellPGID(id); assert.Positive(t, pgid) {
			assert.Empty(t, groupMembers(pgid), "shell job %s: process group %d", id, pgid)
		}
	}
}

// Shell jobs that outlive shutdown_timeout are cancelled through the plugin
// at the deadline, recorded failed (retriable) with the shutdown message,
// cleaned up, and their process groups are gone. The agent still exits 0,
// within shutdown_timeout + kill_grace + a few seconds.
func TestDrainCancelsShellAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), drainTimings())
	const shutdownTimeout, killGrace = 2 * time.Second, time.Second // kill_grace: drainTimings' shell config

	a := h.startAgent(ctx, "deadline-a", drainEnv(shutdownTimeout, "")...)
	_, sh := h.submitMix(ctx, 0, 2, 0, 300*time.Second)
	// One that ignores SIGTERM (so does its sleep: ignored signals are
	// inherited). Only the SIGKILL after kill_grace ends it.
	stubborn := h.submitShellScript(ctx, fmt.Sprintf(`echo $$ > %q/"$TETHER_JOB_ID".pid; trap '' TERM; sleep 300`, h.pidDir))
	sh = append(sh, stubborn)
	h.waitStarted(ctx, nil, sh)

	dbSignaledAt := h.dbNow(ctx)
	signaledAt := time.Now()
	h.signal(a, syscall.SIGTERM)
	code := h.waitExit(a, shutdownTimeout+killGrace+5*time.Second)
	took := time.Since(signaledAt)
	t.Logf("agent exited %s after SIGTERM (shutdown_timeout %s)", took, shutdownTimeout)
	assert.Equal(t, 0, code, "a drained agent exits 0")
	assert.GreaterOrEqual(t, took, shutdownTimeout+killGrace, "the agent must wait shutdown_timeout, then kill_grace for the job that ignores SIGTERM")
	assert.Equal(t, "stopped", h.agentState(ctx, a.name))

	h.waitTerminal(ctx, sh, 5*time.Second)
	for _, id := range sh {
		j := h.job(ctx, id)
		assert.Equal(t, store.StatusFailed, j.Status, "shell job %s; events: %s", id, h.eventSummary(ctx, id))
		assert.Equal(t, shutdownError, j.Error, "shell job %s", id)
		assert.Equal(t, jobstate.Retriable, j.ErrorClass, "shell job %s", id)
		final := h.checkTimeline(ctx, id)
		assert.Equal(t, a.gen, final.Generation)
		if id == stubborn {
			// SIGTERM at the deadline, SIGKILL kill_grace later. The job
			// cannot have ended, or been recorded, any sooner.
			assert.GreaterOrEqual(t, final.At.Sub(dbSignaledAt), shutdownTimeout+killGrace,
				"the job ignoring SIGTERM was recorded %s after the signal; its process group must get kill_grace (%s) between SIGTERM and SIGKILL: %s",
				final.At.Sub(dbSignaledAt), killGrace, h.eventSummary(ctx, id))
		}
		var cleaned bool
		for _, e := range h.events(ctx, id) {
			if e.Kind == "cleanup_ok" && e.ID > final.ID {
				cleaned = true
			}
		}
		assert.True(t, cleaned, "shell job %s: Cleanup must run after the failure: %s", id, h.eventSummary(ctx, id))
		if pgid := h.shellPGID(id); assert.Positive(t, pgid) {
			assert.Empty(t, groupMembers(pgid), "shell job %s: process group %d must be gone", id, pgid)
		}
	}
}

// A second SIGTERM during the wait skips it. The long shell job is cancelled
// at once and failed with the shutdown message, the resumable job is handed
// off, and the agent exits 0 promptly although shutdown_timeout is 60 s.
func TestDrainSecondSignalSkipsWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), drainTimings())
	const killGrace = time.Second

	a := h.startAgent(ctx, "twice-a", drainEnv(60*time.Second, "")...)
	res, sh := h.submitMix(ctx, 1, 1, 20*time.Second, 300*time.Second)
	h.waitStarted(ctx, res, sh)
	b := h.startAgent(ctx, "twice-b")

	signaledAt := h.dbNow(ctx)
	h.signal(a, syscall.SIGTERM)
	sleep(ctx, time.Second)
	require.False(t, a.exited(), "the agent must still be waiting for its shell job after 1s:\n%s", a.out.tail(4000))
	assert.Equal(t, "draining", h.agentState(ctx, a.name))
	second := time.Now()
	h.signal(a, syscall.SIGTERM)
	code := h.waitExit(a, killGrace+5*time.Second)
	t.Logf("agent exited %s after the second SIGTERM", time.Since(second))
	assert.Equal(t, 0, code, "exit code after a second signal")
	assert.Equal(t, "stopped", h.agentState(ctx, a.name))

	h.waitTerminal(ctx, sh, 5*time.Second)
	j := h.job(ctx, sh[0])
	assert.Equal(t, store.StatusFailed, j.Status, "events: %s", h.eventSummary(ctx, sh[0]))
	assert.Equal(t, shutdownError, j.Error)
	assert.Equal(t, jobstate.Retriable, j.ErrorClass)
	h.checkTimeline(ctx, sh[0])
	if pgid := h.shellPGID(sh[0]); assert.Positive(t, pgid) {
		assert.Empty(t, groupMembers(pgid), "shell process group %d must be gone", pgid)
	}

	h.waitEvent(ctx, res[0], "resumed", 5*time.Second)
	h.assertHandedOff(ctx, res[0], a, b, signaledAt)
}

// With drain.handoff: deadline the draining agent keeps watching its
// resumable job until the wait ends. A second signal ends the wait, and the
// job is still handed off (not left for stale_job).
func TestDrainDeadlineHandoffOnSecondSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), drainTimings())

	a := h.startAgent(ctx, "deadline-mode-a", drainEnv(60*time.Second, "deadline")...)
	res, sh := h.submitMix(ctx, 1, 1, 20*time.Second, 300*time.Second)
	h.waitStarted(ctx, res, sh)
	b := h.startAgent(ctx, "deadline-mode-b")

	h.signal(a, syscall.SIGTERM)
	sleep(ctx, 1500*time.Millisecond)
	require.False(t, a.exited(), "the agent must still be waiting for its shell job:\n%s", a.out.tail(4000))
	for _, e := range h.events(ctx, res[0]) {
		require.NotEqual(t, "released", e.Kind, "handoff: deadline must keep the job until the wait ends: %s", h.eventSummary(ctx, res[0]))
	}
	second := h.dbNow(ctx)
	h.signal(a, syscall.SIGTERM)
	assert.Equal(t, 0, h.waitExit(a, 8*time.Second))

	h.waitEvent(ctx, res[0], "resumed", 5*time.Second)
	h.assertHandedOff(ctx, res[0], a, b, second)
	h.waitTerminal(ctx, sh, 5*time.Second)
	assert.Equal(t, shutdownError, h.job(ctx, sh[0]).Error)
}

// During the drain wait the API keeps serving. /readyz answers 503 saying
// draining, the agent list shows it draining. A followed log in flight when
// the agent exits ends cleanly, and afterwards the port is closed.
func TestDrainHTTPGracefulShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), drainTimings())
	const shutdownTimeout, killGrace = 4 * time.Second, time.Second

	a := h.startAgent(ctx, "http-a", drainEnv(shutdownTimeout, "")...)
	addr := h.apiAddr(ctx, a)
	base := "http://" + addr
	res, sh := h.submitMix(ctx, 1, 1, 60*time.Second, 300*time.Second)
	h.waitStarted(ctx, res, sh)
	h.startAgent(ctx, "http-b")

	resp := httpGet(ctx, t, base+"/readyz")
	require.Equal(t, http.StatusOK, resp.code, "ready before the signal: %s", resp.body)

	// Follow the resumable job's log. That job lives on (on the other agent)
	// after this agent exits, so only the server's shutdown can end the stream.
	type followed struct {
		body  string
		err   error
		endAt time.Time
	}
	followDone := make(chan followed, 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/jobs/"+res[0]+"/logs?follow=true", nil)
	require.NoError(t, err)
	followResp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, followResp.StatusCode)
	go func() {
		defer followResp.Body.Close()
		b, err := io.ReadAll(followResp.Body)
		followDone <- followed{body: string(b), err: err, endAt: time.Now()}
	}()

	signaledAt := time.Now()
	h.signal(a, syscall.SIGTERM)

	// Inside the wait (the shell job holds it open for shutdown_timeout).
	deadline := time.Now().Add(shutdownTimeout / 2)
	var ready httpResult
	for {
		ready = httpGet(ctx, t, base+"/readyz")
		if ready.code != http.StatusOK || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 20*time.Millisecond)
	}
	assert.Equal(t, http.StatusServiceUnavailable, ready.code, "/readyz while draining: %s", ready.body)
	assert.Contains(t, ready.body, "draining", "/readyz while draining")

	// /readyz turns first. The row is marked draining right after.
	var agents httpResult
	states := map[string]string{}
	for deadline := time.Now().Add(time.Second); ; {
		agents = httpGet(ctx, t, base+"/api/v1/agents")
		require.Equal(t, http.StatusOK, agents.code, "the API keeps serving during the drain: %s", agents.body)
		var list struct {
			Agents []store.Agent `json:"agents"`
		}
		require.NoError(t, json.Unmarshal([]byte(agents.body), &list), agents.body)
		for _, ag := range list.Agents {
			states[ag.Name] = ag.State
		}
		if states[a.name] != "running" || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 20*time.Millisecond)
	}
	assert.Equal(t, "draining", states[a.name], "GET /api/v1/agents during the drain: %s", agents.body)
	assert.Equal(t, "running", states["http-b"], "GET /api/v1/agents during the drain: %s", agents.body)

	out, err := exec.CommandContext(ctx, bins.Tether, "agents", "--server", base).CombinedOutput()
	require.NoError(t, err, "tether agents: %s", out)
	assert.Regexp(t, `(?m)^http-a\b.*\bdraining\b`, string(out), "tether agents during the drain")
	require.False(t, a.exited(), "the agent exited before the checks ran (took %s)", time.Since(signaledAt))

	code := h.waitExit(a, shutdownTimeout+killGrace+5*time.Second)
	exitedAt := time.Now()
	assert.Equal(t, 0, code)

	select {
	case f := <-followDone:
		assert.NoError(t, f.err, "a followed log must end cleanly (EOF) when the agent shuts down; got %d bytes", len(f.body))
		assert.False(t, f.endAt.After(exitedAt.Add(time.Second)), "the followed log ended %s after the agent exited", f.endAt.Sub(exitedAt))
	case <-time.After(5 * time.Second):
		t.Fatal("a followed log still hangs 5s after the agent exited")
	}

	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
	}
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "the API port must be closed after exit, dial: %v", err)
}

// submitShellScript submits a shell job running script.
func (h *harness) submitShellScript(ctx context.Context, script string) string {
	h.t.Helper()
	c, err := json.Marshal(map[string]any{"script": script})
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "shell", Plugin: "shell", Context: c, Submitter: "e2e"})
	require.NoError(h.t, err)
	return j.ID
}

type httpResult struct {
	code int
	body string
}

func httpGet(ctx context.Context, t *testing.T, url string) httpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "GET %s", url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "GET %s: reading body", url)
	return httpResult{code: resp.StatusCode, body: strings.TrimSpace(string(b))}
}
