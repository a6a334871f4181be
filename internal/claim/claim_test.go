package claim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
)

var pluginDir string

func TestMain(m *testing.M) {
	dir, cleanup, err := bintest.TempPlugins(context.Background(), map[string]string{
		"noop":  bintest.Noop,
		"shell": "github.com/tetherjobs/tether/plugins/shell",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginDir = dir
	code := pgtest.Run(m)
	cleanup()
	os.Exit(code)
}

var commands = map[string]claim.Command{
	"noop":  {Plugin: "noop"},
	"shell": {Plugin: "shell", Context: json.RawMessage(`{"kill_grace":"300ms"}`)},
}

type agent struct {
	svc    *claim.Service
	cancel context.CancelFunc
	done   chan error
	beats  chan store.HeartbeatResult
	sig    *signals
}

func (a *agent) stop(t *testing.T) {
	t.Helper()
	a.cancel()
	select {
	case err := <-a.done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop within 30s")
	}
}

func startAgent(t *testing.T, st *store.Store, name string, capacity int, tweak func(*claim.Config)) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	plugins, err := pluginhost.New(pluginhost.Config{Dir: pluginDir, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, plugins.Start(ctx))
	h := store.Holder{Name: name, Generation: name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	_, err = st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: capacity, Commands: []string{"noop", "shell"}})
	require.NoError(t, err)
	cfg := claim.Config{
		Holder: h, Capacity: capacity, Commands: commands,
		PollInterval: 100 * time.Millisecond, Keepalive: time.Second, LogFlush: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
	sig := watchSignals(&cfg)
	if tweak != nil {
		tweak(&cfg)
	}
	a := &agent{svc: claim.New(st, plugins, cfg), cancel: cancel, done: make(chan error, 1), sig: sig}
	go func() { a.done <- a.svc.Run(ctx); plugins.Close() }()
	t.Cleanup(func() {
		cancel()
		<-a.done
	})
	return a
}

func submit(t *testing.T, st *store.Store, command string, jobCtx string) store.Job {
	t.Helper()
	j, _, err := st.Submit(context.Background(), store.SubmitParams{Command: command, Plugin: commands[command].Plugin, Context: json.RawMessage(jobCtx)})
	require.NoError(t, err)
	return j
}

func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written within %s", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// privateStore is a store on a PostgreSQL cluster of the test's own, which
// the test may stop and start.
func privateStore(t *testing.T) (*pgcluster.Cluster, *store.Store) {
	t.Helper()
	cluster, url := pgtest.StartCluster(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return cluster, store.New(pool)
}

func eventKinds(t *testing.T, st *store.Store, id string) []string {
	t.Helper()
	evs, err := st.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func logs(t *testing.T, st *store.Store, id, stream string) string {
	t.Helper()
	chunks, err := st.Logs(context.Background(), id, stream, 0, 0)
	require.NoError(t, err)
	var b strings.Builder
	for _, c := range chunks {
		b.Write(c.Data)
	}
	return b.String()
}

func TestNoopJobRunsWithLogsAndResult(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 4, nil)
	j := submit(t, st, "noop", `{"stdout":["hello","world"],"stderr":["careful"],"output":{"n":42}}`)
	done := a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusSucceeded, store.StatusFailed)
	require.Equal(t, store.StatusSucceeded, done.Status, done.Error)
	assert.JSONEq(t, `{"n":42}`, string(done.Result))
	assert.Equal(t, "hello\nworld\n", logs(t, st, j.ID, "stdout"))
	assert.Equal(t, "careful\n", logs(t, st, j.ID, "stderr"))
	assert.Equal(t, []string{"submitted", "claimed", "running", "succeeded"}, eventKinds(t, st, j.ID))
	assert.NotNil(t, done.StartedAt)
}

func TestClassifiedFailureKeepsClass(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 4, nil)
	j := submit(t, st, "noop", `{"fail":{"class":"outcome_unknown","message":"remote vanished"}}`)
	done := a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusSucceeded, store.StatusFailed)
	assert.Equal(t, store.StatusFailed, done.Status)
	assert.Equal(t, "remote vanished", done.Error)
	assert.Equal(t, jobstate.OutcomeUnknown, done.ErrorClass)
}

