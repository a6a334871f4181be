package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// bins is set once by TestMain before any test runs.
var bins Binaries

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tether-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bins, err = Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer stopKube()
	return pgtest.Run(m)
}

// timings are the agent settings a test runs with.
type timings struct {
	Capacity      int
	PollInterval  time.Duration
	Keepalive     time.Duration
	StaleJob      time.Duration
	OfflineAfter  time.Duration
	CleanInterval time.Duration
	AWOLTimeout   time.Duration
	// KillGrace is the shell plugin's kill_grace and max_kill_grace. It
	// moves the self-fence point (stale_job − 2×keepalive − max_kill_grace).
	KillGrace time.Duration
}

// fast are the short timings most tests use.
func fast() timings {
	return timings{
		Capacity:      10,
		PollInterval:  100 * time.Millisecond,
		Keepalive:     250 * time.Millisecond,
		StaleJob:      2 * time.Second,
		OfflineAfter:  time.Second,
		CleanInterval: 500 * time.Millisecond,
		AWOLTimeout:   60 * time.Second,
		KillGrace:     250 * time.Millisecond,
	}
}

// harness runs agent processes against one database and keeps what their
// jobs leave behind under one directory.
type harness struct {
	t       testing.TB
	dbURL   string
	st      *store.Store
	pool    *pgxpool.Pool
	cfgPath string
	workDir string // resumable work records
	pidDir  string // shell jobs write their $$ here
	tm      timings

	mu     sync.Mutex
	agents []*agentProc
}

func newHarness(t testing.TB, dbURL string, tm timings) *harness {
	t.Helper()
	return newHarnessWith(t, dbURL, tm, "", "")
}

// newHarnessWith is newHarness with extra YAML (indented two spaces) in the
// config's plugins and commands sections.
func newHarnessWith(t testing.TB, dbURL string, tm timings, extraPlugins, extraCommands string) *harness {
	t.Helper()
	root := t.TempDir()
	h := &harness{
		t:       t,
		dbURL:   dbURL,
		cfgPath: filepath.Join(root, "tether.yaml"),
		workDir: filepath.Join(root, "work"),
		pidDir:  filepath.Join(root, "pids"),
		tm:      tm,
	}
	shellState := filepath.Join(root, "shell-state")
	for _, d := range []string{h.workDir, h.pidDir, shellState} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	cfg := fmt.Sprintf(`agent:
  capacity: %d
  poll_interval: %s
  keepalive: %s
  stale_job: %s
  offline_after: %s
  clean_interval: %s
  awol_timeout: %s
  shutdown_timeout: 1s
http:
  listen: 127.0.0.1:0
  shutdown_grace: 1s
plugin_dir: %q
plugins:
  shell:
    config: {state_dir: %q, kill_grace: %s, max_kill_grace: %s}
  resumable:
    config: {work_dir: %q}
%scommands:
  shell: {plugin: shell}
  resumable: {plugin: resumable}
%s`, tm.Capacity, tm.PollInterval, tm.Keepalive, tm.StaleJob, tm.OfflineAfter, tm.CleanInterval, tm.AWOLTimeout,
		bins.PluginDir, shellState, tm.KillGrace, tm.KillGrace, h.workDir, extraPlugins, extraCommands)
	require.NoError(t, os.WriteFile(h.cfgPath, []byte(cfg), 0o600))

	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	h.pool = pool
	h.st = store.New(pool)
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpLogs()
		}
		h.killAll()
		pool.Close()
	})
	return h
}

// agentProc is one `tether run` process.
type agentProc struct {
	name   string
	gen    string // generation it registered with
	cmd    *exec.Cmd
	out    *syncBuf
	done   chan struct{}
	waitEr error
}

func (a *agentProc) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// startAgent starts `tether run` under name and waits until it registered.
// env adds KEY=value overrides (TETHER_* variables) to the agent's environment.
func (h *harness) startAgent(ctx context.Context, name string, env ...string) *agentProc {
	h.t.Helper()
	a := h.spawnAgent(name, env...)
	h.waitRegistered(ctx, a)
	return a
}

func (h *harness) spawnAgent(name string, env ...string) *agentProc {
	h.t.Helper()
	return h.spawnBuild(bins.Tether, h.cfgPath, name, env...)
}

