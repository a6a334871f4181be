package pluginhost_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

const protocolsPkg = "github.com/tetherjobs/tether/internal/fakeplugintest/protocols"

// protocolsManager starts the protocols plugin serving the versions given
// ("2", "1,2") and returns the manager and Start's error.
func protocolsManager(t *testing.T, versions string, logs *bytes.Buffer) (*pluginhost.Manager, error) {
	t.Helper()
	m, err := pluginhost.New(pluginhost.Config{
		Dir:     pluginDir(t, map[string]string{"protocols": "protocols"}),
		Plugins: map[string]pluginhost.PluginConfig{"protocols": {Env: map[string]string{"TETHER_TEST_PROTOCOLS": versions}}},
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m, m.Start(context.Background())
}

// A plugin that serves a newer protocol version besides the agent's is
// spoken to in the agent's: the handshake settles on the newest version
// both have.
func TestProtocolNegotiatedWithAPluginOfSeveralVersions(t *testing.T) {
	require.Equal(t, []int{1}, plugin.ProtocolVersions(), "this test pairs version 2 with the agent's 1")
	var logs bytes.Buffer
	m, err := protocolsManager(t, "1,2", &logs)
	require.NoError(t, err)
	res, err := m.Execute(context.Background(), "protocols", job("p1", `{}`), plugintest.NewRuntime(nil))
	require.NoError(t, err)
	assert.Equal(t, "ran", res.Message)
	assert.Contains(t, logs.String(), "protocol=1")
}

// A plugin that serves only a version the agent does not speak is refused
// at start with what to do, not with go-plugin's bare words.
func TestPluginOfAnUnknownProtocolVersionIsRefusedClearly(t *testing.T) {
	var logs bytes.Buffer
	_, err := protocolsManager(t, "2", &logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "speaks none of this agent's protocol versions [1]")
	assert.Contains(t, err.Error(), "Plugin version: 2")
	assert.Contains(t, err.Error(), "rebuild it with a tether SDK that serves one of them")
}
