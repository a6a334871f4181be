package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/gobuild"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// buildTether compiles the tether binary into dir and returns its path.
func buildTether(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool builds the tether binary")
	exe := filepath.Join(dir, "tether")
	out, err := gobuild.Command(ctx, goBin, exe, ".").CombinedOutput()
	require.NoError(t, err, "building tether: %s", out)
	return exe
}

// jobUser is who the test runs the agent as. As root, it is the `nobody`
// user, so the test is about a same-user neighbour and not root's powers.
// Otherwise it is the current user (cred nil).
type jobUser struct {
	cred *syscall.Credential
	uid  int
}

func agentUser(t *testing.T) jobUser {
	t.Helper()
	if os.Geteuid() != 0 {
		return jobUser{uid: os.Geteuid()}
	}
	u, err := user.Lookup("nobody")
	require.NoError(t, err, "running as root, the test runs the agent as nobody")
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, err)
	return jobUser{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, uid: int(uid)}
}

// dir makes a directory the agent's user can read and enter (and, if
// writable, write), removed when the test ends.
func (u jobUser) dir(t *testing.T, writable bool) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tether-security-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o755))
	if writable && u.cred != nil {
		require.NoError(t, os.Chown(d, int(u.cred.Uid), int(u.cred.Gid)))
	}
	return d
}

// A shell job runs as the agent's user but cannot read the agent's
// environment (database password, API tokens) from /proc. The agent is
// non-dumpable. The control, a plain process of the same user, is readable
// by the same job, so the test can tell the difference.
func TestShellJobCannotReadAgentEnviron(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u := agentUser(t)

	binDir := u.dir(t, false)
	exe := buildTether(ctx, t, binDir)
	pluginDir := u.dir(t, false)
	require.NoError(t, bintest.Build(ctx, pluginDir, map[string]string{"shell": "github.com/tetherjobs/tether/plugins/shell"}))
	home := u.dir(t, true) // TMPDIR, the shell plugin's state and work dirs

	const dbSecret, tokenSecret, controlSecret = "pw-7d1f0c-dbsecret", "tok-93ab2e-apisecret", "ctl-5e8a41-controlsecret"
	dbURL, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	dbURL.User = url.UserPassword(dbURL.User.Username(), dbSecret) // trust auth ignores it

	addr := freeAddr(t)
	cfgDir := u.dir(t, false)
	cfgPath := filepath.Join(cfgDir, "tether.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
agent:
  name: security
  poll_interval: 100ms
http:
  listen: %q
plugin_dir: %q
plugins:
  shell:
    config:
      state_dir: %q
      work_root: %q
commands:
  shell:
    plugin: shell
`, addr, pluginDir, filepath.Join(home, "state"), home)), 0o644))

	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home,
		"TETHER_CONFIG=" + cfgPath, "TETHER_LOG_LEVEL=debug",
		"DATABASE_URL=" + dbURL.String(), "PGPASSWORD=" + dbSecret,
		"TETHER_API_TOKENS=secops:" + tokenSecret,
	}
	var agentOut syncBuf
	agentCmd := exec.Command(exe, "run")
	agentCmd.Env = env
	agentCmd.Stdout, agentCmd.Stderr = &agentOut, &agentOut
	agentCmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	require.NoError(t, agentCmd.Start())
	agentExit := make(chan error, 1)
	go func() { agentExit <- agentCmd.Wait() }()
	t.Cleanup(func() {
		_ = agentCmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-agentExit:
		case <-time.After(30 * time.Second):
			_ = agentCmd.Process.Kill()
			<-agentExit
		}
	})

	control := exec.Command("sleep", "600")
	control.Env = []string{"CONTROL_SECRET=" + controlSecret}
	control.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	require.NoError(t, control.Start())
	t.Cleanup(func() { _ = control.Process.Kill(); _ = control.Wait() })

	c, err := client.New("http://"+addr, client.WithToken(tokenSecret))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		select {
		case err := <-agentExit:
			agentExit <- err
			return true // fail below with its output
		default:
		}
		return c.Ready(ctx) == nil
	}, 60*time.Second, 50*time.Millisecond)
	select {
	case err := <-agentExit:
		t.Fatalf("agent exited (%v): %s", err, agentOut.String())
	default:
	}

	script := fmt.Sprintf(`echo "uid=$(id -u)"
if cat /proc/%[1]d/environ >/dev/null 2>&1; then echo agent-readable; else echo agent-unreadable; fi
cat /proc/%[1]d/environ 2>&1 | tr '\0' '\n'
echo ---
tr '\0' '\n' < /proc/%[2]d/environ`, agentCmd.Process.Pid, control.Process.Pid)
	raw, err := json.Marshal(map[string]any{"script": script})
	require.NoError(t, err)
	job, _, err := c.Submit(ctx, api.SubmitRequest{Command: "shell", Context: raw})
	require.NoError(t, err)
	final, err := c.Wait(ctx, job.ID, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, c.Logs(ctx, job.ID, "", false, &out))
	output := out.String()
	t.Logf("job output:\n%s", output)
	assert.Equal(t, jobstate.StatusSucceeded, final.Status, "output: %s", output)

	assert.Contains(t, output, fmt.Sprintf("uid=%d\n", u.uid), "the job runs as the agent's user")
	assert.Contains(t, output, "agent-unreadable")
	assert.Contains(t, output, "Permission denied")
	assert.Contains(t, output, "CONTROL_SECRET="+controlSecret, "control: a same-user process that is not non-dumpable is readable")
	for _, secret := range []string{dbSecret, tokenSecret} {
		assert.NotContains(t, output, secret)
	}
	assert.Contains(t, agentOut.String(), "non-dumpable", "the agent logs that it is protected")
}

// A database that accepts connections and never answers fails `tether run`
// and `tether migrate` within database_connect_timeout, with a message that
// names the host and port and not the password.
func TestDatabaseConnectTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exe := buildTether(ctx, t, t.TempDir())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var held []net.Conn // accepted and never answered, until the test ends
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
		}
	}()

	const secret = "pw-c0ffee-neverprinted"
	dbURL := fmt.Sprintf("postgres://tether:%s@%s/tether", secret, ln.Addr())
	cfgPath := filepath.Join(t.TempDir(), "tether.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf("http:\n  listen: %q\nplugin_dir: %q\n", freeAddr(t), t.TempDir())), 0o600))

	for _, sub := range []string{"run", "migrate"} {
		t.Run(sub, func(t *testing.T) {
			cmd := exec.CommandContext(ctx, exe, sub)
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"), "TETHER_CONFIG=" + cfgPath,
				"DATABASE_URL=" + dbURL, "TETHER_DATABASE_CONNECT_TIMEOUT=1s",
			}
			began := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(began)
			t.Logf("tether %s: %s", sub, out)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "output: %s", out)
			assert.NotEqual(t, 0, exit.ExitCode())
			assert.Less(t, took, 20*time.Second, "bounded by the 1s connect timeout, plus start-up")
			assert.Contains(t, string(out), "connecting to the database at "+ln.Addr().String())
			assert.Contains(t, string(out), "timed out after 1s")
			assert.NotContains(t, string(out), secret)
		})
	}
}
