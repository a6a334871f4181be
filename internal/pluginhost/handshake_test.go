package pluginhost_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/pluginhost"
)

// scriptPlugin writes a shell script as plugin name in a fresh plugin dir.
// The script gets $PIDFILE, a file it may write child pids to.
func scriptPlugin(t *testing.T, name, script string) (dir, pidFile string) {
	t.Helper()
	dir = t.TempDir()
	pidFile = filepath.Join(t.TempDir(), "pids")
	body := "#!/bin/sh\nexport PIDFILE=" + pidFile + "\n" + script + "\n"
	require.NoError(t, os.WriteFile(bintest.PluginPath(dir, name), []byte(body), 0o755))
	// Whatever a test's script left behind dies with the test.
	t.Cleanup(func() {
		for _, pid := range readPids(t, pidFile) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return dir, pidFile
}

func readPids(t *testing.T, path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// startErr starts a manager on dir and returns Start's error and how long
// Start took.
func startErr(t *testing.T, dir string, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, StartTimeout: timeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	begin := time.Now()
	err = m.Start(context.Background())
	return err, time.Since(begin)
}

// The start timeout in these tests is long, so that a start that fails
// within startBound failed because the exit was seen, not by the timeout.
const (
	longStartTimeout = 2 * time.Minute
	startBound       = 20 * time.Second
)

func TestHandshakeExitAtOnce(t *testing.T) {
	dir, _ := scriptPlugin(t, "exits", `echo "cannot read my config: boom" >&2; exit 1`)
	err, took := startErr(t, dir, longStartTimeout)
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), `starting plugin "exits"`)
	assert.Contains(t, err.Error(), "exited with status 1 before the handshake")
	assert.Contains(t, err.Error(), "cannot read my config: boom")
	assert.Less(t, took, startBound)
}

func TestHandshakeTimeout(t *testing.T) {
	dir, pidFile := scriptPlugin(t, "silent", `echo $$ > "$PIDFILE"; exec sleep 1000`)
	err, took := startErr(t, dir, time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `starting plugin "silent"`)
	assert.Contains(t, err.Error(), "did not complete the handshake: timeout while waiting for plugin to start")
	assert.Less(t, took, startBound)
	pids := readPids(t, pidFile)
	require.Len(t, pids, 1)
	assert.True(t, gone(pids[0]), "the silent plugin process must be killed")
}

func TestHandshakeGarbage(t *testing.T) {
	dir, _ := scriptPlugin(t, "chatty", `echo "hello, I am not a plugin"; exec sleep 1000`)
	err, took := startErr(t, dir, longStartTimeout)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `starting plugin "chatty"`)
	assert.Contains(t, err.Error(), "Unrecognized remote plugin message: hello, I am not a plugin")
	assert.Less(t, took, startBound)
}

// A child that inherited the plugin's stdout and stderr and outlives it must
// neither hold the start until it exits nor survive. It is in the plugin's
// process group, which is killed when the plugin exits.
func TestHandshakeChildHoldsPipes(t *testing.T) {
	dir, pidFile := scriptPlugin(t, "forks", `sleep 1000 & echo $! >> "$PIDFILE"; echo "forked" >&2; exit 3`)
	err, took := startErr(t, dir, longStartTimeout)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `starting plugin "forks"`)
	assert.Contains(t, err.Error(), "exited with status 3 before the handshake")
	assert.Contains(t, err.Error(), "forked")
	assert.Less(t, took, startBound)
	pids := readPids(t, pidFile)
	require.Len(t, pids, 1)
	assert.True(t, gone(pids[0]), "the plugin's child must be killed with its process group")
}

// A child that left the plugin's process group (setsid) cannot be killed
// with it. The pipes it holds are closed under it instead.
func TestHandshakeEscapedChildHoldsPipes(t *testing.T) {
	dir, pidFile := scriptPlugin(t, "escapes", `setsid sh -c 'echo $$ >> "$PIDFILE"; exec sleep 1000' &
while [ ! -s "$PIDFILE" ]; do sleep 0.01; done
echo "escaped" >&2
exit 1`)
	err, took := startErr(t, dir, longStartTimeout)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `starting plugin "escapes"`)
	assert.Contains(t, err.Error(), "exited with status 1 before the handshake")
	assert.Contains(t, err.Error(), "escaped")
	assert.Less(t, took, startBound)
	pids := readPids(t, pidFile)
	require.Len(t, pids, 1)
	// Still alive, holding the pipes. The start did not wait for it.
	assert.False(t, gone(pids[0]), "the escaped child should still run (or the test tests nothing)")
}

func TestHandshakeNotExecutable(t *testing.T) {
	dir := t.TempDir()
	// Executable bits, but no interpreter line and not a binary.
	require.NoError(t, os.WriteFile(bintest.PluginPath(dir, "junk"), []byte{0x7f, 'E', 'L', 'F', 0, 0}, 0o755))
	err, took := startErr(t, dir, longStartTimeout)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `starting plugin "junk": running `)
	assert.Contains(t, err.Error(), "exec format error")
	assert.Less(t, took, startBound)
}
