package e2e

// Job lifecycle levers with real agent processes: retries with backoff,
// max_retry, classes that are never retried, pending_timeout,
// active_timeout, retention, stamped limits, validation and operator
// requeue.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// lifecyclePlugins is a plugin directory with the e2e shell plugin and the
// noop test plugin (which fails with any error class its context asks for).
// It is separate from bins.PluginDir so other tests' agents never see a
// plugin being written.
var lifecyclePlugins = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tether-e2e-lifecycle-")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := bintest.Build(ctx, dir, map[string]string{"noop": bintest.Noop}); err != nil {
		return "", err
	}
	for _, name := range []string{"shell", "resumable"} {
		if err := os.Symlink(bintest.PluginPath(bins.PluginDir, name), bintest.PluginPath(dir, name)); err != nil {
			return "", err
		}
	}
	return dir, nil
})

// newLifecycleHarness is a harness whose config adds commands (YAML indented
// two spaces) and, with noop, the noop plugin.
func newLifecycleHarness(t *testing.T, commands string, noop bool) *harness {
	t.Helper()
	h := newHarnessWith(t, pgtest.URL(t), fast(), "", commands)
	if noop {
		dir, err := lifecyclePlugins()
		require.NoError(t, err)
		b, err := os.ReadFile(h.cfgPath)
		require.NoError(t, err)
		cfg := strings.Replace(string(b), fmt.Sprintf("plugin_dir: %q", bins.PluginDir), fmt.Sprintf("plugin_dir: %q", dir), 1)
		require.NotEqual(t, string(b), cfg)
		require.NoError(t, os.WriteFile(h.cfgPath, []byte(cfg), 0o600))
	}
	return h
}

func (h *harness) client(ctx context.Context, a *agentProc) *client.Client {
	h.t.Helper()
	c, err := client.New("http://" + h.apiAddr(ctx, a))
	require.NoError(h.t, err)
	return c
}

func kindsOf(evs []event, kind string) []event {
	var out []event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// A shell job that is killed by its active_timeout on attempts 1 and 2 and
// succeeds on attempt 3. Each retry is scheduled with a backoff and an
// event, each killed attempt is cleaned up before the next one runs, and
// the job ends succeeded on attempt 3.
func TestLifecycleRetriesUntilSuccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  flaky:
    plugin: shell
    limits: {max_retry: 3, retry_backoff: 100ms, retry_backoff_max: 200ms, active_timeout: 1s}
`, false)
	a := h.startAgent(ctx, "a1")
	c := h.client(ctx, a)

	counter := filepath.Join(h.pidDir, "flaky.count")
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
echo $$ > %[2]q/"$TETHER_JOB_ID".$n.pid
echo "attempt $n"
if [ "$n" -lt 3 ]; then sleep 60; fi`, counter, h.pidDir)
	job, created, err := c.Submit(ctx, api.SubmitRequest{Command: "flaky", Context: mustJSON(t, map[string]any{"script": script})})
	require.NoError(t, err)
	require.True(t, created)
	assert.Equal(t, 3, job.Limits.MaxRetry, "stamped from the command")
	assert.Equal(t, time.Second, job.Limits.ActiveTimeout)

	h.waitTerminal(ctx, []string{job.ID}, 45*time.Second)
	got, err := c.Get(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusSucceeded, got.Status, "error: %s", got.Error)
	assert.Equal(t, 3, got.Attempt)
	assert.Empty(t, got.Error, "a succeeded job carries no error; the failures are in its events")

	evs := h.events(ctx, job.ID)
	retries := kindsOf(evs, "retry_scheduled")
	require.Len(t, retries, 2, h.eventSummary(ctx, job.ID))
	for i, e := range retries {
		assert.Contains(t, e.Message, fmt.Sprintf("attempt %d ", i+2))
		assert.Contains(t, e.Message, "active_timeout of 1s exceeded")
	}
	assert.Len(t, kindsOf(evs, "claimed"), 3)
	assert.Len(t, kindsOf(evs, "cleanup_ok"), 2, "each killed attempt is cleaned up")
	h.checkTimeline(ctx, job.ID)

	// Each retry ran after the previous attempt's Cleanup and its backoff.
	var cleaned, claimed []time.Time
	for _, e := range evs {
		switch e.Kind {
		case "cleanup_ok":
			cleaned = append(cleaned, e.At)
		case "claimed":
			claimed = append(claimed, e.At)
		}
	}
	for i := range cleaned {
		assert.False(t, claimed[i+1].Before(cleaned[i]), "attempt %d claimed before attempt %d's Cleanup", i+2, i+1)
		assert.GreaterOrEqual(t, claimed[i+1].Sub(retries[i].At), 50*time.Millisecond, "backoff of attempt %d", i+2)
	}
	// The killed attempts' processes are gone.
	for n := 1; n <= 2; n++ {
		b, err := os.ReadFile(filepath.Join(h.pidDir, fmt.Sprintf("%s.%d.pid", job.ID, n)))
		require.NoError(t, err)
		pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		assert.Empty(t, groupMembers(pgid), "attempt %d's process group still runs", n)
	}
	assert.Equal(t, "attempt 1\nattempt 2\nattempt 3\n", h.stdout(ctx, job.ID), "one log across attempts")
}

