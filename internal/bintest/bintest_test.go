package bintest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
)

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, bintest.Build(context.Background(), dir, map[string]string{"bare": bintest.Bare}))
	fi, err := os.Stat(bintest.PluginPath(dir, "bare"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o111, "binary is executable")

	// Run by hand, without the handshake cookie, a plugin refuses to start.
	out, err := exec.Command(bintest.PluginPath(dir, "bare")).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(string(out)), "plugin")
}

func TestBuildReportsFailures(t *testing.T) {
	err := bintest.Build(context.Background(), t.TempDir(), map[string]string{"x": "github.com/tetherjobs/tether/internal/fakeplugintest/nonexistent"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `building plugin "x"`)
}
