package pluginhost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pluginhost"
)

const (
	legacyPkg = "github.com/tetherjobs/tether/internal/fakeplugintest/legacy"
	ecsPkg    = "github.com/tetherjobs/tether/plugins/ecs"
	shellPkg  = "github.com/tetherjobs/tether/plugins/shell"
)

func contexts(byPlugin map[string]map[string]string) map[string]map[string]json.RawMessage {
	out := map[string]map[string]json.RawMessage{}
	for p, cmds := range byPlugin {
		out[p] = map[string]json.RawMessage{}
		for c, raw := range cmds {
			out[p][c] = json.RawMessage(raw)
		}
	}
	return out
}

// The real ecs and shell plugins check their config and their commands'
// contexts at start, and each problem names its key.
func TestValidateThroughRealPlugins(t *testing.T) {
	dir := pluginDir(t, map[string]string{"ecs": "ecs", "shell": "shell"})
	m := start(t, pluginhost.Config{Dir: dir, Plugins: map[string]pluginhost.PluginConfig{
		"ecs":   {Config: json.RawMessage(`{"cluster": "prod", "launch_type": "SPOT"}`)},
		"shell": {Config: json.RawMessage(`{"kill_grace": "5s"}`)},
	}})
	_, err := m.Validate(context.Background(), contexts(map[string]map[string]string{
		"ecs":   {"report": `{"task_definition": "report:3"}`},
		"shell": {"ok": `{"script": "true"}`, "etl": `{"command": []}`, "slow": `{"script": "x", "kill_grace": "1h"}`},
	}))
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, `plugins.ecs.config.launch_type: must be one of EC2, FARGATE, EXTERNAL, MANAGED_INSTANCES, got "SPOT" (refused by plugin ecs)`)
	assert.Contains(t, msg, `commands.etl.context.command: empty argv; set command: ["prog", "arg"] or script: "..." (refused by plugin shell)`)
	assert.Contains(t, msg, `commands.slow.context.kill_grace: 1h0m0s is above the maximum 10s`)
	assert.NotContains(t, msg, "commands.ok")
	assert.NotContains(t, msg, "commands.report")
}

func TestValidateAcceptsValidSettings(t *testing.T) {
	dir := pluginDir(t, map[string]string{"ecs": "ecs", "shell": "shell"})
	m := start(t, pluginhost.Config{Dir: dir, Plugins: map[string]pluginhost.PluginConfig{
		"ecs": {Config: json.RawMessage(`{"cluster": "prod", "region": "eu-west-1", "launch_type": "FARGATE",
			"network_configuration": {"subnets": ["subnet-1"]}}`)},
	}})
	_, err := m.Validate(context.Background(), contexts(map[string]map[string]string{
		"ecs":   {"report": `{"task_definition": "report:3"}`, "adhoc": `{}`},
		"shell": {"etl": `{"command": ["/bin/true"]}`},
	}))
	require.NoError(t, err)
}

// The shell plugin reports its max_kill_grace with Validate, its default or
// what its config sets. The ecs plugin, whose work is remote, reports none.
func TestValidateReportsKillGraces(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"ecs": "ecs", "shell": "shell"})})
	graces, err := m.Validate(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, pluginhost.KillGraces{"shell": 10 * time.Second}, graces, "the shell plugin's default")

	m = start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"shell": "shell"}), Plugins: map[string]pluginhost.PluginConfig{
		"shell": {Config: json.RawMessage(`{"max_kill_grace": "90s"}`)},
	}})
	graces, err = m.Validate(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, pluginhost.KillGraces{"shell": 90 * time.Second}, graces, "what the shell plugin's config sets")
}

func TestValidateRefusesBadShellRunAs(t *testing.T) {
	dir := pluginDir(t, map[string]string{"shell": "shell"})
	m := start(t, pluginhost.Config{Dir: dir, Plugins: map[string]pluginhost.PluginConfig{
		"shell": {Config: json.RawMessage(`{"run_as": "no-such-user-here"}`)},
	}})
	_, err := m.Validate(context.Background(), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `plugins.shell.config.run_as: no user "no-such-user-here" on this machine`)
}

// A plugin built before Validate existed answers Unimplemented. Nothing is
// checked, the start goes on, and the agent says so at debug level.
func TestValidateLegacyPluginIsNotChecked(t *testing.T) {
	var logs bytes.Buffer
	dir := pluginDir(t, map[string]string{"legacy": "legacy"})
	m := start(t, pluginhost.Config{
		Dir:     dir,
		Plugins: map[string]pluginhost.PluginConfig{"legacy": {Config: json.RawMessage(`{"anything": 1}`)}},
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	graces, err := m.Validate(context.Background(), contexts(map[string]map[string]string{"legacy": {"c": `{"x": 1}`}}))
	require.NoError(t, err)
	assert.Empty(t, graces, "a plugin that predates Validate reports no kill grace")
	assert.Contains(t, logs.String(), "plugin does not implement Validate")
}

func TestValidateUnknownPlugin(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"bare": "bare"})})
	_, err := m.Validate(context.Background(), contexts(map[string]map[string]string{"nope": {"c": `{}`}}))
	assert.ErrorContains(t, err, `plugin "nope" is not started`)
}

// A plugin built with the SDK that does not implement Validator has nothing
// to check. Whatever its settings, the start goes on.
func TestValidateWithoutValidator(t *testing.T) {
	m := start(t, pluginhost.Config{
		Dir:     pluginDir(t, map[string]string{"bare": "bare"}),
		Plugins: map[string]pluginhost.PluginConfig{"bare": {Config: json.RawMessage(`{"whatever": [1]}`)}},
	})
	_, err := m.Validate(context.Background(), contexts(map[string]map[string]string{"bare": {"c": `{"x": 1}`}}))
	require.NoError(t, err)
}
