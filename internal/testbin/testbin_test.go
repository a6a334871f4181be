package testbin_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/testbin"
)

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, testbin.Build(context.Background(), dir, map[string]string{"bare": testbin.Bare}))
	fi, err := os.Stat(testbin.PluginPath(dir, "bare"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o111, "binary is executable")

	// Run by hand, without the handshake cookie, a plugin refuses to start.
	out, err := exec.Command(testbin.PluginPath(dir, "bare")).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(string(out)), "plugin")
}

func TestBuildReportsFailures(t *testing.T) {
	err := testbin.Build(context.Background(), t.TempDir(), map[string]string{"x": "github.com/tetherjobs/tether/internal/testplugins/nonexistent"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `building plugin "x"`)
}
