package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadPID(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
	}{
		{"1234\n", 1234},
		{"1234\n/var/lib/postgresql\n1700000000\n5432\n", 1234}, // postmaster.pid
		{" 77 ", 77},
		{"", 0},
		{"garbage\n", 0},
	} {
		p := filepath.Join(dir, "pid")
		require.NoError(t, os.WriteFile(p, []byte(tc.content), 0o600))
		assert.Equal(t, tc.want, readPID(p), "%q", tc.content)
	}
	assert.Equal(t, 0, readPID(filepath.Join(dir, "missing")))
}

// A child that exited but is not reaped yet is gone for stopProcess. So is
// one that was reaped.
func TestProcessAlive(t *testing.T) {
	assert.True(t, processAlive(os.Getpid()))
	cmd := exec.Command("sh", "-c", "exit 0")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	require.Eventually(t, func() bool { return !processAlive(pid) }, 10*time.Second, 10*time.Millisecond, "zombie %d counts as gone", pid)
	require.NoError(t, cmd.Wait())
	assert.False(t, processAlive(pid))
	assert.NoError(t, stopProcess(context.Background(), pid, syscall.SIGTERM), "stopping a gone process is a no-op")
}

// `tether dev stop` signals a pid from a stale file only when its command
// line looks like the process the file is for.
func TestCmdlineHas(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Until the child has exec'd, its command line is this test's.
	require.Eventually(t, func() bool { return cmdlineHas(cmd.Process.Pid, "sleep") }, 10*time.Second, 10*time.Millisecond)
	assert.True(t, cmdlineHas(cmd.Process.Pid, "30"))
	assert.False(t, cmdlineHas(cmd.Process.Pid, "dev"))
	assert.False(t, cmdlineHas(cmd.Process.Pid, "postgres"))
}