// The issue's own example: a shell job that fails twice (exit 75, which its
// context declares retriable) and then succeeds ends succeeded on attempt 3,
// with a retry_scheduled event per failure, each run after its backoff.
func TestLifecycleShellFailsTwiceThenSucceeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  tempfail:
    plugin: shell
    limits: {max_retry: 2, retry_backoff: 200ms, retry_backoff_max: 1s}
`, false)
	a := h.startAgent(ctx, "a1")
	c := h.client(ctx, a)
	counter := filepath.Join(h.pidDir, "tempfail.count")
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
echo "attempt $n"
if [ "$n" -lt 3 ]; then echo "not yet" >&2; exit 75; fi`, counter)
	job, _, err := c.Submit(ctx, api.SubmitRequest{Command: "tempfail",
		Context: mustJSON(t, map[string]any{"script": script, "retry_exit_codes": []int{75}})})
	require.NoError(t, err)

	h.waitTerminal(ctx, []string{job.ID}, 30*time.Second)
	got, err := c.Get(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusSucceeded, got.Status, "events: %s", h.eventSummary(ctx, job.ID))
	assert.Equal(t, 3, got.Attempt)

	evs := h.events(ctx, job.ID)
	retries := kindsOf(evs, "retry_scheduled")
	require.Len(t, retries, 2, h.eventSummary(ctx, job.ID))
	claims := kindsOf(evs, "claimed")
	require.Len(t, claims, 3)
	// A failed Execute of a plugin with Cleanup (a script's background
	// processes may outlive it) is cleaned up before its retry runs.
	cleaned := kindsOf(evs, "cleanup_ok")
	require.Len(t, cleaned, 2, "attempts 1 and 2 were cleaned up: %s", h.eventSummary(ctx, job.ID))
	for i, e := range retries {
		assert.Contains(t, e.Message, fmt.Sprintf("attempt %d after Cleanup, not before ", i+2))
		assert.Contains(t, e.Message, "script exited with code 75")
		// Backoff i+1 is in [d/2, d] with d = 200ms × 2^i.
		assert.GreaterOrEqual(t, claims[i+1].At.Sub(e.At), (100*time.Millisecond)<<i, "attempt %d ran before its backoff", i+2)
		assert.Greater(t, claims[i+1].ID, cleaned[i].ID, "attempt %d ran before attempt %d's Cleanup", i+2, i+1)
	}
	assert.Equal(t, "attempt 1\nattempt 2\nattempt 3\n", h.stdout(ctx, job.ID))
	h.checkTimeline(ctx, job.ID)
}

// max_retry 0. A retriable failure (here an active_timeout) ends the job.
func TestLifecycleMaxRetryZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  once:
    plugin: shell
    limits: {max_retry: 0, retry_backoff: 100ms, active_timeout: 500ms}
