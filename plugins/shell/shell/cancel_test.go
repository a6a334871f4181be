package shell

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// stubbornScript starts a grandchild shell that ignores SIGTERM (and a sleep
// under it, which inherits the ignored signal), writes their PIDs, then
// sleeps itself.
const stubbornScript = `sh -c 'trap "" TERM; sleep 300 & echo $! > sleep.pid; echo $$ > gc.pid; wait' &
echo $$ > leader.pid
echo started
sleep 300`

func TestCancelKillsWholeGroupIncludingStubbornGrandchild(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	rt := &fakeRuntime{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startExecute(ctx, New(), e.job(t, map[string]any{
		"script": stubbornScript, "working_dir": dir, "kill_grace": "300ms",
	}), rt)
	leader := readPID(t, filepath.Join(dir, "leader.pid"))
	gc := readPID(t, filepath.Join(dir, "gc.pid"))
	gcSleep := readPID(t, filepath.Join(dir, "sleep.pid"))
	eventually(t, 5*time.Second, "started", func() bool { return rt.stdout.String() == "started\n" })

	canceledAt := time.Now()
	cancel()
	r := waitResult(t, done, 10*time.Second)
	pe := requireClass(t, r.err, plugin.Retriable)
	if !strings.HasPrefix(pe.Message, "canceled: context canceled") || !strings.Contains(pe.Message, "SIGKILL") {
		t.Errorf("message = %q, want canceled and SIGKILL mentioned", pe.Message)
	}
	if took := r.at.Sub(canceledAt); took < 300*time.Millisecond {
		t.Errorf("Execute returned %s after cancel, before the 300ms grace: SIGKILL came too early", took)
	}
	// Execute returned, so every process of the group must already be gone.
	for name, pid := range map[string]int{"leader": leader, "grandchild sh": gc, "grandchild sleep": gcSleep} {
		if alive(pid) {
			t.Errorf("%s (pid %d) is still alive after Execute returned", name, pid)
		}
	}
	if members, _ := groupMembers(leader); len(members) != 0 {
		t.Errorf("process group %d still has members %v", leader, members)
	}
}

func TestCancelSendsSIGTERMFirst(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startExecute(ctx, New(), e.job(t, map[string]any{
		"script":     "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done",
		"kill_grace": "10s",
	}), rt)
	eventually(t, 5*time.Second, "ready", func() bool { return rt.stdout.String() == "ready\n" })
	cancel()
	r := waitResult(t, done, 5*time.Second) // far below the 10s grace
	pe := requireClass(t, r.err, plugin.Retriable)
	if !strings.Contains(pe.Message, "stopped by SIGTERM") {
		t.Errorf("message = %q", pe.Message)
	}
	if !strings.Contains(rt.stdout.String(), "got TERM") {
		t.Errorf("the script's TERM trap did not run; stdout %q", rt.stdout.String())
	}
}

func TestCancelWakesStoppedProcess(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	done := startExecute(ctx, New(), e.job(t, map[string]any{
		"script": "echo $$ > leader.pid; kill -STOP $$", "working_dir": dir, "kill_grace": "10s",
	}), rt)
	leader := readPID(t, filepath.Join(dir, "leader.pid"))
	eventually(t, 5*time.Second, "stopped leader", func() bool {
		p, err := readProc(leader)
		return err == nil && p.State == 'T'
	})
	cancel()
	// SIGTERM stays pending on a stopped process. SIGCONT lets it act.
	r := waitResult(t, done, 5*time.Second)
	requireClass(t, r.err, plugin.Retriable)
}

func TestLeftoversAreStoppedAfterLeaderExits(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	rt := &fakeRuntime{}
	start := time.Now()
	// The background sleep keeps stdout open. Execute must neither hang on it
	// nor leave it running.
	res, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"script": "sleep 300 & echo $! > bg.pid; echo done", "working_dir": dir, "kill_grace": "200ms",
	}), rt)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if string(res.Output) != `{"exit_code":0}` || rt.stdout.String() != "done\n" {
		t.Errorf("result %s, stdout %q", res.Output, rt.stdout.String())
	}
	bg := readPID(t, filepath.Join(dir, "bg.pid"))
	if alive(bg) {
		t.Errorf("background process %d outlived its job", bg)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Execute took %s", took)
	}
}

