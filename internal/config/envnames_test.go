package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMentionsKey(t *testing.T) {
	for _, tc := range []struct {
		msg, key string
		want     bool
	}{
		{"agent.keepalive: must be positive", "agent.keepalive", true},
		{"agent.stale_job (2m) must exceed 3 × agent.keepalive.", "agent.keepalive", true},
		{"agent.keepalive_x: unknown", "agent.keepalive", false},
		{"xagent.keepalive: no", "agent.keepalive", false},
		{"plugins.agent.keepalive.y: no", "agent.keepalive", false},
		{"agent.stale_job: too short", "stale_job", false},
		{"", "agent.keepalive", false},
	} {
		assert.Equal(t, tc.want, mentionsKey(tc.msg, tc.key), "%q in %q", tc.key, tc.msg)
	}
}

// A problem with a value an environment variable set names the variable,
// not only the key; one from the file does not.
func TestLoadNamesTheEnvironmentVariable(t *testing.T) {
	env := map[string]string{"TETHER_AGENT_KEEPALIVE": "10m", "TETHER_HTTP_LISTEN": ""}
	_, err := Load("", func(k string) string { return env[k] })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "agent.keepalive is set by environment variable TETHER_AGENT_KEEPALIVE")

	_, err = Parse([]byte("agent: {keepalive: 10m}\n"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "TETHER_AGENT_KEEPALIVE")

	joined := errors.Join(errors.New("agent.capacity: must be at least 1, got 0"), errors.New("http.listen: bad"))
	named := NameEnv(joined, map[string]string{"agent.capacity": "TETHER_AGENT_CAPACITY"})
	assert.Equal(t, "agent.capacity: must be at least 1, got 0 [agent.capacity is set by environment variable TETHER_AGENT_CAPACITY]\nhttp.listen: bad", named.Error())
	assert.NoError(t, NameEnv(nil, map[string]string{"a.b": "X"}))
}
