package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

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

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Started: func(a string) { started <- a }})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the agent did not start: %v", err)
	case <-ctx.Done():
		t.Fatal("the agent did not start within a minute")
	}
	cancel()
	<-done
}
