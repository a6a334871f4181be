package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestInfo(t *testing.T) {
	info, err := New().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "shell" || info.Version == "" {
		t.Fatalf("Info = %+v, want name shell and a version", info)
	}
}

func TestExecuteCommandSuccess(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	res, err := New().Execute(context.Background(), e.job(t, map[string]any{"command": []string{"echo", "hello", "world"}}), rt)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got := string(res.Output); got != `{"exit_code":0}` {
		t.Errorf("Output = %s, want {\"exit_code\":0}", got)
	}
	if got := rt.stdout.String(); got != "hello world\n" {
		t.Errorf("stdout = %q, want %q", got, "hello world\n")
	}
	if names := dirEntries(t, e.stateDir); len(names) != 0 {
		t.Errorf("state dir not empty after the job: %v", names)
	}
}

func TestExecuteScript(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"script": "echo to-out; echo to-err >&2; x=$((6*7)); echo \"answer $x\"",
	}), rt)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got := rt.stdout.String(); got != "to-out\nanswer 42\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := rt.stderr.String(); got != "to-err\n" {
		t.Errorf("stderr = %q", got)
	}
}

func TestExecuteEnvIsExplicitAndAgentEnvDoesNotLeak(t *testing.T) {
	t.Setenv("FOO_SECRET", "hunter2")
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	job := e.job(t, map[string]any{
		"command": []string{"env"},
		"env":     map[string]string{"GREETING": "hi there", "LANG": "en_US.UTF-8"},
	})
	if _, err := New().Execute(context.Background(), job, rt); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(rt.stdout.String()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if strings.Contains(rt.stdout.String(), "hunter2") || env["FOO_SECRET"] != "" {
		t.Fatalf("agent environment leaked into the job:\n%s", rt.stdout.String())
	}
	want := map[string]string{
		"GREETING":           "hi there",
		"LANG":               "en_US.UTF-8", // the job's env wins over the base
		"PATH":               basePath,
		"TETHER_JOB_ID":      job.ID,
		"TETHER_JOB_ATTEMPT": "1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if !strings.HasPrefix(env["HOME"], filepath.Join(e.workRoot, "tether-shell-")) {
		t.Errorf("HOME = %q, want the per-job working directory", env["HOME"])
	}
	if len(env[runIDEnv]) != 32 {
		t.Errorf("%s = %q, want a 32-hex-digit run marker", runIDEnv, env[runIDEnv])
	}
	allowed := map[string]bool{"HOME": true, runIDEnv: true, "PWD": true, "SHLVL": true, "_": true}
	for k := range want {
		allowed[k] = true
	}
	for k := range env {
		if !allowed[k] {
			t.Errorf("unexpected variable %s in the job's environment", k)
		}
	}
}

func TestExecuteDefaultWorkingDirIsFreshAndRemoved(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	job := e.job(t, map[string]any{"script": "pwd; echo data > file.txt; ls"})
	if _, err := New().Execute(context.Background(), job, rt); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(rt.stdout.String()), "\n")
	dir := lines[0]
	wantPrefix := filepath.Join(e.workRoot, "tether-shell-"+job.ID+"-1-")
	if !strings.HasPrefix(dir, wantPrefix) {
		t.Fatalf("working dir = %q, want prefix %q", dir, wantPrefix)
	}
	if len(lines) != 2 || lines[1] != "file.txt" {
		t.Errorf("working dir was not fresh: ls printed %q", lines[1:])
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("working dir %s still exists after the job (stat err %v)", dir, err)
	}
}

