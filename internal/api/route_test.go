package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// routeAgent is one agent of a mixed fleet: its config, its agents row
// announcing what it serves (as internal/agent registers it), and its API.
type routeAgent struct {
	name string
	cfg  *config.Config
	env  *testEnv
}

func newRouteAgent(t *testing.T, st *store.Store, name, yaml string) routeAgent {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	require.NoError(t, err)
	specs := map[string]store.CommandSpec{}
	for c, cmd := range cfg.Commands {
		specs[c] = api.SpecOf(cmd, cfg.Defaults)
	}
	_, err = st.RegisterAgent(context.Background(), store.Registration{
		Holder: store.Holder{Name: name, Generation: "g-" + name}, Capacity: 1,
		Commands: []string{}, CommandSpecs: specs,
	})
	require.NoError(t, err)
	env := newEnvOn(t, st, func(o *api.Options) { o.Commands, o.Defaults = cfg.Commands, &cfg.Defaults })
	return routeAgent{name: name, cfg: cfg, env: env}
}

// resolved is what a job of command submitted with override runs under on
// the agent configuring it.
func (a routeAgent) resolved(t *testing.T, command string, override limits.Partial) limits.Set {
	t.Helper()
	set, errs := a.cfg.Commands[command].ResolveLimits(a.cfg.Defaults, override)
	require.Empty(t, errs)
	return set
}

// Behind one load balancer over two ECS services, a submit succeeds
// whichever agent answers, and the job is what the serving agent would have
// stored.
func TestSubmitRoutedToTheAnnouncingAgent(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := newRouteAgent(t, st, "agent-a", `
defaults: {max_retry: 1, ttl_succeeded: 1d}
commands:
  alpha: {plugin: shell, limits: {active_timeout: 1h, max: {max_retry: 3, active_timeout: 2h}}}
`)
	b := newRouteAgent(t, st, "agent-b", `
defaults: {max_retry: 4, retry_backoff: 1m}
commands:
  beta: {plugin: ecs, limits: {pending_timeout: 10m, max: {max_retry: 6}}}
`)
	for _, tc := range []struct {
		command string
		owner   routeAgent
	}{{"alpha", a}, {"beta", b}} {
		two := 2
		want := wire.Limits(tc.owner.resolved(t, tc.command, limits.Partial{MaxRetry: &two}))
		for _, via := range []routeAgent{a, b} {
			job := via.env.submit(t, `{"command":"`+tc.command+`","limits":{"max_retry":2}}`)
			assert.Equal(t, tc.owner.cfg.Commands[tc.command].Plugin, job.Plugin, "%s via %s", tc.command, via.name)
			assert.Equal(t, want, job.Limits, "%s via %s: the owner's levers", tc.command, via.name)
			stored, err := st.GetJob(context.Background(), job.ID)
			require.NoError(t, err)
			assert.Equal(t, want, stored.Limits, "%s via %s: stored", tc.command, via.name)
		}
	}

	// Above the owner's maximum: refused as the owner refuses it, by any.
	for _, via := range []routeAgent{a, b} {
		r := via.env.do(t, "POST", "/api/v1/jobs", `{"command":"alpha","limits":{"max_retry":4}}`)
		require.Equal(t, http.StatusBadRequest, r.status, "via %s: %s", via.name, r.body)
		er := r.errBody(t)
		assert.Equal(t, "limits.max_retry", er.Field)
		assert.Contains(t, er.Error, "3", "names the owner's maximum")
	}

	// Nobody serves gamma: the answer names the field and who serves what.
	for _, via := range []routeAgent{a, b} {
		r := via.env.do(t, "POST", "/api/v1/jobs", `{"command":"gamma"}`)
		require.Equal(t, http.StatusBadRequest, r.status, "via %s: %s", via.name, r.body)
		er := r.errBody(t)
		assert.Equal(t, "command", er.Field)
		assert.Equal(t, wire.CodeUnknownCommand, er.Code)
		assert.Contains(t, er.Error, `unknown command "gamma"`)
		assert.Contains(t, er.Error, "announced by live agents: alpha (agent-a), beta (agent-b)")
	}

	// GET /api/v1/commands lists what others announce, with their plugin.
	cmds := commandsByName(t, a.env)
	require.Contains(t, cmds, "beta")
	assert.Equal(t, "ecs", cmds["beta"].Plugin)
	assert.False(t, cmds["beta"].Configured)
	assert.True(t, cmds["beta"].Accepted)
	assert.True(t, cmds["alpha"].Accepted)

	// Once agent-b is no longer live, beta is refused by agent-a (a fresh
	// API: the announcements are cached for a second).
	_, err := st.Pool().Exec(context.Background(), `UPDATE agents SET last_seen = now() - interval '10 minutes' WHERE name = 'agent-b'`)
	require.NoError(t, err)
	fresh := newEnvOn(t, st, func(o *api.Options) { o.Commands, o.Defaults = a.cfg.Commands, &a.cfg.Defaults })
	r := fresh.do(t, "POST", "/api/v1/jobs", `{"command":"beta"}`)
	require.Equal(t, http.StatusBadRequest, r.status, "body: %s", r.body)
	assert.Equal(t, "command", r.errBody(t).Field)
	assert.Contains(t, r.errBody(t).Error, "announced by live agents: alpha (agent-a);")
	assert.False(t, commandsByName(t, fresh)["beta"].Accepted)
}
