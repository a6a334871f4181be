package plugin_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Host reads what the agent said of itself. An agent that says nothing (or
// something unreadable) has no feature, so a plugin degrades as for the
// oldest agent.
func TestHostSaysWhatTheAgentHas(t *testing.T) {
	t.Setenv(plugin.HostEnv, `{"version":"v1.4.2","protocol":1,"features":["held_output","describe"]}`)
	h := plugin.Host()
	assert.Equal(t, "v1.4.2", h.Version)
	assert.True(t, h.Has(plugin.FeatureHeldOutput))
	assert.False(t, h.Has(plugin.FeatureHealthSchedule))

	t.Setenv(plugin.HostEnv, "")
	assert.False(t, plugin.Host().Has(plugin.FeatureHeldOutput), "an agent that says nothing")
	t.Setenv(plugin.HostEnv, "{not json")
	assert.Equal(t, plugin.HostInfo{}, plugin.Host())
}
