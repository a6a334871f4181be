package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// Issue 25, item 3. An agent process frozen (SIGSTOP) while its plugin
// processes run on cannot self-fence, so the plugin processes must. Each
// stops its calls at the self-fence point, before stale_job lets another
// agent take the job.

// frozenTimings: self-fence point 2s − 2×250ms − 250ms = 1.25s (the plugins
// stop 10 % earlier), janitor after stale_job 2s.
func frozenTimings() timings { return fast() }

// attemptLine is one line the shell job's script appends to its file.
type attemptLine struct {
	attempt, pid, n int
	t               time.Time
}

func readAttemptLines(t *testing.T, path string) []attemptLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []attemptLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l attemptLine
		var ns int64
		if _, err := fmt.Sscanf(sc.Text(), "attempt=%d pid=%d n=%d t=%d", &l.attempt, &l.pid, &l.n, &ns); err != nil {
			continue // a line being written
		}
		l.t = time.Unix(0, ns)
		out = append(out, l)
	}
	require.NoError(t, sc.Err())
	return out
}

// firstOf is the first line of attempt, if any.
func firstOf(lines []attemptLine, attempt int) (attemptLine, bool) {
	for _, l := range lines {
		if l.attempt == attempt {
			return l, true
		}
	}
	return attemptLine{}, false
}

// secondHost writes a copy of the harness config whose shell plugin keeps
// its state elsewhere, as on another host. Its Cleanup cannot find a
// process group the first host started. It returns the copy's path.
func (h *harness) secondHost() string {
	h.t.Helper()
	b, err := os.ReadFile(h.cfgPath)
	require.NoError(h.t, err)
	dir := filepath.Join(filepath.Dir(h.cfgPath), "host-b")
	require.NoError(h.t, os.MkdirAll(filepath.Join(dir, "shell-state"), 0o755))
	old := filepath.Join(filepath.Dir(h.cfgPath), "shell-state")
	cfg := strings.Replace(string(b), fmt.Sprintf("state_dir: %q", old), fmt.Sprintf("state_dir: %q", filepath.Join(dir, "shell-state")), 1)
	require.NotEqual(h.t, string(b), cfg, "the harness config names no shell state_dir")
	path := filepath.Join(dir, "tether.yaml")
	require.NoError(h.t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// startAgentWith starts an agent with another config file.
func (h *harness) startAgentWith(ctx context.Context, cfgPath, name string) *agentProc {
	h.t.Helper()
	saved := h.cfgPath
	h.cfgPath = cfgPath
	defer func() { h.cfgPath = saved }()
	return h.startAgent(ctx, name)
}

// pluginProcs are the agent's plugin processes (its children), by pid.
func pluginProcs(agent *agentProc) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(agent.cmd.Process.Pid) {
			continue
		}
		if c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(c), "tether-plugin-") {
			out[pid] = f[0] // its state: stopped would be T
		}
	}
	return out
}