`, false)
	a := h.startAgent(ctx, "a1")
	c := h.client(ctx, a)
	job, _, err := c.Submit(ctx, api.SubmitRequest{Command: "once", Context: mustJSON(t, map[string]any{"script": "sleep 60"})})
	require.NoError(t, err)
	h.waitTerminal(ctx, []string{job.ID}, 20*time.Second)
	got := h.job(ctx, job.ID)
	assert.Equal(t, store.StatusFailed, got.Status)
	assert.Equal(t, jobstate.Retriable, got.ErrorClass)
	assert.Equal(t, "active_timeout of 500ms exceeded", got.Error)
	assert.Equal(t, 1, got.Attempt)
	assert.Empty(t, kindsOf(h.events(ctx, job.ID), "retry_scheduled"))
}

// permanent and outcome_unknown failures are never retried, whatever
// max_retry says. An operator may requeue an outcome_unknown job.
func TestLifecycleNeverRetriesPermanentOrOutcomeUnknown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  noop:
    plugin: noop
    limits: {max_retry: 5, retry_backoff: 100ms}
  exit3:
    plugin: shell
    limits: {max_retry: 5, retry_backoff: 100ms}
    context: {script: "exit 3"}
`, true)
	a := h.startAgent(ctx, "a1")
	c := h.client(ctx, a)
	var ids []string
	for _, class := range []string{"permanent", "outcome_unknown"} {
		j, _, err := c.Submit(ctx, api.SubmitRequest{Command: "noop",
			Context: mustJSON(t, map[string]any{"fail": map[string]any{"class": class, "message": "it broke: " + class}})})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	j, _, err := c.Submit(ctx, api.SubmitRequest{Command: "exit3"})
	require.NoError(t, err)
	ids = append(ids, j.ID)
	h.waitTerminal(ctx, ids, 20*time.Second)
	for i, want := range []jobstate.ErrorClass{jobstate.Permanent, jobstate.OutcomeUnknown, jobstate.Permanent} {
		got := h.job(ctx, ids[i])
		assert.Equal(t, store.StatusFailed, got.Status, ids[i])
		assert.Equal(t, want, got.ErrorClass, ids[i])
		assert.Equal(t, 1, got.Attempt, ids[i])
		assert.Empty(t, kindsOf(h.events(ctx, ids[i]), "retry_scheduled"), h.eventSummary(ctx, ids[i]))
	}

	// The system would not retry an outcome_unknown job. A person may.
	res, err := c.Requeue(ctx, ids[1], api.RequeueRequest{Reason: "checked: the remote work never ran", Key: "ou-1"})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Job.Attempt)
	h.waitTerminal(ctx, ids[1:2], 20*time.Second)
	got := h.job(ctx, ids[1])
	assert.Equal(t, store.StatusFailed, got.Status)
	assert.Equal(t, 2, got.Attempt)
}

