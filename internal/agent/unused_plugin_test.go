package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/pluginhost"
)

// TestBrokenUnusedPluginDoesNotStopTheAgent puts a binary that fails at
// start beside the plugin the agent's command uses. The agent starts only
// the plugins its commands name, so it starts and serves the command.
func TestBrokenUnusedPluginDoesNotStopTheAgent(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, bintest.Build(t.Context(), dir, map[string]string{"noop": bintest.Noop}))
	broken := filepath.Join(dir, pluginhost.BinaryPrefix+"broken")
	require.NoError(t, os.WriteFile(broken, []byte("#!/bin/sh\necho 'not a plugin' >&2\nexit 3\n"), 0o755))
	cfg := testConfig(t, pgtest.URL(t), "unused")
	cfg.PluginDir = dir
	cfg.Commands = map[string]config.Command{"n": {Plugin: "noop"}}
	require.NoError(t, cfg.Validate())

	startAgent(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