func TestCleanupFromFreshPluginKillsRunningGroup(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	job := e.job(t, map[string]any{"script": stubbornScript, "working_dir": dir, "kill_grace": "200ms"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startExecute(ctx, New(), job, &fakeRuntime{})
	gc := readPID(t, filepath.Join(dir, "gc.pid"))
	leader := readPID(t, filepath.Join(dir, "leader.pid"))

	// A second plugin process knows nothing in memory. It finds the group
	// through the state directory.
	other := New()
	if err := other.Cleanup(context.Background(), job); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if alive(gc) || alive(leader) {
		t.Errorf("Cleanup returned but processes live: leader %v, grandchild %v", alive(leader), alive(gc))
	}
	r := waitResult(t, done, 5*time.Second)
	pe := requireClass(t, r.err, plugin.Permanent)
	if !strings.Contains(pe.Message, "killed by signal") {
		t.Errorf("message = %q", pe.Message)
	}
	for i := 0; i < 2; i++ {
		if err := other.Cleanup(context.Background(), job); err != nil {
			t.Fatalf("repeated Cleanup: %v", err)
		}
	}
	if names := dirEntries(t, e.stateDir); len(names) != 0 {
		t.Errorf("state dir not empty: %v", names)
	}
}

// Cleanup of a job still running here stops it the graceful way. The
// group gets kill_grace after SIGTERM (a cancel's stop may be under way), and
// is killed at once only when Cleanup's own deadline comes.
func TestCleanupInSameProcessHonoursGraceUntilItsDeadline(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	job := e.job(t, map[string]any{"script": stubbornScript, "working_dir": dir, "kill_grace": "1m"})
	job.Config = e.config(map[string]any{"max_kill_grace": "1m"})
	p := New()
	done := startExecute(context.Background(), p, job, &fakeRuntime{})
	gc := readPID(t, filepath.Join(dir, "gc.pid"))

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Cleanup(ctx, job); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	took := time.Since(start)
	if took < time.Second {
		t.Errorf("Cleanup took %s: the SIGTERM-ignoring group was killed before Cleanup's deadline", took)
	}
	if took > 10*time.Second {
		t.Errorf("Cleanup took %s: its deadline did not force the kill", took)
	}
	if alive(gc) {
		t.Errorf("grandchild %d alive after Cleanup", gc)
	}
	r := waitResult(t, done, time.Second) // Cleanup waits for Execute to return
	pe := requireClass(t, r.err, plugin.Retriable)
	if !strings.HasPrefix(pe.Message, "canceled: stopped by Cleanup") {
		t.Errorf("message = %q", pe.Message)
	}
}

func TestCleanupInSameProcessWaitsOutTheGrace(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	job := e.job(t, map[string]any{"script": stubbornScript, "working_dir": dir, "kill_grace": "700ms"})
	p := New()
	done := startExecute(context.Background(), p, job, &fakeRuntime{})
	gc := readPID(t, filepath.Join(dir, "gc.pid"))

	start := time.Now()
	if err := p.Cleanup(context.Background(), job); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("Cleanup took %s, less than kill_grace: the grace was skipped", took)
	}
	if alive(gc) {
		t.Errorf("grandchild %d alive after Cleanup", gc)
	}
	waitResult(t, done, time.Second)
}

func TestCleanupUnknownJobSucceeds(t *testing.T) {
	e := newTestEnv(t)
	if err := New().Cleanup(context.Background(), e.job(t, map[string]any{"script": "true"})); err != nil {
		t.Fatalf("Cleanup of an unknown job: %v", err)
	}
	// Also with no state directory at all.
	job := &plugin.Job{ID: "never-ran", Attempt: 1, Config: []byte(`{"state_dir": "/nonexistent/tether-state"}`)}
	if err := New().Cleanup(context.Background(), job); err != nil {
		t.Fatalf("Cleanup with a missing state dir: %v", err)
	}
}

// startGroup starts a process group as if an earlier plugin process had:
// `sleep 300 & echo $!` with the given environment. The leader exits at once
// (and is reaped), leaving the sleep as the group's only member.
func startOrphanedGroup(t *testing.T, env []string) (leader, member int, startTime uint64) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & echo $!")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	leader = cmd.Process.Pid
	t.Cleanup(func() { _ = unix.Kill(-leader, unix.SIGKILL) })
	if err := waitExit(leader); err != nil { // exited but not reaped: stat still readable
		t.Fatal(err)
	}
	info, err := readProc(leader)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	member, err = strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("reading member pid: %v (%q)", err, buf[:n])
	}
	_ = cmd.Wait()
	return leader, member, info.StartTime
}

