package pluginhost_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// gone reports whether pid has exited (a zombie counts: nobody may reap it
// in a container without an init).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// When the process that started a plugin dies (the agent is killed), the
// plugin cancels its in-flight jobs and exits instead of running on
// unwatched. This tests plugin.Serve. It lives here for the built binaries.
func TestPluginExitsWhenHostDies(t *testing.T) {
	hs := plugin.Handshake()
	// sh stands in for the agent. It is the plugin's parent.
	host := exec.Command("sh", "-c", `"$0" & echo $!; wait`, bintest.PluginPath(binDir, "noop"))
	host.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		hs.MagicCookieKey + "=" + hs.MagicCookieValue,
		"PLUGIN_PROTOCOL_VERSIONS=" + strconv.Itoa(plugin.ProtocolVersion),
	}
	out, err := host.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })

	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan())
	pid, err := strconv.Atoi(strings.TrimSpace(lines.Text()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.True(t, lines.Scan(), "plugin handshake line")
	parts := strings.Split(lines.Text(), "|")
	require.GreaterOrEqual(t, len(parts), 5, lines.Text())
	require.Equal(t, "unix", parts[2])
	go func() { // keep the pipe drained
		for lines.Scan() {
		}
	}()

	addr, err := net.ResolveUnixAddr("unix", parts[3])
	require.NoError(t, err)
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  hs,
		Plugins:          plugin.PluginSet(nil),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Reattach:         &goplugin.ReattachConfig{Protocol: goplugin.ProtocolGRPC, ProtocolVersion: plugin.ProtocolVersion, Addr: addr, Pid: pid},
	})
	conn, err := client.Client()
	require.NoError(t, err)
	// Not client.Kill. It would wait seconds for a graceful exit of a process
	// that is gone by then.
	t.Cleanup(func() { _ = conn.Close() })
	raw, err := conn.Dispense(plugin.PluginKey)
	require.NoError(t, err)
	p := raw.(*plugin.GRPCClient)

	marker := filepath.Join(t.TempDir(), "cancelled")
	rt := plugintest.NewRuntime(nil)
	go func() {
		ctxJSON, _ := json.Marshal(map[string]any{"checkpoint": "up", "wait": true, "cancel_file": marker})
		_, _ = p.Execute(context.Background(), &plugin.Job{ID: "orphan", Context: ctxJSON}, rt)
	}()
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.False(t, gone(pid))

	// SIGTERM while the host lives is ignored. The host decides when its
	// plugins stop (a systemd stop signals the whole group, the agent drains).
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	_, err = p.Execute(context.Background(), &plugin.Job{ID: "after-sigterm"}, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	require.False(t, gone(pid))

	killed := time.Now()
	require.NoError(t, host.Process.Kill()) // the agent is killed -9
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "orphan"
	}, 5*time.Second, 10*time.Millisecond, "the in-flight job's context was cancelled")
	require.Eventually(t, func() bool { return gone(pid) }, 5*time.Second, 10*time.Millisecond, "the plugin exited")
	t.Logf("plugin gone %s after its host", time.Since(killed))
}