// pending_timeout fails a queued job nobody can run, without running it.
func TestLifecyclePendingTimeoutWithNoAgentForTheCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, "", false)
	h.startAgent(ctx, "a1") // runs shell and resumable, not "unserved"
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "unserved", Plugin: "nowhere",
		Limits: limits.Set{MaxRetry: 3, PendingTimeout: time.Second}})
	require.NoError(t, err)
	waitingSince := time.Now()
	h.waitTerminal(ctx, []string{j.ID}, 20*time.Second)
	assert.GreaterOrEqual(t, time.Since(waitingSince), 900*time.Millisecond, "failed before its pending_timeout")
	got := h.job(ctx, j.ID)
	assert.Equal(t, store.StatusFailed, got.Status)
	assert.Equal(t, "pending timeout: not started within pending_timeout (1s)", got.Error)
	assert.Equal(t, jobstate.Permanent, got.ErrorClass)
	assert.Equal(t, 1, got.Attempt, "never retried")
	evs := h.events(ctx, j.ID)
	assert.Empty(t, kindsOf(evs, "claimed"))
	assert.Empty(t, kindsOf(evs, "retry_scheduled"))
	var cleanups int
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM cleanups WHERE job_id = $1`, j.ID).Scan(&cleanups))
	assert.Zero(t, cleanups, "nothing ran, nothing to clean")
}

// Retention deletes terminal jobs past their stamped ttl — succeeded by
// ttl_succeeded, failed and canceled by ttl_failed — with their events and
// logs, and nothing else.
func TestLifecycleRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, "", false)
	submit := func(script string, l limits.Set) string {
		j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "shell", Plugin: "shell",
			Context: mustJSON(t, map[string]any{"script": script}), Limits: l})
		require.NoError(t, err)
		return j.ID
	}
	day := 24 * time.Hour
	oldOK := submit("echo old", limits.Set{TTLSucceeded: day, TTLFailed: 30 * day})
	newOK := submit("echo new", limits.Set{TTLSucceeded: day})
	keptFailed := submit("exit 3", limits.Set{TTLFailed: 0}) // 0 = keep forever
	oldFailed := submit("exit 3", limits.Set{TTLSucceeded: 0, TTLFailed: day})
	oldCanceled := submit("sleep 60", limits.Set{TTLFailed: day})
	_, err := h.st.Cancel(ctx, oldCanceled, "not needed")
	require.NoError(t, err)
	h.startAgent(ctx, "a1")
	h.waitTerminal(ctx, []string{oldOK, newOK, keptFailed, oldFailed, oldCanceled}, 20*time.Second)
	// Queued for a command nobody runs. It stays queued.
	q, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "unserved", Plugin: "nowhere",
		Limits: limits.Set{TTLSucceeded: time.Second, TTLFailed: time.Second}})
	require.NoError(t, err)
	queued := q.ID

	// Age the old ones past their ttl. A non-terminal job with an expiry
	// in the past must survive anyway.
	_, err = h.pool.Exec(ctx, `UPDATE jobs SET finished_at = now() - interval '2 days',
		expires_at = tether_expiry(status, now() - interval '2 days', ttl_succeeded, ttl_failed) WHERE id = ANY($1)`,
		[]string{oldOK, keptFailed, oldFailed, oldCanceled})
	require.NoError(t, err)
	_, err = h.pool.Exec(ctx, `UPDATE jobs SET expires_at = now() - interval '1 day' WHERE id = $1`, queued)
	require.NoError(t, err)
	var logRows int
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM job_logs WHERE job_id = $1`, oldOK).Scan(&logRows))
	require.Positive(t, logRows)

	deadline := time.Now().Add(15 * time.Second)
	exists := func(id string) bool {
		var n int
		require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n))
		return n == 1
	}
	for exists(oldOK) || exists(oldFailed) || exists(oldCanceled) {
		if time.Now().After(deadline) {
			t.Fatalf("expired jobs not deleted: succeeded %v, failed %v, canceled %v", exists(oldOK), exists(oldFailed), exists(oldCanceled))
		}
		sleep(ctx, 100*time.Millisecond)
	}
	assert.True(t, exists(newOK), "a succeeded job within its ttl")
	assert.True(t, exists(keptFailed), "ttl_failed 0 keeps forever")
	assert.True(t, exists(queued), "never a non-terminal job")
	for _, table := range []string{"job_events", "job_logs"} {
		var n int
		require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE job_id = ANY($1)`,
			[]string{oldOK, oldFailed, oldCanceled}).Scan(&n))
		assert.Zero(t, n, "%s of deleted jobs", table)
	}
}

// The limits are stamped at submit. A command edited afterwards (agent
// restarted with the new config) changes only new jobs. Per-job overrides
// apply within the command's maximum.
func TestLifecycleStampedLimitsSurviveCommandEdit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  edited:
    plugin: shell
    context: {script: "true"}
    limits: {max_retry: 1, active_timeout: 1h, max: {active_timeout: 2h}}
`, false)
	a := h.startAgent(ctx, "a1")
	c := h.client(ctx, a)
	before, _, err := c.Submit(ctx, api.SubmitRequest{Command: "edited"})
	require.NoError(t, err)
	ov := "90m"
	override, _, err := c.Submit(ctx, api.SubmitRequest{Command: "edited", Limits: &api.LimitsOverride{ActiveTimeout: &ov}})
	require.NoError(t, err)
	assert.Equal(t, 90*time.Minute, override.Limits.ActiveTimeout)
	h.waitTerminal(ctx, []string{before.ID, override.ID}, 20*time.Second)

	h.signal(a, 15)
	require.Zero(t, h.waitExit(a, 20*time.Second))
	b, err := os.ReadFile(h.cfgPath)
	require.NoError(t, err)
	edited := strings.Replace(string(b), "limits: {max_retry: 1, active_timeout: 1h,", "limits: {max_retry: 4, active_timeout: 30m, ttl_failed: 3d,", 1)
	require.NotEqual(t, string(b), edited)
	require.NoError(t, os.WriteFile(h.cfgPath, []byte(edited), 0o600))
	a2 := h.startAgent(ctx, "a2")
	c2 := h.client(ctx, a2)
	after, _, err := c2.Submit(ctx, api.SubmitRequest{Command: "edited"})
	require.NoError(t, err)

	old, err := c2.Get(ctx, before.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, old.Limits.MaxRetry)
	assert.Equal(t, time.Hour, old.Limits.ActiveTimeout)
	assert.Equal(t, 30*24*time.Hour, old.Limits.TTLFailed)
	assert.Equal(t, 4, after.Limits.MaxRetry)
	assert.Equal(t, 30*time.Minute, after.Limits.ActiveTimeout)
	assert.Equal(t, 3*24*time.Hour, after.Limits.TTLFailed)

	// The API shows them as duration strings.
	r := lcDo(t, ctx, http.MethodGet, "http://"+h.apiAddr(ctx, a2)+"/api/v1/jobs/"+before.ID, "")
	require.Equal(t, http.StatusOK, r.status)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(r.body, &raw))
	assert.Equal(t, map[string]any{"max_retry": float64(1), "retry_backoff": "10s", "retry_backoff_max": "10m0s",
		"pending_timeout": "0s", "active_timeout": "1h0m0s", "ttl_succeeded": "7d", "ttl_failed": "30d"}, raw["limits"])
}

