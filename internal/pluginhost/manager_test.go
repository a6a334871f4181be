package pluginhost_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// binDir holds the plugins TestMain builds, once.
var binDir string

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	dir, cleanup, err := bintest.TempPlugins(ctx, map[string]string{
		"noop": bintest.Noop, "bare": bintest.Bare, "legacy": legacyPkg, "protocols": protocolsPkg,
		// The real plugins, for their validation at start.
		"ecs": ecsPkg, "shell": shellPkg,
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// pluginDir returns a fresh plugin dir holding links to the named plugins,
// each under the name given: {"noop": "noop"} or {"other": "noop"}.
func pluginDir(t *testing.T, names map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for as, built := range names {
		require.NoError(t, os.Symlink(bintest.PluginPath(binDir, built), bintest.PluginPath(dir, as)))
	}
	return dir
}

func start(t *testing.T, cfg pluginhost.Config) *pluginhost.Manager {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := pluginhost.New(cfg)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.NoError(t, m.Start(context.Background()))
	return m
}

func job(id, context string) *plugin.Job {
	return &plugin.Job{ID: id, Command: "test", Attempt: 1, Context: json.RawMessage(context)}
}

func pidOf(t *testing.T, res *plugin.Result) int {
	t.Helper()
	var out struct{ PID int }
	require.NoError(t, json.Unmarshal(res.Output, &out))
	require.NotZero(t, out.PID)
	return out.PID
}

func TestExecuteRoundTrip(t *testing.T) {
	m := start(t, pluginhost.Config{
		Dir:     pluginDir(t, map[string]string{"noop": "noop"}),
		Plugins: map[string]pluginhost.PluginConfig{"noop": {Config: json.RawMessage(`{"region":"x"}`)}},
	})
	rt := plugintest.NewRuntime(nil)
	res, err := m.Execute(context.Background(), "noop", job("j1",
		`{"stdout":["out 1","out 2"],"stderr":["err 1"],"checkpoint":"h-1","output":{"n":42}}`), rt)
	require.NoError(t, err)
	assert.Equal(t, "noop j1", res.Message)
	assert.JSONEq(t, `{"n":42}`, string(res.Output))
	assert.Equal(t, "out 1\nout 2\n", rt.StdoutString())
	assert.Equal(t, "err 1\n", rt.StderrString())
	assert.Equal(t, [][]byte{[]byte("h-1")}, rt.Checkpoints())

	// Resume gets the stored handle.
	rt = plugintest.NewRuntime([]byte("h-1"))
	_, err = m.Resume(context.Background(), "noop", job("j1", `{}`), rt)
	require.NoError(t, err)
	assert.Equal(t, "resumed j1 from \"h-1\"\n", rt.StdoutString())

	// Cleanup reaches the plugin.
	marker := filepath.Join(t.TempDir(), "cleaned")
	require.NoError(t, m.Cleanup(context.Background(), "noop", job("j1", `{"cleanup_file":"`+marker+`"}`)))
	b, err := os.ReadFile(marker)
	require.NoError(t, err)
	assert.Equal(t, "j1", string(b))
}

func TestJobConfigComesFromPluginConfig(t *testing.T) {
	m := start(t, pluginhost.Config{
		Dir:     pluginDir(t, map[string]string{"bare": "bare"}),
		Plugins: map[string]pluginhost.PluginConfig{"bare": {Config: json.RawMessage(`{"a":1}`)}},
	})
	j := job("j", `{"b":2}`)
	j.Config = json.RawMessage(`{"forged":true}`)
	res, err := m.Execute(context.Background(), "bare", j, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	assert.JSONEq(t, `{"b":2}`, string(res.Output))
	assert.JSONEq(t, `{"forged":true}`, string(j.Config), "the caller's job is not modified")
}

func TestErrorClassesPreserved(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	for _, class := range []plugin.ErrorClass{plugin.Retriable, plugin.Permanent, plugin.OutcomeUnknown, ""} {
		_, err := m.Execute(context.Background(), "noop", job("e", `{"fail":{"class":"`+string(class)+`","message":"boom `+string(class)+`"}}`), plugintest.NewRuntime(nil))
		require.Error(t, err)
		want := class
		if want == "" {
			want = plugin.Permanent // an unclassified error
		}
		assert.Equal(t, want, plugin.ClassOf(err))
		assert.Equal(t, "boom "+string(class), err.Error())
	}
}

func TestCapabilitiesDiscovered(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop", "bare": "bare"})})
	infos := m.Infos()
	require.Len(t, infos, 2)
	assert.ElementsMatch(t, []string{plugin.CapResume, plugin.CapCleanup, plugin.CapHealth}, infos["noop"].Capabilities)
	assert.Equal(t, "test", infos["noop"].Version)
	assert.Empty(t, infos["bare"].Capabilities)
	info, ok := m.Info("bare")
	require.True(t, ok)
	assert.Equal(t, "bare", info.Name)
	_, ok = m.Info("nope")
	assert.False(t, ok)

	_, err := m.Resume(context.Background(), "bare", job("r", `{}`), plugintest.NewRuntime([]byte("h")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `plugin bare does not support resume`)
	assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
	err = m.Cleanup(context.Background(), "bare", job("c", `{}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `plugin bare does not support cleanup`)

	_, err = m.Execute(context.Background(), "nope", job("x", `{}`), plugintest.NewRuntime(nil))
	assert.ErrorContains(t, err, `unknown plugin "nope"`)
}

func TestScrubbedEnvironment(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://secret")
	t.Setenv("TETHER_API_TOKENS", "secret-token")
	t.Setenv("TETHER_DATABASE_URL", "postgres://secret2")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds")
	t.Setenv("KUBECONFIG", "/kube")
	t.Setenv("UNRELATED", "no")
	t.Setenv("LC_ALL", "C.UTF-8")
	m := start(t, pluginhost.Config{
		Dir: pluginDir(t, map[string]string{"noop": "noop"}),
		Plugins: map[string]pluginhost.PluginConfig{"noop": {
			PassEnv: []string{"AWS_*", "KUBECONFIG", "DATABASE*", "TETHER*"}, // the last two cover only secrets
			Env:     map[string]string{"EXTRA": "1"},
		}},
	})
	rt := plugintest.NewRuntime(nil)
	_, err := m.Execute(context.Background(), "noop", job("env", `{"print_env":true}`), rt)
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(rt.StdoutString()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	for _, k := range []string{"PATH", "AWS_REGION", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "KUBECONFIG", "EXTRA", "LC_ALL"} {
		assert.Contains(t, env, k)
	}
	assert.Equal(t, "eu-west-1", env["AWS_REGION"])
	assert.Equal(t, "1", env["EXTRA"])
	for _, k := range []string{"DATABASE_URL", "TETHER_API_TOKENS", "TETHER_DATABASE_URL", "UNRELATED"} {
		assert.NotContains(t, env, k)
	}
	for k := range env {
		if strings.HasPrefix(k, "TETHER_") {
			assert.Contains(t, []string{"TETHER_PLUGIN", plugin.LogLevelEnv, plugin.HostEnv}, k, "only the host's own variables (go-plugin's handshake cookie, the log level, what the host is) may start with TETHER_")
		}
	}
	assert.Equal(t, "info", env[plugin.LogLevelEnv], "the agent's log level")
	var host plugin.HostInfo
	require.NoError(t, json.Unmarshal([]byte(env[plugin.HostEnv]), &host), "what the host is")
	assert.Equal(t, plugin.ProtocolVersion, host.Protocol)
	assert.True(t, host.Has(plugin.FeatureHeldOutput))
	assert.NotContains(t, rt.StdoutString(), "secret")
}

// pass_env ["*"] passes everything of the agent's environment except its own
// database settings and secrets. No PG* variable, no DATABASE_URL, no
// TETHER_* reaches the plugin process.
func TestPassEverythingStillScrubsSecrets(t *testing.T) {
	const marker = "tether-test-secret-value"
	secrets := map[string]string{
		"DATABASE_URL": "postgres://u:" + marker + "@db/x", "PGPASSWORD": marker, "PGSSLPASSWORD": marker,
		"PGPASSFILE": "/" + marker + "/.pgpass", "PGSERVICEFILE": "/" + marker + "/pg_service.conf", "PGSSLKEY": "/" + marker + "/key",
		"PGHOST": marker + ".db", "TETHER_API_TOKENS": "ci:" + marker, "TETHER_CONFIG": "/" + marker + ".yaml",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("PLAIN_VALUE", "visible")
	m := start(t, pluginhost.Config{
		Dir:     pluginDir(t, map[string]string{"noop": "noop"}),
		Plugins: map[string]pluginhost.PluginConfig{"noop": {PassEnv: []string{"*"}}},
	})
	rt := plugintest.NewRuntime(nil)
	_, err := m.Execute(context.Background(), "noop", job("env-all", `{"print_env":true}`), rt)
	require.NoError(t, err)
	out := rt.StdoutString()
	assert.Contains(t, out, "PLAIN_VALUE=visible", "pass_env * passes the rest")
	for k := range secrets {
		assert.NotContains(t, out, k+"=")
	}
	assert.NotContains(t, out, marker)
}

func TestPassEnvCannotNameSecrets(t *testing.T) {
	for _, pattern := range []string{"DATABASE_URL", "TETHER_*", "TETHER_API_TOKENS", "PGPASSWORD", "PGSSLPASSWORD", "PGPASSFILE", "PG*"} {
		_, err := pluginhost.New(pluginhost.Config{Dir: t.TempDir(), Plugins: map[string]pluginhost.PluginConfig{"x": {PassEnv: []string{pattern}}}})
		assert.ErrorContains(t, err, "never passed to plugins", pattern)
	}
}

func TestSHA256Pinning(t *testing.T) {
	dir := pluginDir(t, map[string]string{"noop": "noop"})
	bad := strings.Repeat("ab", 32)
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Plugins: map[string]pluginhost.PluginConfig{"noop": {SHA256: bad}}})
	require.NoError(t, err)
	defer m.Close()
	err = m.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `starting plugin "noop"`)
	assert.Contains(t, err.Error(), "plugins.noop.sha256 is "+bad)
	assert.Contains(t, err.Error(), "refusing to run it")
	assert.Error(t, m.Ready())

	f, err := os.ReadFile(bintest.PluginPath(binDir, "noop"))
	require.NoError(t, err)
	sum := sha256.Sum256(f)
	m = start(t, pluginhost.Config{Dir: dir, Plugins: map[string]pluginhost.PluginConfig{"noop": {SHA256: hex.EncodeToString(sum[:])}}})
	require.NoError(t, m.Ready())

	_, err = pluginhost.New(pluginhost.Config{Dir: dir, Plugins: map[string]pluginhost.PluginConfig{"noop": {SHA256: "xyz"}}})
	assert.ErrorContains(t, err, "plugins.noop.sha256")
}

func TestStartChecksNames(t *testing.T) {
	m, err := pluginhost.New(pluginhost.Config{Dir: pluginDir(t, map[string]string{"other": "noop"}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	defer m.Close()
	err = m.Start(context.Background())
	assert.ErrorContains(t, err, `reports plugin name "noop", want "other"`)

	m, err = pluginhost.New(pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Plugins: map[string]pluginhost.PluginConfig{"shell": {}}})
	require.NoError(t, err)
	defer m.Close()
	err = m.Start(context.Background())
	assert.ErrorContains(t, err, "plugins.shell: no binary tether-plugin-shell")
}

func TestReady(t *testing.T) {
	m, err := pluginhost.New(pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	assert.Error(t, m.Ready(), "not started yet")
	require.NoError(t, m.Start(context.Background()))
	assert.NoError(t, m.Ready())
	m.Close()
	assert.Error(t, m.Ready())
	_, err = m.Execute(context.Background(), "noop", job("x", `{}`), plugintest.NewRuntime(nil))
	assert.ErrorContains(t, err, "closed")
}

func TestCrashFailsInFlightJobsAndRestarts(t *testing.T) {
	met := metrics.New()
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"}),
		OnCrash: func(p string) { met.PluginRestarts.WithLabelValues(p).Inc() }})
	res, err := m.Execute(context.Background(), "noop", job("before", `{}`), plugintest.NewRuntime(nil))
	require.NoError(t, err)
	pidBefore := pidOf(t, res)

	// A bystander job is in flight on the same process when another panics.
	bystander := make(chan error, 1)
	bystanderRT := plugintest.NewRuntime(nil)
	go func() {
		_, err := m.Execute(context.Background(), "noop", job("bystander", `{"checkpoint":"started","wait":true}`), bystanderRT)
		bystander <- err
	}()
	require.Eventually(t, func() bool { return len(bystanderRT.Checkpoints()) == 1 }, 5*time.Second, 5*time.Millisecond)

	_, err = m.Execute(context.Background(), "noop", job("boom", `{"panic":true}`), plugintest.NewRuntime(nil))
	require.Error(t, err)
	assert.Equal(t, plugin.Retriable, plugin.ClassOf(err))
	assert.True(t, strings.HasPrefix(err.Error(), "plugin noop crashed"), err.Error())
	assert.Contains(t, err.Error(), "panic: noop: panic requested by job boom", "the crash error carries the plugin's last stderr lines")

	select {
	case err := <-bystander:
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "plugin noop crashed"), err.Error())
		assert.Equal(t, plugin.Retriable, plugin.ClassOf(err))
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight job did not fail after the crash")
	}

	res, err = m.Execute(context.Background(), "noop", job("after", `{"stdout":["fine"]}`), plugintest.NewRuntime(nil))
	require.NoError(t, err, "the next job runs on a restarted process")
	assert.NotEqual(t, pidBefore, pidOf(t, res))
	restarts, err := met.Value("tether_plugin_restarts_total", map[string]string{"plugin": "noop"})
	require.NoError(t, err)
	assert.Equal(t, 1.0, restarts, "one crash, counted once although two calls saw it")
	assert.NoError(t, m.Ready())
}

func TestConcurrentJobsShareOneProcess(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	const n = 20
	var wg sync.WaitGroup
	pids := make([]int, n)
	errs := make([]error, n)
	outs := make([]string, n)
	begin := time.Now()
	for i := range n {
		wg.Go(func() {
			rt := plugintest.NewRuntime(nil)
			res, err := m.Execute(context.Background(), "noop", job(fmt.Sprint(i), fmt.Sprintf(`{"sleep_ms":300,"stdout":["job %d"]}`, i)), rt)
			errs[i] = err
			if err == nil {
				var out struct{ PID int }
				_ = json.Unmarshal(res.Output, &out)
				pids[i] = out.PID
			}
			outs[i] = rt.StdoutString()
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, pids[0], pids[i], "one process per plugin")
		assert.Equal(t, fmt.Sprintf("job %d\n", i), outs[i], "each job's output goes to its own runtime")
	}
	assert.Less(t, elapsed, 3*time.Second, "jobs ran concurrently (serially they take %s)", n*300*time.Millisecond)
}

func TestCancelReachesPlugin(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	marker := filepath.Join(t.TempDir(), "cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	rt := plugintest.NewRuntime(nil)
	done := make(chan error, 1)
	go func() {
		_, err := m.Execute(ctx, "noop", job("c", `{"checkpoint":"up","wait":true,"cancel_file":"`+marker+`"}`), rt)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) == 1 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return after cancel")
	}
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "c"
	}, 5*time.Second, 10*time.Millisecond, "the plugin saw its context cancelled")

	// The process survives a cancelled job.
	_, err := m.Execute(context.Background(), "noop", job("next", `{}`), plugintest.NewRuntime(nil))
	assert.NoError(t, err)
}

func TestRuntimeWriteErrorReachesPlugin(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	rt := plugintest.NewRuntime(nil)
	rt.FailCheckpoints(plugin.Errorf(plugin.Retriable, "lease lost"))
	_, err := m.Execute(context.Background(), "noop", job("x", `{"checkpoint":"h"}`), rt)
	require.Error(t, err)
	assert.Equal(t, plugin.Retriable, plugin.ClassOf(err))
	assert.Equal(t, "lease lost", err.Error())
}

func TestCloseStopsInFlightJobs(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	marker := filepath.Join(t.TempDir(), "cancelled")
	rt := plugintest.NewRuntime(nil)
	done := make(chan error, 1)
	go func() {
		_, err := m.Execute(context.Background(), "noop", job("c", `{"checkpoint":"up","wait":true,"cancel_file":"`+marker+`"}`), rt)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) == 1 }, 5*time.Second, 5*time.Millisecond)
	begin := time.Now()
	m.Close()
	assert.Less(t, time.Since(begin), 2*time.Second, "the plugin exits promptly once its calls return")
	select {
	case err := <-done:
		assert.ErrorContains(t, err, "plugin noop was stopped")
		assert.Equal(t, plugin.Retriable, plugin.ClassOf(err))
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return after Close")
	}
	b, err := os.ReadFile(marker)
	require.NoError(t, err, "the plugin cancelled the in-flight job before exiting")
	assert.Equal(t, "c", string(b))
}

// BenchmarkExecuteNoop measures no-op jobs through a real plugin process,
// 8 in flight at a time: "quiet" jobs only return, "output" jobs also write
// a line and checkpoint (so the plugin dials the host's Runtime).
func BenchmarkExecuteNoop(b *testing.B) {
	dir := b.TempDir()
	require.NoError(b, os.Symlink(bintest.PluginPath(binDir, "noop"), bintest.PluginPath(dir, "noop")))
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(b, err)
	defer m.Close()
	require.NoError(b, m.Start(context.Background()))
	for _, bc := range []struct{ name, ctx string }{
		{"quiet", `{}`},
		{"output", `{"stdout":["hello"],"checkpoint":"h"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := m.Execute(context.Background(), "noop", job("b", bc.ctx), plugintest.NewRuntime(nil)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// Only names the plugins to start. A binary in the directory that is not
// named is never started, even when it could not start at all.
func TestOnlyTheNamedPluginsStart(t *testing.T) {
	dir := pluginDir(t, map[string]string{"noop": "noop", "bare": "bare"})
	require.NoError(t, os.WriteFile(bintest.PluginPath(dir, "broken"), []byte("#!/bin/sh\nexit 3\n"), 0o755))
	m := start(t, pluginhost.Config{Dir: dir, Only: []string{"noop"}})
	_, ok := m.Info("noop")
	assert.True(t, ok, "noop is named")
	_, ok = m.Info("bare")
	assert.False(t, ok, "bare is not named, so not started")
	_, ok = m.Info("broken")
	assert.False(t, ok)
}