// waitAgentEvent waits for an event of kind written by agent.
func (h *harness) waitAgentEvent(ctx context.Context, id, kind, agent string, within time.Duration) event {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, e := range h.events(ctx, id) {
			if e.Kind == kind && e.Agent == agent {
				return e
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s: no %s event by %s after %s: %s", id, kind, agent, within, h.eventSummary(ctx, id))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// A shell job on an agent that is frozen past stale_job. Its plugin kills
// attempt 1's process group at the self-fence point, so when another agent
// fails the attempt as awol (its Cleanup, on another host, finds nothing)
// and runs attempt 2, attempt 1 has stopped writing. Thawed, the frozen
// agent writes nothing for the lease it lost.
func TestFrozenAgentShellJobStopsBeforeTheRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tm := frozenTimings()
	h := newHarness(t, pgtest.URL(t), tm)
	selfFence := tm.StaleJob - 2*tm.Keepalive - tm.KillGrace
	hostB := h.secondHost()

	a := h.startAgent(ctx, "frozen-a")
	out := filepath.Join(h.workDir, "lines")
	script := fmt.Sprintf(`echo $$ > %q/"$TETHER_JOB_ID-$TETHER_JOB_ATTEMPT".pid
i=0
while [ $i -lt 100 ]; do
  i=$((i+1))
  echo "attempt=$TETHER_JOB_ATTEMPT pid=$$ n=$i t=$(date +%%s%%N)" >> %q
  sleep 0.05
done`, h.pidDir, out)
	c, err := json.Marshal(map[string]any{"script": script})
	require.NoError(t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "shell", Plugin: "shell", Context: c, Submitter: "e2e",
		Limits: limits.Set{MaxRetry: 2, RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond}})
	require.NoError(t, err)
	for {
		if _, ok := firstOf(readAttemptLines(t, out), 1); ok {
			break
		}
		require.NoError(t, ctx.Err(), "attempt 1 never wrote a line: %s", h.eventSummary(ctx, j.ID))
		sleep(ctx, 20*time.Millisecond)
	}
	first1, _ := firstOf(readAttemptLines(t, out), 1)
	b := h.startAgentWith(ctx, hostB, "frozen-b")
	plugins := pluginProcs(a)
	require.NotEmpty(t, plugins, "agent %s's plugin processes", a.name)

	h.signal(a, syscall.SIGSTOP)
	frozenAt := time.Now()
	// Attempt 1's group must empty at the plugins' deadline. Attempt 2
	// starts only after stale_job. Watch both until attempt 2 writes.
	var goneAt time.Time
	var first2 attemptLine
	for {
		if goneAt.IsZero() && len(groupMembers(first1.pid)) == 0 {
			goneAt = time.Now()
		}
		if l, ok := firstOf(readAttemptLines(t, out), 2); ok {
			first2 = l
			break
		}
		require.NoError(t, ctx.Err(), "attempt 2 never wrote a line: %s", h.eventSummary(ctx, j.ID))
		sleep(ctx, 20*time.Millisecond)
	}
	t.Logf("frozen at +0; attempt 1's group empty at +%s (self-fence point %s after the last heartbeat); attempt 2's first line at +%s (stale_job %s)",
		goneAt.Sub(frozenAt).Round(time.Millisecond), selfFence, first2.t.Sub(frozenAt).Round(time.Millisecond), tm.StaleJob)
	for pid, state := range pluginProcs(a) {
		assert.NotEqual(t, "T", state, "plugin process %d was meant to run on, not be stopped", pid)
		delete(plugins, pid)
	}
	assert.Empty(t, plugins, "the frozen agent's plugin processes must live on")
	require.False(t, goneAt.IsZero(), "attempt 1's process group %d still had members %v when attempt 2 started", first1.pid, groupMembers(first1.pid))
	assert.True(t, goneAt.Before(first2.t), "attempt 1's group emptied at %s, after attempt 2's first line at %s", goneAt, first2.t)
	assert.Less(t, goneAt.Sub(frozenAt), tm.StaleJob, "attempt 1 stopped after stale_job")
	for _, l := range readAttemptLines(t, out) {
		if l.attempt == 1 && !l.t.Before(first2.t) {
			t.Errorf("attempt 1 wrote line %d at %s, after attempt 2's first at %s", l.n, l.t, first2.t)
		}
	}
	assert.Equal(t, b.name, h.holder(ctx, j.ID), "attempt 2 runs on the other agent")
	var awol bool
	for _, e := range h.events(ctx, j.ID) {
		awol = awol || (e.Agent == b.name && strings.Contains(e.Message, "awol"))
	}
	assert.True(t, awol, "the other agent failed attempt 1 as awol: %s", h.eventSummary(ctx, j.ID))
	lines1 := 0
	for _, l := range readAttemptLines(t, out) {
		if l.attempt == 1 {
			lines1++
		}
	}

	h.signal(a, syscall.SIGCONT)
	lost := h.waitAgentEvent(ctx, j.ID, "lease_lost", a.name, 15*time.Second)
	t.Logf("thawed agent's record: %s", lost.Message)
	h.waitTerminal(ctx, []string{j.ID}, 30*time.Second)
	got := h.job(ctx, j.ID)
	assert.Equal(t, store.StatusSucceeded, got.Status, "error %q; events: %s", got.Error, h.eventSummary(ctx, j.ID))
	assert.Equal(t, 2, got.Attempt)
	h.checkTimeline(ctx, j.ID)
	for _, e := range h.events(ctx, j.ID) {
		if e.Agent == a.name && e.Lease == lost.Lease {
			assert.Contains(t, []string{"claimed", "running", "lease_lost"}, e.Kind, "the frozen agent wrote %s for its lost lease", e.Kind)
		}
	}
	n1 := 0
	for _, l := range readAttemptLines(t, out) {
		if l.attempt == 1 {
			n1++
		}
	}
	assert.Equal(t, lines1, n1, "attempt 1 wrote again after the thaw")
	// The host got the plugin's answer. Its SDK stopped the job.
	assert.Contains(t, lost.Message, "its plugin stopped the job before its lease could expire (no lease renewal had reached it for", "the frozen agent's account")
}

// The same freeze with a resumable plugin. The frozen agent's plugin stops
// watching at its deadline (the work runs on), the other agent resumes the
// job after stale_job, and the work started exactly once.
func TestFrozenAgentResumableJobStopsWatching(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tm := frozenTimings()
	h := newHarness(t, pgtest.URL(t), tm)

	a := h.startAgent(ctx, "frozen-a")
	// tick_ms. The watcher checkpoints often, so it is inside a checkpoint
	// the frozen agent never answers when its deadline comes.
	c, err := json.Marshal(map[string]any{"duration_ms": 8000, "tick_ms": 100})
	require.NoError(t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "resumable", Plugin: "resumable", Context: c, Submitter: "e2e"})
	require.NoError(t, err)
	h.waitHandle(ctx, j.ID, 20*time.Second)
	b := h.startAgent(ctx, "frozen-b")

	h.signal(a, syscall.SIGSTOP)
	frozenAt := time.Now()
	resumed := h.waitAgentEvent(ctx, j.ID, "resumed", b.name, 30*time.Second)
	var unwatched *journalEntry
	for _, l := range readJournal(t, filepath.Join(h.workDir, j.ID+".journal")) {
		if l.Event == "unwatched" && l.AgentPID == a.cmd.Process.Pid {
			unwatched = &l
			break
		}
	}
	require.NotNil(t, unwatched, "the frozen agent's plugin never stopped watching: %s", h.eventSummary(ctx, j.ID))
	t.Logf("frozen at +0; its plugin stopped watching at +%s (%s); resumed by %s at +%s",
		unwatched.time().Sub(frozenAt).Round(time.Millisecond), unwatched.Message, b.name, resumed.At.Sub(frozenAt).Round(time.Millisecond))
	assert.Contains(t, unwatched.Message, plugin.ErrLeaseExpired.Error(), "stopped for its lease")
	assert.True(t, unwatched.time().Before(resumed.At), "the frozen agent's plugin watched on after the job was resumed")

	h.signal(a, syscall.SIGCONT)
	h.waitAgentEvent(ctx, j.ID, "lease_lost", a.name, 15*time.Second)
	h.waitTerminal(ctx, []string{j.ID}, 30*time.Second)
	got := h.job(ctx, j.ID)
	assert.Equal(t, store.StatusSucceeded, got.Status, "error %q; events: %s", got.Error, h.eventSummary(ctx, j.ID))
	assert.Equal(t, 1, got.Attempt, "resumed in the same attempt")
	assert.Equal(t, 1, h.startCount(j.ID), "the work started exactly once")
	h.checkTimeline(ctx, j.ID)
}

// journalEntry is the part of a resumable job's journal line
// (internal/fakeplugintest/resumable) these tests read.
type journalEntry struct {
	Event    string `json:"event"`
	TimeNS   int64  `json:"time_ns"`
	Message  string `json:"message"`
	AgentPID int    `json:"agent_pid"`
}

func (l journalEntry) time() time.Time { return time.Unix(0, l.TimeNS) }

// readJournal reads a resumable job's journal.
func readJournal(t *testing.T, path string) []journalEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []journalEntry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l journalEntry
		require.NoError(t, json.Unmarshal([]byte(line), &l), "journal line %q", line)
		out = append(out, l)
	}
	return out
}