func TestManyAgentsRunEveryJobExactlyOnce(t *testing.T) {
	st := store.New(pgtest.DB(t))
	const agents, jobs = 4, 2000
	ctx := context.Background()
	// Submit in bulk first so all four agents contend for the same rows.
	for i := 0; i < jobs; i++ {
		_, _, err := st.Submit(ctx, store.SubmitParams{Command: "noop", Plugin: "noop"})
		require.NoError(t, err)
	}
	ended := make(chan claim.Ended, jobs)
	for i := 0; i < agents; i++ {
		startAgent(t, st, fmt.Sprintf("agent-%d", i), 25, func(c *claim.Config) { c.TestSignals.Ended = ended })
	}
	timeout := time.After(3 * time.Minute)
	for n := 0; n < jobs; n++ {
		select {
		case <-ended:
		case <-timeout:
			t.Fatalf("%d of %d jobs ended after 3 minutes", n, jobs)
		}
	}
	var succeeded, runningEvents, finalEvents, distinctRunners int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`).Scan(&succeeded))
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM job_timeline WHERE kind = 'running'`).Scan(&runningEvents))
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM job_timeline WHERE kind IN ('succeeded','failed','canceled')`).Scan(&finalEvents))
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(DISTINCT agent) FROM job_timeline WHERE kind = 'running'`).Scan(&distinctRunners))
	assert.Equal(t, jobs, succeeded, "every job succeeded")
	assert.Equal(t, jobs, runningEvents, "every job was started exactly once")
	assert.Equal(t, jobs, finalEvents, "every job got exactly one final status")
	assert.Equal(t, agents, distinctRunners, "all agents took part")
}

func TestFencedOutAgentStopsTheJobAndWritesNothing(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	dir := t.TempDir()
	cancelFile, waitingFile := filepath.Join(dir, "canceled"), filepath.Join(dir, "waiting")
	a := startAgent(t, st, "a1", 4, nil)
	j := submit(t, st, "noop", fmt.Sprintf(`{"wait":true,"cancel_file":%q,"waiting_file":%q,"stdout":["in the plugin"],"checkpoint":"h"}`, cancelFile, waitingFile))
	running := a.waitCalled(t, st, j.ID)
	// Take the job over only once the plugin call is under way and past its
	// checkpoint. A lease lost while the checkpoint's answer is on its way
	// ends the call through the refused checkpoint, before its context.
	a.waitCheckpointed(t, j.ID)
	waitFile(t, waitingFile, 10*time.Second)

	// Another party takes the job over (as the janitor does on release).
	_, err := st.Pool().Exec(ctx, `UPDATE active_jobs SET lease = lease + 1, agent_name = 'other', agent_generation = 'x' WHERE job_id = $1`, j.ID)
	require.NoError(t, err)

	// The next heartbeat finds the lease gone (under -race on a loaded
	// machine a heartbeat, bounded by the 1 s keepalive, may time out a few
	// times first), and the agent records the loss. The plugin call is
	// cancelled.
	a.waitEnd(t, st, j.ID, 30*time.Second, "lease_lost")
	waitFile(t, cancelFile, 10*time.Second)
	a.waitIdle(t)

	after, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, after.Status, "the fenced-out agent must not write a final status")
	assert.Equal(t, running.Lease+1, after.Lease)
	assert.Contains(t, eventKinds(t, st, j.ID), "lease_lost")
}

