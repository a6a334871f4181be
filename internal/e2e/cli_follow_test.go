package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// cliProc is one `tether` CLI process (logs -f, wait) run as a user would.
type cliProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuf
	done           chan struct{}
}

func startCLI(t *testing.T, ctx context.Context, args ...string) *cliProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, bins.Tether, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p := &cliProc{cmd: cmd, stdout: &syncBuf{}, stderr: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, cmd.Start(), "starting tether %v", args)
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
	return p
}

// waitOutput waits until the CLI's stream holds want.
func (p *cliProc) waitOutput(t *testing.T, ctx context.Context, stream *syncBuf, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(stream.String(), want) {
		select {
		case <-p.done:
			t.Fatalf("tether exited before printing %q:\nstdout: %s\nstderr: %s", want, p.stdout, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tether printed no %q within %s:\nstdout: %s\nstderr: %s", want, within, p.stdout, p.stderr)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// exitCode waits for the CLI to exit and returns its exit code.
func (p *cliProc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-timer.C:
		t.Fatalf("tether did not exit within %s:\nstdout: %s\nstderr: %s", within, p.stdout, p.stderr)
		return -1
	}
}

// A `tether logs -f` process follows a job on agent A. A is killed (kill -9)
// and B resumes the job. The follower reconnects to B (the next --server),
// resumes after the last line it printed, and ends with the outcome. Every
// line of the job's output is printed exactly once.
func TestCLILogsFollowAcrossAgentLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())

	a := h.startAgent(ctx, "follow-a")
	addrA := h.apiAddr(ctx, a)
	c, err := json.Marshal(map[string]any{"duration_ms": 4000, "tick_ms": 150})
	require.NoError(t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "resumable", Plugin: "resumable", Context: c, Submitter: "e2e"})
	require.NoError(t, err)
	id := j.ID
	h.waitHandle(ctx, id, 15*time.Second)
	b := h.startAgent(ctx, "follow-b")
	addrB := h.apiAddr(ctx, b)

	f := startCLI(t, ctx, "logs", "-f", id, "--server", "http://"+addrA+",http://"+addrB)
	// A line stored after the start. The follower is connected to A.
	f.waitOutput(t, ctx, f.stdout, "tick ", 10*time.Second)
	h.kill9(a)

	code := f.exitCode(t, 40*time.Second)
	j = h.job(ctx, id)
	require.Equal(t, store.StatusSucceeded, j.Status, "error: %s; %s", j.Error, h.eventSummary(ctx, id))
	assert.Equal(t, 0, code, "stderr: %s", f.stderr)

	out := f.stdout.String()
	t.Logf("follower stdout:\n%sstderr:\n%s", out, f.stderr)
	plugins := map[string]bool{}
	for _, m := range regexp.MustCompile(`by plugin (\d+)`).FindAllStringSubmatch(out, -1) {
		plugins[m[1]] = true
	}
	assert.Len(t, plugins, 2, "lines written under A and under B: %s", out)
	assert.Equal(t, h.stdout(ctx, id), out, "the follower prints the job's output, every line once, in order")
	assert.Equal(t, 1, strings.Count(out, "started "), out)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		assert.Equal(t, 1, strings.Count(out, l+"\n"), "line %q printed once", l)
	}
	assert.Equal(t, 1, strings.Count(out, "resuming "), "the job resumed on B and the follower saw it there: %s", out)
	assert.Equal(t, 1, strings.Count(out, " done\n"), out)
	assert.Contains(t, f.stderr.String(), "reconnecting", "the follower lost A and said so")
	assert.Regexp(t, regexp.MustCompile(`job `+regexp.QuoteMeta(id)+`: succeeded \(attempt 1, \d+s\)\n$`), f.stderr.String(),
		"one outcome line ends the output")
}

// `tether wait` rides out its agent's restart at the same address and exits
// with the job's outcome: 1 for a failed job, with its error and class.
func TestCLIWaitAcrossAgentRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tm := fast()
	h := newHarness(t, pgtest.URL(t), tm)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	listen := "TETHER_HTTP_LISTEN=" + addr
	a := h.startAgent(ctx, "waiter", listen)
	c, err := json.Marshal(map[string]any{"duration_ms": 3000, "fail": "boom", "fail_class": "permanent"})
	require.NoError(t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "resumable", Plugin: "resumable", Context: c, Submitter: "e2e"})
	require.NoError(t, err)
	h.waitHandle(ctx, j.ID, 15*time.Second)

	w := startCLI(t, ctx, "wait", j.ID, "--server", "http://"+addr, "-o", "json")
	w.waitOutput(t, ctx, w.stderr, "running", 10*time.Second)
	h.kill9(a)
	h.startAgent(ctx, "waiter", listen)

	code := w.exitCode(t, 40*time.Second)
	assert.Equal(t, 1, code, "a failed job: exit 1; stderr: %s", w.stderr)
	assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`job %s: failed: .*boom.* \[permanent\] \(attempt 1, \d+s\)\n$`, regexp.QuoteMeta(j.ID))), w.stderr.String())
	var got store.Job
	require.NoError(t, json.Unmarshal([]byte(w.stdout.String()), &got), "stdout is the job as JSON alone: %s", w.stdout)
	assert.Equal(t, store.StatusFailed, got.Status)
}