// Every way a bad lever enters is refused, naming it: the config file and
// TETHER_DEFAULT_* variables at start, the submit API with a 400.
func TestLifecycleValidation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  capped:
    plugin: shell
    context: {script: "true"}
    limits: {active_timeout: 1h, max_retry: 1, max: {active_timeout: 2h, max_retry: 3}}
`, false)
	for _, tc := range []struct{ env, want string }{
		{"TETHER_DEFAULT_RETRY_BACKOFF=24hh", `TETHER_DEFAULT_RETRY_BACKOFF (overrides defaults.retry_backoff): "24hh" is not a duration`},
		{"TETHER_DEFAULT_TTL_FAILED=-1d", "defaults.ttl_failed (env TETHER_DEFAULT_TTL_FAILED): must not be negative"},
		{"TETHER_DEFAULT_MAX_RETRY=-1", "defaults.max_retry (env TETHER_DEFAULT_MAX_RETRY): must not be negative"},
		{"TETHER_DEFAULT_MAX_RETRY=two", `TETHER_DEFAULT_MAX_RETRY (overrides defaults.max_retry): "two" is not an integer`},
	} {
		a := h.spawnAgent("bad", tc.env)
		assert.NotZero(t, h.waitExit(a, 20*time.Second), tc.env)
		assert.Contains(t, a.out.String(), tc.want, tc.env)
	}

	good, err := os.ReadFile(h.cfgPath)
	require.NoError(t, err)
	for _, tc := range []struct{ from, to, want string }{
		{"active_timeout: 1h, max_retry: 1,", "active_timeout: 24hh, max_retry: 1,", `commands.capped.limits.active_timeout: "24hh" is not a duration`},
		{"active_timeout: 1h, max_retry: 1,", "active_timeout: 1h, max_retry: -2,", "commands.capped.limits.max_retry: must not be negative"},
		{"active_timeout: 1h, max_retry: 1,", "active_timeout: 3h, max_retry: 1,", "commands.capped.limits.active_timeout: the command's own value"},
		{"max: {active_timeout: 2h,", "max: {active_timeout: -2h,", "commands.capped.limits.max.active_timeout: must not be negative"},
	} {
		require.NoError(t, os.WriteFile(h.cfgPath, []byte(strings.Replace(string(good), tc.from, tc.to, 1)), 0o600))
		a := h.spawnAgent("bad")
		assert.NotZero(t, h.waitExit(a, 20*time.Second), tc.to)
		assert.Contains(t, a.out.String(), tc.want, tc.to)
	}
	require.NoError(t, os.WriteFile(h.cfgPath, good, 0o600))

	a := h.startAgent(ctx, "a1")
	base := "http://" + h.apiAddr(ctx, a)
	for _, tc := range []struct{ limits, field, want string }{
		{`{"active_timeout": "24hh"}`, "limits.active_timeout", `"24hh" is not a duration`},
		{`{"ttl_succeeded": "-1s"}`, "limits.ttl_succeeded", "must not be negative"},
		{`{"max_retry": -1}`, "limits.max_retry", "must not be negative"},
		{`{"max_retry": 4}`, "limits.max_retry", "4 exceeds the command's maximum 3"},
		{`{"active_timeout": "3h"}`, "limits.active_timeout", "3h0m0s exceeds the command's maximum 2h0m0s"},
		{`{"active_timeout": "0"}`, "limits.active_timeout", "0 (no limit) exceeds the command's maximum"},
		{`{"retry_backoff": "1h"}`, "limits.retry_backoff_max", "must be at least retry_backoff"},
		{`{"max_retry": "2"}`, "limits.max_retry", "expected int"},
		{`{"bogus": "1s"}`, "bogus", "unknown field"},
	} {
		r := lcDo(t, ctx, http.MethodPost, base+"/api/v1/jobs", `{"command": "capped", "limits": `+tc.limits+`}`)
		assert.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.limits, r.body)
		var e api.Error
		require.NoError(t, json.Unmarshal(r.body, &e), "%s", r.body)
		assert.Equal(t, tc.field, e.Field, tc.limits)
		assert.Equal(t, api.CodeBadRequest, e.Code, tc.limits)
		assert.Contains(t, e.Error, tc.want, tc.limits)
	}
	r := lcDo(t, ctx, http.MethodPost, base+"/api/v1/jobs", `{"command": "capped", "limits": {"max_retry": 3, "active_timeout": "2h", "ttl_failed": "7d"}}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	var j store.Job
	require.NoError(t, json.Unmarshal(r.body, &j))
	assert.Equal(t, api.Limits{MaxRetry: 3, RetryBackoff: 10 * time.Second, RetryBackoffMax: 10 * time.Minute,
		ActiveTimeout: 2 * time.Hour, TTLSucceeded: 7 * 24 * time.Hour, TTLFailed: 7 * 24 * time.Hour}, j.Limits)
}

