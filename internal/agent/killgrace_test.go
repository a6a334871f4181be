package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
)

// The shell plugin reports its default max_kill_grace (10s) at start, which
// the config alone does not know. The agent checks the self-fence
// arithmetic with it and refuses to start, naming the key and the fix.
func TestStartRefusesThePluginsKillGrace(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, bintest.Build(t.Context(), dir, map[string]string{"shell": "github.com/tetherjobs/tether/plugins/shell"}))
	cfg := testConfig(t, pgtest.URL(t), "graces")
	cfg.PluginDir = dir
	cfg.Agent.Keepalive = config.Duration(time.Second)
	cfg.Agent.StaleJob = config.Duration(12 * time.Second)
	cfg.Agent.OfflineAfter = config.Duration(3 * time.Second)
	cfg.Agent.DeadAfter = config.Duration(2 * time.Second)
	cfg.Agent.CleanInterval = config.Duration(time.Second)
	cfg.Commands = map[string]config.Command{"sh": {Plugin: "shell"}}
	require.NoError(t, cfg.Validate(), "the config alone does not know the shell plugin's default")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "agent.stale_job (12s) − 2×agent.keepalive (2s) − longest kill_grace (plugins.shell.config.max_kill_grace 10s, the default) = 0s must be at least 2×keepalive (2s)")
	assert.Contains(t, err.Error(), "raise agent.stale_job to at least 4×keepalive + kill_grace = 14s")
}
