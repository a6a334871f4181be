package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// syncBuffer is a concurrency-safe output sink for the fake runtime.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeRuntime stands in for the host.
type fakeRuntime struct {
	stdout, stderr syncBuffer
}

func (f *fakeRuntime) Stdout() io.Writer                        { return &f.stdout }
func (f *fakeRuntime) Stderr() io.Writer                        { return &f.stderr }
func (f *fakeRuntime) Checkpoint(context.Context, []byte) error { return nil }
func (f *fakeRuntime) Handle() []byte                           { return nil }

// testEnv is one test's plugin configuration: its own work root and state dir.
type testEnv struct {
	workRoot, stateDir string
}

func newTestEnv(t *testing.T) testEnv {
	t.Helper()
	return testEnv{workRoot: t.TempDir(), stateDir: t.TempDir()}
}

func (e testEnv) config(extra map[string]any) json.RawMessage {
	m := map[string]any{"work_root": e.workRoot, "state_dir": e.stateDir}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func (e testEnv) job(t *testing.T, jobContext map[string]any) *plugin.Job {
	t.Helper()
	b, err := json.Marshal(jobContext)
	if err != nil {
		t.Fatal(err)
	}
	return &plugin.Job{ID: "job-" + randomHex()[:12], Command: "sh", Attempt: 1, Context: b, Config: e.config(nil)}
}

type execResult struct {
	res *plugin.Result
	err error
	at  time.Time
}

// startExecute runs Execute in the background.
func startExecute(ctx context.Context, p *Plugin, job *plugin.Job, rt plugin.Runtime) <-chan execResult {
	ch := make(chan execResult, 1)
	go func() {
		res, err := p.Execute(ctx, job, rt)
		ch <- execResult{res, err, time.Now()}
	}()
	return ch
}

func waitResult(t *testing.T, ch <-chan execResult, timeout time.Duration) execResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(timeout):
		t.Fatalf("Execute did not return within %s", timeout)
		return execResult{}
	}
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// readPID waits for a file holding a PID and returns it.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 5*time.Second, "pid file "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) }) // if the test failed
	return pid
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	p, err := readProc(pid)
	return err == nil && !p.dead()
}

func requireClass(t *testing.T, err error, class plugin.ErrorClass) *plugin.Error {
	t.Helper()
	var pe *plugin.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *plugin.Error", err, err)
	}
	if pe.Class != class {
		t.Fatalf("error class = %q, want %q (message: %s)", pe.Class, class, pe.Message)
	}
	return pe
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
