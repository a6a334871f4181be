package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

func commandsByName(t *testing.T, e *testEnv) map[string]wire.Command {
	t.Helper()
	r := e.do(t, "GET", "/api/v1/commands", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	out := map[string]wire.Command{}
	for _, c := range decode[wire.CommandList](t, r).Commands {
		out[c.Name] = c
	}
	return out
}

func TestCommandsWithNoAgents(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/api/v1/commands", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Contains(t, string(r.body), `"agents":[]`, "empty lists are lists, not null")
	assert.Contains(t, string(r.body), `"oldest_queued_seconds":null`)
	list := decode[wire.CommandList](t, r)
	require.Len(t, list.Commands, 2, "the configured commands")
	hello := list.Commands[0]
	assert.Equal(t, "hello", hello.Name)
	assert.Equal(t, "shell", hello.Plugin)
	assert.True(t, hello.Configured)
	assert.False(t, hello.Served)
	assert.Equal(t, "no live agent serves command hello: jobs wait queued; start an agent with this command or check its plugin (shell) loaded (tether agents lists each agent's plugins)", hello.Hint)
	assert.Equal(t, "sleep", list.Commands[1].Name)
}

// One entry per command known to the config or announced by an agents row
// (and per command with queued jobs). Live non-draining agents serve it,
// draining and silent or stopped agents do not.
func TestCommandsServedAndQueued(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	pool := e.st.Pool()
	register := func(name, state string, commands ...string) {
		h := store.Holder{Name: name, Generation: "g-" + name}
		_, err := e.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: commands})
		require.NoError(t, err)
		if state != "running" {
			require.NoError(t, e.st.SetAgentState(ctx, h, state))
		}
	}
	register("a1", "running", "hello", "extra")
	register("d1", "draining", "hello", "report")
	register("old", "running", "sleep")
	register("gone", "stopped", "sleep")
	// "old" was last seen 10 minutes ago: past stale_job (120s).
	_, err := pool.Exec(ctx, `UPDATE agents SET last_seen = now() - interval '10 minutes' WHERE name = 'old'`)
	require.NoError(t, err)

	h1 := e.submit(t, `{"command":"hello"}`)
	e.submit(t, `{"command":"hello"}`)
	// The one that has waited longest became due 90 s ago.
	_, err = pool.Exec(ctx, `UPDATE active_jobs SET run_after = now() - interval '90 seconds' WHERE job_id = $1`, h1.ID)
	require.NoError(t, err)
	// A command this agent does not configure, submitted elsewhere.
	_, _, err = e.st.Submit(ctx, store.SubmitParams{Command: "report", Plugin: "ecs"})
	require.NoError(t, err)
	// A queued retry waiting for its Cleanup counts as queued, but is not due.
	sl := e.submit(t, `{"command":"sleep"}`)
	_, err = pool.Exec(ctx, `UPDATE active_jobs SET run_after = 'infinity' WHERE job_id = $1`, sl.ID)
	require.NoError(t, err)

	got := commandsByName(t, e)
	require.ElementsMatch(t, []string{"hello", "sleep", "report", "extra"}, keys(got))

	hello := got["hello"]
	assert.True(t, hello.Served)
	assert.Empty(t, hello.Hint)
	assert.Equal(t, []string{"a1"}, hello.Agents)
	assert.Equal(t, []string{"d1"}, hello.Draining)
	assert.Equal(t, 2, hello.Queued)
	require.NotNil(t, hello.OldestQueuedSeconds)
	assert.GreaterOrEqual(t, *hello.OldestQueuedSeconds, 90.0)
	assert.Less(t, *hello.OldestQueuedSeconds, 600.0)

	report := got["report"]
	assert.False(t, report.Served)
	assert.False(t, report.Configured)
	assert.Equal(t, "ecs", report.Plugin, "from its jobs, as this agent does not configure it")
	assert.Empty(t, report.Agents)
	assert.Equal(t, []string{"d1"}, report.Draining)
	assert.Equal(t, 1, report.Queued)
	require.NotNil(t, report.OldestQueuedSeconds)
	assert.Equal(t, "no live agent serves command report (only draining agents announce it: d1): jobs wait queued; start an agent with this command or check its plugin (ecs) loaded (tether agents lists each agent's plugins)", report.Hint)

	sleep := got["sleep"]
	assert.False(t, sleep.Served, "a silent agent and a stopped one serve nothing")
	assert.Empty(t, sleep.Agents)
	assert.Empty(t, sleep.Draining)
	assert.Equal(t, 1, sleep.Queued)
	assert.Nil(t, sleep.OldestQueuedSeconds, "the only queued job is not due")
	assert.True(t, strings.HasPrefix(sleep.Hint, "no live agent serves command sleep: jobs wait queued"), sleep.Hint)

	extra := got["extra"]
	assert.True(t, extra.Served, "announced by a live agent")
	assert.False(t, extra.Configured)
	assert.Equal(t, "", extra.Plugin, "neither configured here nor ever submitted")
	assert.Zero(t, extra.Queued)

	// Liveness is measured against the agent's stale_job. With a longer one,
	// the agent seen 10 minutes ago is live.
	long := newEnv(t, func(o *api.Options) { o.Store = e.st; o.StaleJob = time.Hour })
	assert.Equal(t, []string{"old"}, commandsByName(t, long)["sleep"].Agents)
	assert.True(t, commandsByName(t, long)["sleep"].Served)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A cancel that does not apply answers 409 with the job's status, as the
// API reference promises.
func TestCancelConflictCarriesStatus(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)
	require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))

	r := e.do(t, "POST", "/api/v1/jobs/"+j.ID+"/cancel", "")
	require.Equal(t, http.StatusConflict, r.status, "body: %s", r.body)
	er := r.errBody(t)
	assert.Equal(t, wire.CodeInvalidTransition, er.Code)
	assert.Equal(t, store.StatusSucceeded, er.Status)
	assert.Equal(t, `"succeeded"`, string(mustRaw(t, r.body, "status")))
	assert.Contains(t, er.Error, "is already succeeded; only unfinished jobs can be canceled")
}
