package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// A plugin whose HealthCheck fails makes /readyz answer 503 naming the
// plugin, its commands and its error, and sets tether_plugin_healthy to 0.
// The agent claims none of its commands' jobs, and announces why:
// GET /api/v1/commands lists it as unhealthy, not serving. Once the check
// passes again the agent is ready again and claims the job that waited.
func TestFailingPluginHealthCheckMakesTheAgentUnready(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	require.NoError(t, bintest.Build(ctx, dir, map[string]string{"noop": bintest.Noop}))
	unhealthy := filepath.Join(t.TempDir(), "unhealthy")
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st := store.New(pool)
	cfg := testConfig(t, url, "health")
	cfg.PluginDir = dir
	cfg.Commands = map[string]config.Command{"n": {Plugin: "noop"}}
	cfg.Plugins = map[string]config.Plugin{"noop": {Config: map[string]any{"unhealthy_file": unhealthy}}}
	cfg.Agent.HealthInterval = config.Duration(100 * time.Millisecond)
	require.NoError(t, cfg.Validate())

	logs := make(lines, 1000)
	addr, runErr := startAgent(t, cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	code, _ := getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusOK, code, "healthy at start")

	require.NoError(t, os.WriteFile(unhealthy, []byte("backend unreachable"), 0o600))
	waitLog(t, logs, "plugin health check failed", runErr)
	code, rs := getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, rs.Error, `plugin "noop" (commands n) is unhealthy`)
	assert.Contains(t, rs.Error, "backend unreachable")
	assert.Contains(t, metricsText(t, addr), `tether_plugin_healthy{plugin="noop"} 0`)

	waitLog(t, logs, "not claiming jobs of commands whose plugin fails its health check", runErr)
	var cmds wire.CommandList
	getJSON(t, "http://"+addr+"/api/v1/commands", &cmds)
	require.Len(t, cmds.Commands, 1)
	assert.False(t, cmds.Commands[0].Served, "its only agent's plugin fails its check")
	assert.Equal(t, []string{"health"}, cmds.Commands[0].Unhealthy)
	assert.Empty(t, cmds.Commands[0].Agents)
	assert.Contains(t, cmds.Commands[0].Hint, "fails its health check on health")
	var agents wire.AgentList
	getJSON(t, "http://"+addr+"/api/v1/agents", &agents)
	require.Len(t, agents.Agents, 1)
	assert.Contains(t, agents.Agents[0].UnhealthyPlugins["noop"], "backend unreachable")

	// A job submitted now waits: two more failed checks pass with it
	// queued (a claim would have come at once, woken by the submit).
	job, _, err := st.Submit(ctx, store.SubmitParams{Command: "n", Plugin: "noop"})
	require.NoError(t, err)
	waitLog(t, logs, "plugin health check failed", runErr)
	waitLog(t, logs, "plugin health check failed", runErr)
	got, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusQueued, got.Status, "claimed while its plugin failed its health check")

	require.NoError(t, os.Remove(unhealthy))
	waitLog(t, logs, "plugin healthy again", runErr)
	waitLog(t, logs, "claiming jobs of every command again", runErr)
	code, _ = getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusOK, code, "ready again")
	assert.Contains(t, metricsText(t, addr), `tether_plugin_healthy{plugin="noop"} 1`)
	getJSON(t, "http://"+addr+"/api/v1/commands", &cmds)
	require.Len(t, cmds.Commands, 1)
	assert.True(t, cmds.Commands[0].Served)
	assert.Empty(t, cmds.Commands[0].Unhealthy)
	fin := waitLog(t, logs, "job finished", runErr)
	assert.Equal(t, job.ID, fin["job"], "the job that waited runs once the plugin is healthy")
	assert.Equal(t, string(store.StatusSucceeded), fin["status"])
}

func getJSON(t *testing.T, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(into))
}

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// startAgent runs an agent with cfg until the test ends and returns the
// address its API serves on once it started, and where Run's error arrives.
func startAgent(t *testing.T, cfg *config.Config, log *slog.Logger) (string, <-chan error) {
	t.Helper()
	runCtx, stop := context.WithCancel(context.Background())
	started := make(chan string, 1)
	runErr, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		runErr <- Run(runCtx, cfg, log, Options{Started: func(a string) { started <- a }})
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case addr := <-started:
		return addr, runErr
	case err := <-runErr:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the agent did not start within a minute")
	}
	return "", nil
}
