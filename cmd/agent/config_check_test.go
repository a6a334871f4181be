package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
)

// `tether config check` validates a configuration and each plugin's
// settings (the real shell plugin's own Validate) without connecting
// anywhere: DATABASE_URL points at nothing and no API is asked.
func TestConfigCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pluginDir := t.TempDir()
	require.NoError(t, bintest.Build(ctx, pluginDir, map[string]string{
		"shell": "github.com/tetherjobs/tether/plugins/shell", "ecs": "github.com/tetherjobs/tether/plugins/ecs"}))
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "tether.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	// Nothing listens there: a check that connected would fail or hang.
	c := &cli{env: map[string]string{"TETHER_PLUGIN_DIR": pluginDir, "DATABASE_URL": "postgres://tether@127.0.0.1:1/none?connect_timeout=1",
		"TETHER_SERVER": "http://127.0.0.1:1"}}

	good := write("commands:\n  hello:\n    plugin: shell\n    context: {script: 'echo hi'}\n")
	r := c.ok(t, "config", "check", "--config", good)
	assert.Equal(t, "config "+good+": OK (commands: hello; plugins checked: shell)\n", r.stdout)

	// The shipped deploy/tether.yaml, with its secrets unset: the ECS
	// plugin checks its settings and calls no AWS API.
	shipped, err := filepath.Abs("../../deploy/tether.yaml")
	require.NoError(t, err)
	c.env["DATABASE_URL"] = ""
	r = c.ok(t, "config", "check", "--config", shipped, "-o", "json")
	var res configCheckResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.True(t, res.OK)
	assert.Equal(t, []string{"ecs"}, res.Plugins)

	// Every problem of the file and the environment, each naming its key,
	// and the variable when one set it.
	bad := write("agent: {capacity: 0}\nhttp: {listen: ''}\ncommands:\n  hello: {plugin: shell}\n")
	c.env["TETHER_AGENT_KEEPALIVE"] = "10m"
	r = c.run(t, "config", "check", "--config", bad)
	assert.Equal(t, 1, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "agent.capacity: must be at least 1")
	assert.Contains(t, r.stderr, "http.listen: must not be empty")
	assert.Contains(t, r.stderr, "agent.keepalive is set by environment variable TETHER_AGENT_KEEPALIVE")
	assert.Regexp(t, `config \S+: [3-9] problem\(s\):\n  - `, r.stderr)
	delete(c.env, "TETHER_AGENT_KEEPALIVE")

	// A plugin refuses its config and a command's context: both named.
	refused := write(`
plugins:
  shell:
    config: {run_as: no-such-user-tether}
commands:
  broken:
    plugin: shell
    context: {command: [], kill_grace: "-3s"}
`)
	r = c.run(t, "config", "check", "--config", refused, "-o", "json")
	assert.Equal(t, 1, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.False(t, res.OK)
	assert.Contains(t, r.stdout, "plugins.shell.config.run_as")
	assert.Contains(t, r.stdout, `"plugins_checked": []`)
	r = c.run(t, "config", "check", "--config", write("commands:\n  broken:\n    plugin: shell\n    context: {command: [], kill_grace: \"-3s\"}\n"))
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "commands.broken.context.")
	assert.Contains(t, r.stderr, "refused by plugin shell")

	r = c.ok(t, "config", "check", "--config", refused, "--skip-plugins")
	assert.Contains(t, r.stdout, "plugins checked: -")
}