// spawnBuild starts `tether run` from the agent binary bin with the config
// file cfg (spawnAgent's are today's binary and the harness's config).
func (h *harness) spawnBuild(bin, cfg, name string, env ...string) *agentProc {
	h.t.Helper()
	cmd := exec.Command(bin, "run", "--config", cfg, "--log-level", "debug")
	cmd.Env = append([]string{
		"DATABASE_URL=" + h.dbURL,
		"TETHER_AGENT_NAME=" + name,
		"PATH=" + os.Getenv("PATH"),
	}, env...)
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own group, so cleanup can take the agent and its plugins at once.
	// kill9 signals the agent process alone, like a crash would.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(h.t, cmd.Start(), "starting agent %s", name)
	a := &agentProc{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		a.waitEr = cmd.Wait()
		close(a.done)
	}()
	h.mu.Lock()
	h.agents = append(h.agents, a)
	h.mu.Unlock()
	return a
}

// waitRegistered waits for the agent's registration and records its generation.
func (h *harness) waitRegistered(ctx context.Context, a *agentProc) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a.exited() {
			h.t.Fatalf("agent %s exited before registering (%v):\n%s", a.name, a.waitEr, a.out.tail(8000))
		}
		if strings.Contains(a.out.String(), "agent registered") {
			var gen string
			err := h.pool.QueryRow(ctx, `SELECT generation FROM agents WHERE name = $1`, a.name).Scan(&gen)
			if err == nil && strings.Contains(a.out.String(), "generation="+gen) {
				a.gen = gen
				return
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("agent %s did not register within 30s:\n%s", a.name, a.out.tail(8000))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// kill9 kills the agent process, not its plugins. They must notice on their
// own.
func (h *harness) kill9(a *agentProc) {
	h.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		h.t.Fatalf("killing agent %s: %v", a.name, err)
	}
	<-a.done
}

// signal sends sig to the agent process alone, as ECS or a terminal would.
func (h *harness) signal(a *agentProc, sig syscall.Signal) {
	h.t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		h.t.Fatalf("sending %v to agent %s: %v", sig, a.name, err)
	}
}

// waitExit waits up to within for the agent to exit and returns its exit
// code (-1 if a signal ended it).
func (h *harness) waitExit(a *agentProc, within time.Duration) int {
	h.t.Helper()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-a.done:
		return a.cmd.ProcessState.ExitCode()
	case <-t.C:
		h.t.Fatalf("agent %s did not exit within %s:\n%s", a.name, within, a.out.tail(8000))
		return 0
	}
}