func TestCancelRunningJobStopsPluginThenCleansUp(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	dir := t.TempDir()
	cancelFile, cleanupFile, waitingFile := filepath.Join(dir, "canceled"), filepath.Join(dir, "cleaned"), filepath.Join(dir, "waiting")
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) { c.Keepalive = time.Hour }) // only the notification can deliver the cancel fast
	j := submit(t, st, "noop", fmt.Sprintf(`{"wait":true,"cancel_file":%q,"cleanup_file":%q,"waiting_file":%q,"stdout":["in the plugin"],"checkpoint":"h"}`, cancelFile, cleanupFile, waitingFile))
	a.waitCheckpointed(t, j.ID)
	waitFile(t, waitingFile, 10*time.Second) // past its checkpoint: the cancel reaches the call's context

	_, err := st.Cancel(ctx, j.ID, "user asked")
	require.NoError(t, err)
	// Its end is signalled once its Cleanup is recorded too.
	done := a.waitEnd(t, st, j.ID, 10*time.Second, store.StatusCanceled)
	assert.Equal(t, "canceled by request", done.Error)
	waitFile(t, cancelFile, 5*time.Second)
	assert.Equal(t, j.ID, waitFile(t, cleanupFile, 5*time.Second))
	assert.Equal(t, []string{"submitted", "claimed", "running", "cancel_requested", "canceled", "cleanup_ok"}, eventKinds(t, st, j.ID))
}

func TestHeartbeatDeliversCancelWithoutNotification(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) { c.Keepalive = 200 * time.Millisecond })
	j := submit(t, st, "noop", `{"wait":true}`)
	a.waitCalled(t, st, j.ID)
	// Flip the status without the notification Cancel sends.
	_, err := st.Pool().Exec(ctx, `UPDATE jobs SET status = 'canceling' WHERE id = $1`, j.ID)
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 10*time.Second, store.StatusCanceled)
	// The status is written first and Cleanup runs after it, so the job
	// leaves Running a moment after it reads canceled.
	a.waitIdle(t)
}

func TestPluginCrashFailsOnlyThatJob(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 4, nil)
	j := submit(t, st, "noop", `{"stdout":["about to panic"],"panic":true}`)
	done := a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusFailed, store.StatusSucceeded)
	require.Equal(t, store.StatusFailed, done.Status)
	assert.Contains(t, done.Error, "plugin noop crashed")
	next := submit(t, st, "noop", `{"output":{"ok":true}}`)
	ok := a.waitEnd(t, st, next.ID, 30*time.Second, store.StatusFailed, store.StatusSucceeded)
	assert.Equal(t, store.StatusSucceeded, ok.Status, ok.Error)
}

func TestShellJobs(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 4, nil)

	ok := submit(t, st, "shell", `{"script":"echo out; echo err >&2"}`)
	bad := submit(t, st, "shell", `{"command":["sh","-c","echo boom >&2; exit 3"]}`)

	done := a.waitEnd(t, st, ok.ID, 20*time.Second, store.StatusSucceeded, store.StatusFailed)
	require.Equal(t, store.StatusSucceeded, done.Status, done.Error)
	assert.Equal(t, "out\n", logs(t, st, ok.ID, "stdout"))
	assert.Equal(t, "err\n", logs(t, st, ok.ID, "stderr"))

	failed := a.waitEnd(t, st, bad.ID, 20*time.Second, store.StatusSucceeded, store.StatusFailed)
	assert.Equal(t, store.StatusFailed, failed.Status)
	assert.Contains(t, failed.Error, "3")
	assert.Contains(t, failed.Error, "boom")
}

