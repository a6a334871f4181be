package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/pkg/client"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// A real agent (`tether run` with the shell plugin) runs what
// `tether submit --wait` submits. The exit code follows the job.
func TestRunAndSubmitWaitEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pluginDir := t.TempDir()
	require.NoError(t, bintest.Build(ctx, pluginDir, map[string]string{"shell": "github.com/tetherjobs/tether/plugins/shell"}))

	addr := freeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "tether.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
agent:
  name: e2e
  poll_interval: 100ms
http:
  listen: %q
plugin_dir: %q
commands:
  greet:
    plugin: shell
    context:
      script: 'echo "hello $WHO"; echo "to stderr" >&2'
      env: {WHO: world}
  fail:
    plugin: shell
    context:
      script: 'echo failing; exit 3'
`, addr, pluginDir)), 0o600))
	env := map[string]string{
		"DATABASE_URL":  pgtest.URL(t),
		"TETHER_CONFIG": cfgPath,
		"TETHER_SERVER": "http://" + addr,
	}
	getenv := func(k string) string { return env[k] }

	runCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan int, 1)
	var agentOut, agentErr syncBuf
	go func() { agentDone <- run(runCtx, []string{"run", "--log-level", "warn"}, &agentOut, &agentErr, getenv) }()
	t.Cleanup(func() {
		stopAgent()
		<-agentDone
	})

	c, err := client.New("http://" + addr)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		select {
		case code := <-agentDone:
			agentDone <- code
			return true // exited early: fail below with its output
		default:
		}
		return c.Ready(ctx) == nil
	}, 30*time.Second, 50*time.Millisecond)
	select {
	case code := <-agentDone:
		t.Fatalf("agent exited with %d: %s", code, agentErr.String())
	default:
	}

	cl := &cli{env: env}
	r := cl.run(t, "submit", "greet", "--wait")
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "hello world\n", r.stdout)
	assert.Contains(t, r.stderr, "to stderr\n")
	assert.Contains(t, r.stderr, ": succeeded")

	// The job's context overrides the command's default.
	r = cl.run(t, "submit", "greet", "--set", "env.WHO=tether", "--wait")
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "hello tether\n", r.stdout)

	r = cl.run(t, "submit", "fail", "--wait")
	assert.Equal(t, exitFailed, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "failing\n", r.stdout)

	r = cl.run(t, "agents")
	assert.Contains(t, r.stdout, "e2e")

	stopAgent()
	select {
	case code := <-agentDone:
		assert.Equal(t, 0, code, "agent stderr: %s", agentErr.String())
		agentDone <- code
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop after its context was cancelled")
	}
	assert.False(t, strings.Contains(agentErr.String(), "level=ERROR"), agentErr.String())
}

// Plugin settings are checked by each plugin at start. A bad command
// context or plugin config fails `tether run` with the key named, before the
// agent serves (it would otherwise say ready and fail every job).
func TestRunRefusesBadPluginSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pluginDir := t.TempDir()
	require.NoError(t, bintest.Build(ctx, pluginDir, map[string]string{"shell": "github.com/tetherjobs/tether/plugins/shell"}))
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"command context", `
commands:
  ok:
    plugin: shell
    context: {script: 'echo fine'}
  broken:
    plugin: shell
    context: {command: [], kill_grace: "-3s"}
`, []string{"commands.broken.context.", "refused by plugin shell"}},
		{"plugin config", `
plugins:
  shell:
    config: {run_as: no-such-user-tether}
commands:
  ok:
    plugin: shell
    context: {script: 'echo fine'}
`, []string{"plugins.shell.config.run_as", "no-such-user-tether"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			cfgPath := filepath.Join(t.TempDir(), "tether.yaml")
			require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf("agent: {name: badplugin}\nhttp: {listen: %q}\nplugin_dir: %q\n%s", addr, pluginDir, tc.yaml)), 0o600))
			env := map[string]string{"DATABASE_URL": pgtest.URL(t), "TETHER_CONFIG": cfgPath}
			var out, errOut syncBuf
			code := run(ctx, []string{"run", "--log-level", "warn"}, &out, &errOut, func(k string) string { return env[k] })
			assert.NotEqual(t, 0, code, "stderr: %s", errOut.String())
			for _, w := range tc.want {
				assert.Contains(t, errOut.String(), w)
			}
			assert.NotContains(t, errOut.String(), "commands.ok.", "a valid command is not named")
			// It never served. Nothing listens on its address.
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
			}
			assert.Error(t, err, "the agent must not have started its API")
		})
	}
}
