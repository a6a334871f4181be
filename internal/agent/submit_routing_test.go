package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
)

// Two real agents configured with different commands, as two ECS services
// behind one load balancer: a submit of either command to either agent is
// accepted, and the job runs on the agent that serves it.
func TestSubmitToAnAgentThatDoesNotServeTheCommand(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, bintest.Build(t.Context(), dir, map[string]string{"noop": bintest.Noop}))
	url := pgtest.URL(t)
	agentFor := func(name, command string) string {
		cfg := testConfig(t, url, name)
		cfg.PluginDir = dir
		cfg.Commands = map[string]config.Command{command: {Plugin: "noop"}}
		require.NoError(t, cfg.Validate())
		addr, _ := startAgent(t, cfg, slog.New(slog.DiscardHandler))
		return "http://" + addr
	}
	a, b := agentFor("serves-a", "a"), agentFor("serves-b", "b")

	for _, tc := range []struct{ to, command, ranOn string }{{a, "b", "serves-b"}, {b, "a", "serves-a"}} {
		resp, err := http.Post(tc.to+"/api/v1/jobs", "application/json", bytes.NewReader([]byte(`{"command":"`+tc.command+`"}`)))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "submit of %s to the other agent: %s", tc.command, body)
		var job struct{ ID, Plugin string }
		require.NoError(t, json.Unmarshal(body, &job))
		assert.Equal(t, "noop", job.Plugin, "the announcing agent's plugin")

		// The followed events end when the job does.
		ev, err := http.Get(tc.to + "/api/v1/jobs/" + job.ID + "/events?follow=true")
		require.NoError(t, err)
		events, _ := io.ReadAll(ev.Body)
		ev.Body.Close()
		assert.Contains(t, string(events), `"succeeded"`, "job %s ended", job.ID)
		assert.Contains(t, string(events), tc.ranOn, "job %s ran on the agent serving %s", job.ID, tc.command)
	}

	resp, err := http.Post(a+"/api/v1/jobs", "application/json", bytes.NewReader([]byte(`{"command":"nobody"}`)))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), `"field":"command"`)
	assert.Contains(t, string(body), "serves-b", "says who serves what")
}