func TestShellCancelKillsTheWholeProcessGroup(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	pidFile := filepath.Join(t.TempDir(), "pids")
	a := startAgent(t, st, "a1", 4, nil)
	// A child that ignores SIGTERM and a grandchild under it.
	script := fmt.Sprintf(`sh -c 'trap "" TERM; sleep 300' & echo $! >> %[1]s; sleep 300 & echo $! >> %[1]s; wait`, pidFile)
	j := submit(t, st, "shell", fmt.Sprintf(`{"script":%q}`, script))
	a.waitCalled(t, st, j.ID)
	var pids []int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(pidFile)
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
		return len(pids) == 2
	}, 10*time.Second, 20*time.Millisecond)

	_, err := st.Cancel(ctx, j.ID, "")
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 15*time.Second, store.StatusCanceled)
	for _, p := range pids {
		assert.Eventually(t, func() bool { return !alive(p) }, 5*time.Second, 20*time.Millisecond, "process %d survived the cancel", p)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

func TestLogsAreCappedWithMarker(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) { c.LogMaxBytes = 64 })
	lines := make([]string, 50)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %02d", i)
	}
	b, _ := json.Marshal(map[string]any{"stdout": lines})
	j := submit(t, st, "noop", string(b))
	a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusSucceeded)
	out := logs(t, st, j.ID, "stdout")
	assert.True(t, strings.HasPrefix(out, "line 00\nline 01\n"), out)
	assert.Contains(t, out, "[tether: stdout truncated at 64 bytes")
	assert.NotContains(t, out, "line 49")
}

func TestSelfFenceDetachesResumableAndStopsOthersThenWritesWhenDatabaseReturns(t *testing.T) {
	cluster, st := privateStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	cancelFile, waitingFile := filepath.Join(dir, "canceled"), filepath.Join(dir, "waiting")
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.SelfFenceAfter = time.Second
	})
	resumable := submit(t, st, "noop", fmt.Sprintf(`{"wait":true,"cancel_file":%q,"waiting_file":%q,"stdout":["in the plugin"],"checkpoint":"h"}`, cancelFile, waitingFile))
	shell := submit(t, st, "shell", `{"script":"sleep 300"}`)
	a.waitCalled(t, st, resumable.ID)
	a.waitCalled(t, st, shell.ID)
	a.waitCheckpointed(t, resumable.ID)
	waitFile(t, waitingFile, 10*time.Second) // past its checkpoint: the fence reaches the call's context

	require.NoError(t, cluster.StopServer(ctx))
	// The fence stops the plugin calls while the database is away.
	waitFile(t, cancelFile, 10*time.Second)
	require.NoError(t, cluster.StartServer(ctx))

	failed := a.waitEnd(t, st, shell.ID, 20*time.Second, store.StatusFailed)
	assert.Contains(t, failed.Error, "lost its database connection")
	assert.Equal(t, jobstate.Retriable, failed.ErrorClass)
	// Released once the database is back. Then, the agent being alive, it is
	// claimed again and resumed, because the NOTIFY of the release wakes it.
	a.waitEnd(t, st, resumable.ID, 20*time.Second, "released")
	var released *store.Event
	evs, err := st.Events(ctx, resumable.ID, 0, 0)
	require.NoError(t, err)
	for i := range evs {
		if evs[i].Kind == "released" {
			released = &evs[i]
		}
	}
	require.NotNil(t, released, "the resumable job is released once the database is back")
	assert.Contains(t, released.Message, "self-fenced")
	j, err := st.GetJob(ctx, resumable.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, j.Status, "released, not failed: its remote work goes on")
	assert.GreaterOrEqual(t, j.Lease, released.Lease, "the lease only moves forward")
}

func TestShortOutageLosesNothing(t *testing.T) {
	cluster, st := privateStore(t)
	ctx := context.Background()
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.SelfFenceAfter = time.Minute
	})
	// The job ends while the database is down. Its output and status wait.
	j := submit(t, st, "shell", `{"script":"echo before; sleep 2; echo after"}`)
	a.waitCalled(t, st, j.ID)
	require.NoError(t, cluster.StopServer(ctx))
	time.Sleep(3 * time.Second)
	require.NoError(t, cluster.StartServer(ctx))
	done := a.waitEnd(t, st, j.ID, 20*time.Second, store.StatusSucceeded, store.StatusFailed)
	assert.Equal(t, store.StatusSucceeded, done.Status, done.Error)
	assert.Equal(t, "before\nafter\n", logs(t, st, j.ID, "stdout"))
}