// Operator requeue through the API and the CLI: reason required, the job
// runs again as a new attempt with an event saying who, why and the key.
// The same request replays. The key with another request conflicts. A job
// that did not fail or get canceled cannot be requeued.
func TestLifecycleRequeue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newLifecycleHarness(t, `  once:
    plugin: shell
    limits: {max_retry: 0}
`, false)
	a := h.startAgent(ctx, "a1")
	addr := h.apiAddr(ctx, a)
	base := "http://" + addr
	c := h.client(ctx, a)
	counter := filepath.Join(h.pidDir, "requeue.count")
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q; [ "$n" -ge 2 ]`, counter)
	failed, _, err := c.Submit(ctx, api.SubmitRequest{Command: "once", Context: mustJSON(t, map[string]any{"script": script})})
	require.NoError(t, err)
	ok, _, err := c.Submit(ctx, api.SubmitRequest{Command: "once", Context: mustJSON(t, map[string]any{"script": "true"})})
	require.NoError(t, err)
	h.waitTerminal(ctx, []string{failed.ID, ok.ID}, 20*time.Second)
	require.Equal(t, store.StatusFailed, h.job(ctx, failed.ID).Status)

	path := base + "/api/v1/jobs/" + failed.ID + "/requeue"
	for _, body := range []string{`{"key": "k1"}`, `{"reason": "  ", "key": "k1"}`} {
		r := lcDo(t, ctx, http.MethodPost, path, body)
		assert.Equal(t, http.StatusBadRequest, r.status, body)
		var e api.Error
		require.NoError(t, json.Unmarshal(r.body, &e))
		assert.Equal(t, "reason", e.Field)
	}

	// The CLI, as an operator would.
	out, err := exec.CommandContext(ctx, bins.Tether, "requeue", failed.ID, "--server", base,
		"--reason", "disk was full; fixed", "--key", "k1", "-o", "json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var first api.RequeueResponse
	require.NoError(t, json.Unmarshal(out, &first), "%s", out)
	assert.False(t, first.Replayed)
	assert.Equal(t, 2, first.Job.Attempt)
	assert.Equal(t, store.StatusQueued, first.Job.Status)

	// The same request again: the first answer, replayed, and no second requeue.
	r := lcDo(t, ctx, http.MethodPost, path, `{"reason": "disk was full; fixed", "key": "k1"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var replay api.RequeueResponse
	require.NoError(t, json.Unmarshal(r.body, &replay))
	assert.True(t, replay.Replayed)
	assert.Equal(t, first.Job.Attempt, replay.Job.Attempt)
	assert.True(t, first.Job.UpdatedAt.Equal(replay.Job.UpdatedAt), "the first answer, not a new one")

	// The same key with a different request.
	r = lcDo(t, ctx, http.MethodPost, path, `{"reason": "another reason", "key": "k1"}`)
	assert.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	var e api.Error
	require.NoError(t, json.Unmarshal(r.body, &e))
	assert.Equal(t, api.CodeIdempotencyConflict, e.Code)
	assert.Equal(t, "key", e.Field)

	h.waitTerminal(ctx, []string{failed.ID}, 20*time.Second)
	got := h.job(ctx, failed.ID)
	assert.Equal(t, store.StatusSucceeded, got.Status, "attempt 2 runs and succeeds")
	assert.Equal(t, 2, got.Attempt)
	requeued := kindsOf(h.events(ctx, failed.ID), "requeued")
	require.Len(t, requeued, 1, h.eventSummary(ctx, failed.ID))
	assert.Equal(t, "requeued by an unnamed operator (key k1): disk was full; fixed", requeued[0].Message)

	// Not failed or canceled: a succeeded job, named in the answer.
	for _, id := range []string{ok.ID, failed.ID} {
		r = lcDo(t, ctx, http.MethodPost, base+"/api/v1/jobs/"+id+"/requeue", `{"reason": "again", "submitter": "ops", "key": "k-`+id+`"}`)
		assert.Equal(t, http.StatusConflict, r.status, "%s", r.body)
		require.NoError(t, json.Unmarshal(r.body, &e))
		assert.Equal(t, api.CodeInvalidTransition, e.Code)
		assert.Equal(t, store.StatusSucceeded, e.Status)
		assert.Contains(t, e.Error, "is succeeded; only failed or canceled jobs can be requeued")
	}
	r = lcDo(t, ctx, http.MethodPost, base+"/api/v1/jobs/nope/requeue", `{"reason": "x"}`)
	assert.Equal(t, http.StatusNotFound, r.status)
}

type lcResponse struct {
	status int
	body   []byte
}

func lcDo(t *testing.T, ctx context.Context, method, url, body string) lcResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return lcResponse{status: resp.StatusCode, body: buf.Bytes()}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
