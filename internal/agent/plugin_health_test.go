package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
)

// A plugin whose HealthCheck fails makes /readyz answer 503 naming the
// plugin, its commands and its error, and sets tether_plugin_healthy to 0.
// Once the check passes again the agent is ready again.
func TestFailingPluginHealthCheckMakesTheAgentUnready(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, bintest.Build(t.Context(), dir, map[string]string{"noop": bintest.Noop}))
	unhealthy := filepath.Join(t.TempDir(), "unhealthy")
	cfg := testConfig(t, pgtest.URL(t), "health")
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
	code, st := getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, st.Error, `plugin "noop" (commands n) is unhealthy`)
	assert.Contains(t, st.Error, "backend unreachable")
	assert.Contains(t, metricsText(t, addr), `tether_plugin_healthy{plugin="noop"} 0`)

	require.NoError(t, os.Remove(unhealthy))
	waitLog(t, logs, "plugin healthy again", runErr)
	code, _ = getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusOK, code, "ready again")
	assert.Contains(t, metricsText(t, addr), `tether_plugin_healthy{plugin="noop"} 1`)
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
