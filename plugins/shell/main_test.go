package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/tetherjobs/tether/internal/gobuild"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// These tests drive the real plugin binary through go-plugin, as the agent
// does: what crosses the process boundary (classes, messages, streamed output,
// cancellation) must survive it.

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-shell-bin-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "tether-plugin-shell")
	out, err := gobuild.Command(context.Background(), "go", binPath, ".").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		panic("building the plugin: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func connect(t *testing.T) *plugin.GRPCClient {
	t.Helper()
	c, _ := connectClient(t)
	return c
}

func connectClient(t *testing.T) (*plugin.GRPCClient, *goplugin.Client) {
	t.Helper()
	// Started as the agent starts it, with an empty (scrubbed) environment.
	client := goplugin.NewClient(plugin.ClientConfig(plugin.Process{Path: binPath, Env: []string{}}))
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("starting plugin: %v", err)
	}
	raw, err := rpc.Dispense(plugin.PluginKey)
	if err != nil {
		t.Fatalf("dispensing plugin: %v", err)
	}
	return raw.(*plugin.GRPCClient), client
}

type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type runtime struct{ stdout, stderr buffer }

func (r *runtime) Stdout() io.Writer                        { return &r.stdout }
func (r *runtime) Stderr() io.Writer                        { return &r.stderr }
func (r *runtime) Checkpoint(context.Context, []byte) error { return nil }
func (r *runtime) Handle() []byte                           { return nil }

func job(t *testing.T, jobContext string) *plugin.Job {
	cfg, _ := json.Marshal(map[string]string{"work_root": t.TempDir(), "state_dir": t.TempDir()})
	return &plugin.Job{ID: strings.ReplaceAll(t.Name(), "/", "-"), Attempt: 1, Context: json.RawMessage(jobContext), Config: cfg}
}

func TestBinaryInfo(t *testing.T) {
	info, err := connect(t).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "shell" || !info.Has(plugin.CapCleanup) || !info.Has(plugin.CapHealth) || info.Has(plugin.CapResume) {
		t.Fatalf("Info = %+v; want shell with cleanup and health, without resume", info)
	}
}

func TestBinarySuccessAndFailure(t *testing.T) {
	c := connect(t)
	rt := &runtime{}
	res, err := c.Execute(context.Background(), job(t, `{"command": ["echo", "hi"]}`), rt)
	if err != nil || string(res.Output) != `{"exit_code":0}` || rt.stdout.String() != "hi\n" {
		t.Fatalf("success: res %+v, err %v, stdout %q", res, err, rt.stdout.String())
	}

	_, err = c.Execute(context.Background(), job(t, `{"script": "echo boom >&2; exit 7"}`), &runtime{})
	if plugin.ClassOf(err) != plugin.Permanent || !strings.Contains(err.Error(), "exited with code 7") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failure: %v (class %s)", err, plugin.ClassOf(err))
	}

	_, err = c.Execute(context.Background(), job(t, `{"command": []}`), &runtime{})
	if plugin.ClassOf(err) != plugin.Permanent || !strings.Contains(err.Error(), "context.command: empty argv") {
		t.Fatalf("validation: %v (class %s)", err, plugin.ClassOf(err))
	}
}

func TestBinaryCancelKillsGrandchild(t *testing.T) {
	c, _ := connectClient(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gc, errc := startStubborn(t, c, ctx, dir)
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("canceled Execute succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return after cancel")
	}
	// The host's call returns at once. The plugin's Execute returns once the
	// group is gone, 200ms grace later.
	waitFor(t, "grandchild that ignores SIGTERM to die", func() bool { return !processAlive(gc) })
}

// TestBinaryHostClosingPluginKillsJobs covers the case where the host closes
// the plugin process. The jobs it was running must not outlive it.
func TestBinaryHostClosingPluginKillsJobs(t *testing.T) {
	c, client := connectClient(t)
	gc, _ := startStubborn(t, c, context.Background(), t.TempDir())
	client.Kill()
	waitFor(t, "grandchild that ignores SIGTERM to die", func() bool { return !processAlive(gc) })
}

// startStubborn starts a job whose grandchild ignores SIGTERM and returns the
// grandchild's PID.
func startStubborn(t *testing.T, c *plugin.GRPCClient, ctx context.Context, dir string) (int, <-chan error) {
	t.Helper()
	j := job(t, `{"working_dir": "`+dir+`", "kill_grace": "200ms",
		"script": "sh -c 'trap \"\" TERM; echo $$ > gc.pid; exec sleep 300' & sleep 300"}`)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Execute(ctx, j, &runtime{})
		errc <- err
	}()
	gc := 0
	waitFor(t, "grandchild to start", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "gc.pid"))
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			gc, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return gc > 0
	})
	t.Cleanup(func() { _ = unix.Kill(gc, unix.SIGKILL) }) // only if the test failed
	return gc, errc
}

// processAlive reports whether pid is a live, non-zombie process.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