// apiAddr waits for the agent's "API listening" log line and returns its
// address (the harness listens on port 0).
func (h *harness) apiAddr(ctx context.Context, a *agentProc) string {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, line := range strings.Split(a.out.String(), "\n") {
			if !strings.Contains(line, "API listening") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if addr, ok := strings.CutPrefix(f, "addr="); ok {
					return addr
				}
			}
		}
		if a.exited() || time.Now().After(deadline) {
			h.t.Fatalf("agent %s logged no API address:\n%s", a.name, a.out.tail(8000))
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func (h *harness) killAll() {
	h.mu.Lock()
	agents := append([]*agentProc(nil), h.agents...)
	h.mu.Unlock()
	for _, a := range agents {
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
	// Detached resumable work leads its own session. Kill each group.
	for _, pid := range pidsIn(h.workDir, ".pid") {
		if cmdlineHas(pid, "resumable-") {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	// Shell jobs' process groups, should the plugin have left any.
	for _, pgid := range pidsIn(h.pidDir, ".pid") {
		if len(groupMembers(pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

func (h *harness) dumpLogs() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.agents {
		h.t.Logf("---- agent %s (generation %s, pid %d) output, last 20kB ----\n%s", a.name, a.gen, a.cmd.Process.Pid, a.out.tail(20000))
	}
}

// submitResumable submits a job on the resumable plugin.
func (h *harness) submitResumable(ctx context.Context, duration time.Duration) string {
	h.t.Helper()
	c, err := json.Marshal(map[string]any{"duration_ms": duration.Milliseconds()})
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "resumable", Plugin: "resumable", Context: c, Submitter: "e2e"})
	require.NoError(h.t, err)
	return j.ID
}

// submitShell submits a shell job that records its process group id
// (the shell plugin makes the script's shell a group leader) and sleeps.
func (h *harness) submitShell(ctx context.Context, sleepFor time.Duration) string {
	h.t.Helper()
	script := fmt.Sprintf(`echo $$ > %q/"$TETHER_JOB_ID".pid; sleep %.3f; echo slept`, h.pidDir, sleepFor.Seconds())
	c, err := json.Marshal(map[string]any{"script": script})
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "shell", Plugin: "shell", Context: c, Submitter: "e2e"})
	require.NoError(h.t, err)
	return j.ID
}

// waitTerminal waits until none of ids is in a non-terminal status.
func (h *harness) waitTerminal(ctx context.Context, ids []string, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var open, found int
		require.NoError(h.t, h.pool.QueryRow(ctx,
			`SELECT count(*) FILTER (WHERE status NOT IN ('succeeded', 'failed', 'canceled')), count(*) FROM jobs WHERE id = ANY($1)`,
			ids).Scan(&open, &found))
		if found != len(ids) {
			h.t.Fatalf("%d of %d jobs vanished from the database", len(ids)-found, len(ids))
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			rows, err := h.pool.Query(ctx, `SELECT j.id, j.status, coalesce(a.agent_name, '-'), coalesce(a.release_reason, '')
				FROM jobs j LEFT JOIN active_jobs a ON a.job_id = j.id
				WHERE j.id = ANY($1) AND j.status NOT IN ('succeeded', 'failed', 'canceled') ORDER BY j.id`, ids)
			require.NoError(h.t, err)
			var lines []string
			for rows.Next() {
				var id, status, agent, reason string
				require.NoError(h.t, rows.Scan(&id, &status, &agent, &reason))
				lines = append(lines, fmt.Sprintf("%s %s agent=%s release=%q events=%s", id, status, agent, reason, h.eventSummary(ctx, id)))
			}
			rows.Close()
			h.t.Fatalf("%d of %d jobs not terminal after %s:\n%s", open, len(ids), within, strings.Join(lines, "\n"))
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// event is one job_timeline row (an event row, or a claim kept in the jobs row).
type event struct {
	ID         int64
	At         time.Time
	Kind       string
	Agent      string
	Generation string
	Lease      int64
	Message    string
}

func (h *harness) events(ctx context.Context, jobID string) []event {
	h.t.Helper()
	rows, err := h.pool.Query(ctx, `SELECT id, at, kind, coalesce(agent, ''), coalesce(generation, ''), coalesce(lease, 0), message
		FROM job_timeline WHERE job_id = $1 ORDER BY id`, jobID)
	require.NoError(h.t, err)
	defer rows.Close()
	var evs []event
	for rows.Next() {
		var e event
		require.NoError(h.t, rows.Scan(&e.ID, &e.At, &e.Kind, &e.Agent, &e.Generation, &e.Lease, &e.Message))
		evs = append(evs, e)
	}
	require.NoError(h.t, rows.Err())
	return evs
}

func (h *harness) eventSummary(ctx context.Context, jobID string) string {
	var parts []string
	for _, e := range h.events(ctx, jobID) {
		parts = append(parts, fmt.Sprintf("%s(%s/%d %q)", e.Kind, e.Agent, e.Lease, e.Message))
	}
	return strings.Join(parts, " ")
}

func isFinal(kind string) bool { return store.Terminal(jobstate.JobStatus(kind)) }

// checkTimeline asserts the lease invariants of one finished job: exactly one
// final event, and no event after it carrying an older lease (a write from a
// fenced-out holder). A lease_lost event is the exception. It is a fenced-out
// holder's record that its write was refused (with its account of the job),
// which may well come after another agent finished the job. It returns the
// final event.
func (h *harness) checkTimeline(ctx context.Context, jobID string) event {
	h.t.Helper()
	evs := h.events(ctx, jobID)
	var finals []event
	for _, e := range evs {
		if isFinal(e.Kind) {
			finals = append(finals, e)
		}
	}
	if len(finals) != 1 {
		h.t.Errorf("job %s: %d final events, want exactly 1: %s", jobID, len(finals), h.eventSummary(ctx, jobID))
		if len(finals) == 0 {
			return event{}
		}
	}
	final := finals[0]
	for _, e := range evs {
		if e.ID > final.ID && e.Lease != 0 && e.Lease < final.Lease && e.Kind != "lease_lost" {
			h.t.Errorf("job %s: event %s (lease %d, agent %s) written after the final %s (lease %d): %s",
				jobID, e.Kind, e.Lease, e.Agent, final.Kind, final.Lease, h.eventSummary(ctx, jobID))
		}
	}
	return final
}

// startCount is how many times the resumable plugin started a job's work.
func (h *harness) startCount(jobID string) int {
	b, err := os.ReadFile(filepath.Join(h.workDir, jobID+".starts"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(h.t, err)
	return bytes.Count(b, []byte("\n"))
}

// shellPGID is the process group a shell job ran in (0 if it never started).
func (h *harness) shellPGID(jobID string) int {
	b, err := os.ReadFile(filepath.Join(h.pidDir, jobID+".pid"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(h.t, err)
	if !bytes.HasSuffix(b, []byte("\n")) {
		return 0 // the shell created the file but has not written the line yet
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(h.t, err)
	return pid
}

func (h *harness) job(ctx context.Context, id string) store.Job {
	h.t.Helper()
	j, err := h.st.GetJob(ctx, id)
	require.NoError(h.t, err)
	return j
}

// dbNow reads the database clock, which every event timestamp comes from.
func (h *harness) dbNow(ctx context.Context) time.Time {
	h.t.Helper()
	var now time.Time
	require.NoError(h.t, h.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	return now
}

// pidsIn reads every <something><suffix> file in dir as a pid.
func pidsIn(dir, suffix string) []int {
	entries, _ := os.ReadDir(dir)
	var pids []int
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdlineHas(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte(s))
}

// groupMembers lists the live (non-zombie) processes in process group pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised name: state ppid pgrp ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// syncBuf is a bytes.Buffer safe for a process's output and a test reading it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuf) tail(n int) string {
	str := s.String()
	if len(str) > n {
		return "…" + str[len(str)-n:]
	}
	return str
}

// ecsContainer is the container the ecs command's task definition runs. Jobs
// give it their script with a container override.
const ecsContainer = "app"

// emulatorEnv is the plugin environment (JSON) that points the AWS SDK at
// the emulator at url with static test credentials and no shared config.
func emulatorEnv(t testing.TB, url string) []byte {
	t.Helper()
	env, err := json.Marshal(map[string]string{
		"AWS_ENDPOINT_URL":            url,
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_REGION":                  "us-east-1",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	})
	require.NoError(t, err)
	return env
}

// newECSHarness is newHarness whose agents also load the ecs plugin, pointed
// at the emulator at emulatorURL with static test credentials, and offer the
// command "ecs": one awslogs container, polled every 200ms.
func newECSHarness(t testing.TB, dbURL string, tm timings, emulatorURL string) *harness {
	t.Helper()
	env := emulatorEnv(t, emulatorURL)
	defaults, err := json.Marshal(map[string]any{
		"poll_interval": "200ms",
		// Above the hostile emulator's 1.5 s CloudWatch delivery lag.
		"log_settle": "2s",
		"task_definition_template": map[string]any{
			"family": "tether-e2e",
			"containerDefinitions": []any{map[string]any{
				"name":    ecsContainer,
				"image":   "busybox",
				"command": []string{"sh", "-c", "exit 0"},
				"logConfiguration": map[string]any{
					"logDriver": "awslogs",
					"options": map[string]string{
						"awslogs-group":         "/tether/e2e",
						"awslogs-stream-prefix": "job",
						"awslogs-region":        "us-east-1",
					},
				},
			}},
		},
	})
	require.NoError(t, err)
	// JSON is YAML: the maps go in as flow mappings.
	plugins := fmt.Sprintf("  ecs:\n    pass_env: [\"AWS_*\"]\n    env: %s\n    config: {cluster: default}\n", env)
	commands := fmt.Sprintf("  ecs:\n    plugin: ecs\n    context: %s\n", defaults)
	return newHarnessWith(t, dbURL, tm, plugins, commands)
}

// submitECS submits an ecs job whose one task runs script under sh. extra
// keys go into the job's context.
func (h *harness) submitECS(ctx context.Context, script string, extra map[string]any) string {
	h.t.Helper()
	c := map[string]any{
		"container_overrides": []any{map[string]any{"name": ecsContainer, "command": []string{"sh", "-c", script}}},
	}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	require.NoError(h.t, err)
	j, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "ecs", Plugin: "ecs", Context: raw, Submitter: "e2e"})
	require.NoError(h.t, err)
	return j.ID
}

// stdout is the job's whole stdout as stored.
func (h *harness) stdout(ctx context.Context, id string) string {
	h.t.Helper()
	var b strings.Builder
	var after int64
	for {
		chunks, err := h.st.Logs(ctx, id, "stdout", after, 1000)
		require.NoError(h.t, err)
		if len(chunks) == 0 {
			return b.String()
		}
		for _, c := range chunks {
			b.Write(c.Data)
			after = c.Seq
		}
	}
}