func TestCleanupAfterCrashFindsGroupByRunMarker(t *testing.T) {
	e := newTestEnv(t)
	leader, member, start := startOrphanedGroup(t, []string{runIDEnv + "=marker123", "PATH=" + basePath})
	workDir := filepath.Join(t.TempDir(), "tether-shell-crashed-1-x")
	if err := os.Mkdir(workDir, 0o700); err != nil {
		t.Fatal(err)
	}
	job := &plugin.Job{ID: "crashed", Attempt: 1, Config: e.config(nil)}
	rec := record{JobID: job.ID, Attempt: 1, PID: leader, PGID: leader, StartTime: start,
		BootID: bootID(), RunID: "marker123", KillGrace: "100ms", WorkDir: workDir}
	if err := writeRecord(e.stateDir, rec); err != nil {
		t.Fatal(err)
	}
	if !alive(member) || alive(leader) {
		t.Fatalf("setup: member alive %v, leader alive %v", alive(member), alive(leader))
	}
	if err := New().Cleanup(context.Background(), job); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if alive(member) {
		t.Errorf("leftover process %d of the crashed run survived Cleanup", member)
	}
	if _, err := os.Stat(workDir); !os.IsNotExist(err) {
		t.Errorf("the crashed run's working dir was not removed")
	}
	if names := dirEntries(t, e.stateDir); len(names) != 0 {
		t.Errorf("record not removed: %v", names)
	}
	if err := New().Cleanup(context.Background(), job); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
}

