package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// What a person sees in a terminal: `tether dev` in one tmux pane,
// `tether submit --wait` and `tether logs -f` in two others. The agent is
// killed with SIGKILL while the ECS task runs on dev's emulator (a process
// of its own) and started again in its pane. The followers reconnect, and
// their screens (tmux capture-pane) hold every task line exactly once and
// one outcome line, and they exit 0.
func TestTerminalFollowAcrossAgentRestart(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux not found: this test drives real terminals with it; install it with `apt-get install -y tmux`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dir := t.TempDir()
	dataDir := filepath.Join(dir, "dev")
	addr := terminalFreeAddr(t)
	server := "http://" + addr
	tm := &tmux{t: t, socket: filepath.Join(dir, "tmux.sock")}

	// The agent pane's command. respawn-pane runs it again after the kill.
	agentCmd := shellJoin("env", "-u", "TETHER_CONFIG", "-u", "AWS_ENDPOINT_URL",
		"DATABASE_URL="+pgtest.URL(t), bins.Tether, "dev", "--data-dir", dataDir, "--listen", addr, "--no-demo")
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "term", "-x", "250", "-y", "50", agentCmd)
	t.Cleanup(func() {
		// dev stop ends the agent, which stops the emulator it reused.
		// Then the panes go with the tmux server.
		out, err := exec.Command(bins.Tether, "dev", "stop", "--data-dir", dataDir).CombinedOutput()
		if err != nil {
			t.Logf("tether dev stop: %v\n%s", err, out)
		}
		_ = exec.Command("tmux", "-S", tm.socket, "kill-server").Run()
	})
	tm.run("set-option", "-g", "remain-on-exit", "on") // keep a pane whose shell died, for the failure message
	tm.run("set-option", "-g", "history-limit", "10000")
	agentPane := "term:0.0"
	tm.waitFor(ctx, agentPane, "tether is serving at", 60*time.Second)

	const lines = 12
	taskCtx := fmt.Sprintf(`{"container_overrides":[{"name":"demo","environment":{"DEMO_LINES":"%d","DEMO_INTERVAL":"0.5"}}]}`, lines)
	cli := func(args ...string) string {
		// The shell stays after the echo. tmux may drop what a pane
		// printed just before its process exited.
		return shellJoin(append([]string{bins.Tether, "--server", server}, args...)...) + `; echo "EXIT=$?"; exec sleep 3600`
	}
	submitPane := tm.split(cli("submit", "ecs-demo", "--context", taskCtx, "--wait"))
	idLine := tm.waitFor(ctx, submitPane, "submitted job ", 20*time.Second)
	id := regexp.MustCompile(`submitted job (\S+)`).FindStringSubmatch(idLine)[1]
	logsPane := tm.split(cli("logs", "-f", id))

	tm.waitFor(ctx, submitPane, "ecs task line 3 of", 30*time.Second)
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dataDir, "run", "dev.pid"))))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	tm.run("respawn-pane", "-k", "-t", agentPane, agentCmd)
	tm.waitFor(ctx, agentPane, "reusing the local ECS", 60*time.Second)

	for name, pane := range map[string]string{"submit --wait": submitPane, "logs -f": logsPane} {
		tm.waitFor(ctx, pane, "EXIT=", 60*time.Second)
		screen := tm.capture(pane)
		for i := 1; i <= lines; i++ {
			assert.Equal(t, 1, strings.Count(screen, fmt.Sprintf("ecs task line %d of %d\n", i, lines)),
				"%s: line %d must be on screen exactly once:\n%s", name, i, screen)
		}
		// One outcome line, the last before the exit code. The status
		// lines of submit --wait ("job <id>: running on dev") are not one.
		outcome := regexp.MustCompile(`(?m)^job ` + regexp.QuoteMeta(id) + `:? (succeeded|failed|canceled)\b.*\nEXIT=(\d+)`)
		ends := regexp.MustCompile(`(?m)^job `+regexp.QuoteMeta(id)+`:? (succeeded|failed|canceled)\b`).FindAllString(screen, -1)
		assert.Len(t, ends, 1, "%s: one outcome line:\n%s", name, screen)
		if m := outcome.FindStringSubmatch(screen); assert.NotNil(t, m, "%s: the outcome line, then the exit:\n%s", name, screen) {
			assert.Equal(t, "succeeded", m[1], "%s:\n%s", name, screen)
			assert.Equal(t, "0", m[2], "%s: exit code:\n%s", name, screen)
		}
	}
	agentScreen := tm.capture(agentPane)
	assert.NotContains(t, agentScreen, `msg="http request"`, "dev keeps request logs below info")
}

// tmux drives a private tmux server (its own socket).
type tmux struct {
	t      *testing.T
	socket string
}

func (m *tmux) run(args ...string) string {
	m.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", m.socket}, args...)...).CombinedOutput()
	require.NoError(m.t, err, "tmux %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// split opens a pane running cmd and returns its id.
func (m *tmux) split(cmd string) string {
	m.t.Helper()
	return strings.TrimSpace(m.run("split-window", "-d", "-P", "-F", "#{pane_id}", "-t", "term:0", cmd))
}

// capture is the pane's whole history and screen, wrapped lines joined.
func (m *tmux) capture(pane string) string {
	m.t.Helper()
	return m.run("capture-pane", "-p", "-J", "-S", "-", "-t", pane)
}

// waitFor waits until the pane shows text and returns the first line with it.
func (m *tmux) waitFor(ctx context.Context, pane, text string, within time.Duration) string {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		screen := m.capture(pane)
		for _, l := range strings.Split(screen, "\n") {
			if strings.Contains(l, text) {
				return l
			}
		}
		select {
		case <-ctx.Done():
			m.t.Fatalf("pane %s did not show %q within %s:\n%s", pane, text, within, screen)
		case <-tick.C:
		}
	}
}

// shellJoin quotes args for sh, which tmux runs a pane's command with.
func shellJoin(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func terminalFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
