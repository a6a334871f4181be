package bintest_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// StartBinary gives the plugin exactly the environment it is handed. A
// variable of the test process (as the agent's DATABASE_URL would be) never
// reaches the plugin process, so tests see what the agent's scrubbed plugins
// see.
func TestStartBinaryDoesNotLeakTheHostEnvironment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	require.NoError(t, bintest.Build(ctx, dir, map[string]string{"noop": bintest.Noop}))
	t.Setenv("PLUGINTEST_HOST_ONLY", "leaked-from-the-test-process")
	t.Setenv("DATABASE_URL", "postgres://u:leaked@db/x")
	require.NotEmpty(t, os.Getenv("PATH"), "the test process has a PATH the plugin must not inherit")

	c := plugintest.StartBinary(t, bintest.PluginPath(dir, "noop"), []string{"GIVEN=by-the-test"})
	rt := plugintest.NewRuntime(nil)
	jobCtx, err := json.Marshal(map[string]any{"print_env": true})
	require.NoError(t, err)
	_, err = c.Execute(ctx, &plugin.Job{ID: "env", Attempt: 1, Context: jobCtx}, rt)
	require.NoError(t, err)

	// One variable per line, except go-plugin's PEM client certificate,
	// whose value spans lines.
	env := map[string]string{}
	inPEM := false
	for _, line := range strings.Split(strings.TrimSpace(rt.StdoutString()), "\n") {
		if inPEM || line == "" {
			inPEM = inPEM && !strings.HasPrefix(line, "-----END ")
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
		inPEM = strings.HasPrefix(v, "-----BEGIN ")
	}
	assert.Equal(t, "by-the-test", env["GIVEN"], "what StartBinary is given arrives")
	assert.NotContains(t, env, "PLUGINTEST_HOST_ONLY")
	assert.NotContains(t, env, "DATABASE_URL")
	assert.NotContains(t, env, "PATH")
	assert.NotContains(t, rt.StdoutString(), "leaked")
	for k := range env {
		// Besides GIVEN, only go-plugin's own handshake variables.
		if k != "GIVEN" && k != plugin.Handshake().MagicCookieKey {
			assert.True(t, strings.HasPrefix(k, "PLUGIN_"), "unexpected variable %s in the plugin's environment", k)
		}
	}
}