func TestCleanupNeverKillsARecycledGroup(t *testing.T) {
	e := newTestEnv(t)

	// Leader alive but with another start time. The PID was reused.
	live := exec.Command("sleep", "300")
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	info, err := readProc(live.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Leader gone, the group's member does not carry the run's marker.
	leader, member, start := startOrphanedGroup(t, []string{runIDEnv + "=someone-else", "PATH=" + basePath})

	job := &plugin.Job{ID: "recycled", Attempt: 2, Config: e.config(nil)}
	for i, rec := range []record{
		{PID: live.Process.Pid, PGID: live.Process.Pid, StartTime: info.StartTime - 1, RunID: "r1"},
		{PID: leader, PGID: leader, StartTime: start, RunID: "r2"},
	} {
		rec.JobID, rec.Attempt, rec.BootID, rec.KillGrace = job.ID, i+1, bootID(), "0s"
		if err := writeRecord(e.stateDir, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := New().Cleanup(context.Background(), job); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if !alive(live.Process.Pid) || !alive(member) {
		t.Fatalf("Cleanup killed a process that was not the job's: recycled leader alive %v, foreign member alive %v",
			alive(live.Process.Pid), alive(member))
	}
	if names := dirEntries(t, e.stateDir); len(names) != 0 {
		t.Errorf("records not removed: %v", names)
	}
}

func TestCleanupLeavesLaterAttemptsAlone(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	job := e.job(t, map[string]any{"script": "echo $$ > leader.pid; exec sleep 300", "working_dir": dir, "kill_grace": "0"})
	job.Attempt = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startExecute(ctx, New(), job, &fakeRuntime{})
	leader := readPID(t, filepath.Join(dir, "leader.pid"))

	older := *job
	older.Attempt = 2
	if err := New().Cleanup(context.Background(), &older); err != nil {
		t.Fatal(err)
	}
	if !alive(leader) {
		t.Fatalf("Cleanup of attempt 2 killed attempt 3")
	}
	if names := dirEntries(t, e.stateDir); len(names) != 1 {
		t.Errorf("attempt 3's record should remain: %v", names)
	}
	cancel()
	waitResult(t, done, 5*time.Second)
}

func TestShutdownStopsAllJobsAndRefusesNewOnes(t *testing.T) {
	e := newTestEnv(t)
	p := New()
	var dones []<-chan execResult
	var pids []int
	for i := 0; i < 2; i++ {
		dir := t.TempDir()
		job := e.job(t, map[string]any{"script": stubbornScript, "working_dir": dir, "kill_grace": "1m"})
		job.Config = e.config(map[string]any{"max_kill_grace": "1m"})
		dones = append(dones, startExecute(context.Background(), p, job, &fakeRuntime{}))
		pids = append(pids, readPID(t, filepath.Join(dir, "gc.pid")), readPID(t, filepath.Join(dir, "leader.pid")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Shutdown took %s: it should SIGKILL when its context ends, not wait out the 1m grace", took)
	}
	for _, done := range dones {
		// Shutdown waited for Execute. Only the hand-over to this goroutine
		// remains.
		r := waitResult(t, done, time.Second)
		pe := requireClass(t, r.err, plugin.Retriable)
		if !strings.Contains(pe.Message, "shutting down") {
			t.Errorf("message = %q", pe.Message)
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d survived Shutdown", pid)
		}
	}
	_, err := p.Execute(context.Background(), e.job(t, map[string]any{"script": "true"}), &fakeRuntime{})
	requireClass(t, err, plugin.Retriable)
}

func TestEscapedProcessDoesNotHangExecute(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatalf("this test needs setsid (util-linux): %v", err)
	}
	e := newTestEnv(t)
	dir := t.TempDir()
	rt := &fakeRuntime{}
	start := time.Now()
	// The escaped process leaves the group but keeps stdout open.
	res, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"script":      "setsid sh -c 'echo $$ > esc.pid; exec sleep 300' & while [ ! -s esc.pid ]; do sleep 0.01; done; echo done",
		"working_dir": dir,
	}), rt)
	esc := readPID(t, filepath.Join(dir, "esc.pid"))
	if err != nil || string(res.Output) != `{"exit_code":0}` {
		t.Fatalf("Execute: %v, %v", res, err)
	}
	if took := time.Since(start); took > outputDrainWait+3*time.Second {
		t.Errorf("Execute took %s with an escaped process holding stdout", took)
	}
	if rt.stdout.String() != "done\n" {
		t.Errorf("stdout = %q", rt.stdout.String())
	}
	if !alive(esc) {
		t.Errorf("setup: the escaped process %d is not running; the test proved nothing", esc)
	}
}

// slowRuntime is a host that holds each stdout write back for delay, as an
// agent whose output budget is full does.
type slowRuntime struct {
	fakeRuntime
	delay time.Duration
}

func (s *slowRuntime) Stdout() io.Writer { return slowWriter{&s.fakeRuntime.stdout, s.delay} }

type slowWriter struct {
	w     io.Writer
	delay time.Duration
}

func (s slowWriter) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.w.Write(p)
}

// TestSlowHostGetsAllOutput runs a job that fills its stdout pipe and exits
// while the host takes longer than outputDrainWait to accept each write.
// Everything still in the pipe when the group ended reaches the host.
func TestSlowHostGetsAllOutput(t *testing.T) {
	e := newTestEnv(t)
	rt := &slowRuntime{delay: outputDrainWait + 200*time.Millisecond}
	const size = 96 << 10
	res, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"script": fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", size),
	}), rt)
	if err != nil || string(res.Output) != `{"exit_code":0}` {
		t.Fatalf("Execute: %v, %v", res, err)
	}
	if got := len(rt.stdout.String()); got != size {
		t.Errorf("the host got %d bytes of %d", got, size)
	}
}