func TestExecuteKeepWorkingDir(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	res, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"script": "echo kept > file.txt", "keep_working_dir": true,
	}), rt)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	var out struct {
		ExitCode   int    `json:"exit_code"`
		WorkingDir string `json:"working_dir"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out.WorkingDir, "file.txt"))
	if err != nil || string(b) != "kept\n" {
		t.Fatalf("kept working dir %q: file.txt = %q, %v", out.WorkingDir, b, err)
	}
}

func TestExecuteExplicitWorkingDir(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\npwd\necho \"args: $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	// A relative program path is resolved in the working directory.
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"command": []string{"./run.sh", "a", "b c"}, "working_dir": dir,
	}), rt)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got, want := rt.stdout.String(), dir+"\nargs: a b c\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil {
		t.Errorf("explicit working dir was touched: %v", err)
	}
	if names := dirEntries(t, e.workRoot); len(names) != 0 {
		t.Errorf("a per-job dir was created although working_dir was set: %v", names)
	}
}

func TestExecuteNonZeroExitReportsCodeAndStderrTail(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{
		"script": "i=1; while [ $i -le 15 ]; do echo line$i >&2; i=$((i+1)); done; exit 3",
	}), rt)
	pe := requireClass(t, err, plugin.Permanent)
	head, tail, ok := strings.Cut(pe.Message, "; last stderr lines:\n")
	if !ok || head != "script exited with code 3" {
		t.Fatalf("message = %q, want it to start with the exit code and then the stderr tail", pe.Message)
	}
	want := "line6\nline7\nline8\nline9\nline10\nline11\nline12\nline13\nline14\nline15"
	if tail != want {
		t.Errorf("stderr tail = %q, want the last 10 lines %q", tail, want)
	}
	if !strings.Contains(rt.stderr.String(), "line1\n") {
		t.Errorf("full stderr was not streamed to the host: %q", rt.stderr.String())
	}
}

func TestExecuteRetryExitCodesAreRetriable(t *testing.T) {
	e := newTestEnv(t)
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{"script": "exit 75", "retry_exit_codes": []int{75, 111}}), &fakeRuntime{})
	pe := requireClass(t, err, plugin.Retriable)
	if pe.Message != "script exited with code 75" {
		t.Errorf("message = %q", pe.Message)
	}
	// Other codes, and signals, stay permanent.
	_, err = New().Execute(context.Background(), e.job(t, map[string]any{"script": "exit 3", "retry_exit_codes": []int{75}}), &fakeRuntime{})
	requireClass(t, err, plugin.Permanent)
	_, err = New().Execute(context.Background(), e.job(t, map[string]any{"script": "kill -9 $$", "retry_exit_codes": []int{75}}), &fakeRuntime{})
	requireClass(t, err, plugin.Permanent)
}

func TestExecuteKilledBySignal(t *testing.T) {
	e := newTestEnv(t)
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{"script": "echo bye >&2; kill -9 $$"}), &fakeRuntime{})
	pe := requireClass(t, err, plugin.Permanent)
	if !strings.HasPrefix(pe.Message, "script was killed by signal SIGKILL") || !strings.Contains(pe.Message, "bye") {
		t.Errorf("message = %q", pe.Message)
	}
}

func TestExecuteCommandNotFound(t *testing.T) {
	e := newTestEnv(t)
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{"command": []string{"no-such-program-tether"}}), &fakeRuntime{})
	pe := requireClass(t, err, plugin.Permanent)
	if !strings.HasPrefix(pe.Message, `context.command[0]: "no-such-program-tether" not found in PATH`) {
		t.Errorf("message = %q", pe.Message)
	}
	// The fresh working directory made for the job is gone with it: no
	// record names it, so Cleanup would never find it.
	left, err := os.ReadDir(e.workRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("work_root holds %d entries after a job that never started, want none (first: %s)", len(left), left[0].Name())
	}
}

func TestExecuteUsesJobPathNotPlugins(t *testing.T) {
	e := newTestEnv(t)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "only-in-job-path"), []byte("#!/bin/sh\necho found\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH")) // the plugin's PATH must not matter
	_, err := New().Execute(context.Background(), e.job(t, map[string]any{"command": []string{"only-in-job-path"}}), &fakeRuntime{})
	requireClass(t, err, plugin.Permanent)

	rt := &fakeRuntime{}
	_, err = New().Execute(context.Background(), e.job(t, map[string]any{
		"command": []string{"only-in-job-path"}, "env": map[string]string{"PATH": bin},
	}), rt)
	if err != nil || rt.stdout.String() != "found\n" {
		t.Fatalf("with env.PATH: err %v, stdout %q", err, rt.stdout.String())
	}
}

func TestExecuteStreamsOutputBeforeExit(t *testing.T) {
	e := newTestEnv(t)
	rt := &fakeRuntime{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startExecute(ctx, New(), e.job(t, map[string]any{
		"script": "echo first; echo first-err >&2; exec sleep 300", "kill_grace": "100ms",
	}), rt)
	eventually(t, 5*time.Second, "streamed output", func() bool {
		return rt.stdout.String() == "first\n" && rt.stderr.String() == "first-err\n"
	})
	select {
	case r := <-done:
		t.Fatalf("Execute returned before the process exited: %+v", r)
	default:
	}
	cancel()
	requireClass(t, waitResult(t, done, 5*time.Second).err, plugin.Retriable)
}

func TestExecuteCanceledBeforeStart(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	_, err := New().Execute(ctx, e.job(t, map[string]any{"script": "touch ran", "working_dir": dir}), &fakeRuntime{})
	pe := requireClass(t, err, plugin.Retriable)
	if !strings.HasPrefix(pe.Message, "canceled") {
		t.Errorf("message = %q", pe.Message)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); !os.IsNotExist(err) {
		t.Errorf("the script ran although the context was already canceled")
	}
}

// failingWriter takes ok writes, then fails every one.
type failingWriter struct {
	ok  int
	got []byte
}

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.ok == 0 {
		return 0, errors.New("host gone")
	}
	w.ok--
	w.got = append(w.got, b...)
	return len(b), nil
}

func TestPumpDiscardsAfterAHostWriteFails(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	host := &failingWriter{ok: 1}
	var tail tailBuffer
	New().pump(log, "stderr", iotest.OneByteReader(strings.NewReader("ab\ncd\n")), host, &tail)
	if string(host.got) != "a" {
		t.Errorf("host got %q, want the first write only", host.got)
	}
	if got := tail.lines(10); strings.Join(got, "|") != "ab|cd" {
		t.Errorf("tail = %q, want all of the output", got)
	}
	if n := strings.Count(logs.String(), "forwarding output to the host failed"); n != 1 {
		t.Errorf("logged the failure %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "reading job output") {
		t.Errorf("EOF logged as a read error:\n%s", logs.String())
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"prog", "bin/tool"} {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, path, want string }{
		{"/bin/sh", "", "/bin/sh"},
		{"./prog", "", filepath.Join(dir, "prog")},
		{"bin/tool", "", filepath.Join(dir, "bin/tool")},
		{"prog", "/nonexistent::/bin", filepath.Join(dir, "prog")}, // an empty entry is the working directory
		{"tool", "bin", filepath.Join(dir, "bin/tool")},
	} {
		got, err := lookPath(tc.name, tc.path, dir)
		if err != nil || got != tc.want {
			t.Errorf("lookPath(%q, %q) = %q, %v; want %q", tc.name, tc.path, got, err, tc.want)
		}
	}
	for _, name := range []string{"prog", "./missing", "bin"} {
		if got, err := lookPath(name, "/nonexistent", dir); err == nil {
			t.Errorf("lookPath(%q) = %q, want an error", name, got)
		}
	}
}
