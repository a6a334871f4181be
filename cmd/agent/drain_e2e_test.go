package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// runAgent runs `tether run` in the test's process as agent name, on
// dbURL with the plugins of pluginDir, and returns its API's URL and a
// channel that gets its exit code. It fails the test if the agent does not
// get ready.
func runAgent(ctx context.Context, t *testing.T, name, dbURL, pluginDir string) (string, <-chan int) {
	t.Helper()
	addr := freeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "tether.yaml")
	require.NoError(t, os.WriteFile(cfgPath, fmt.Appendf(nil, `
agent:
  name: %s
  poll_interval: 100ms
  keepalive: 500ms
http:
  listen: %q
plugin_dir: %q
commands:
  hold:
    plugin: noop
`, name, addr, pluginDir), 0o600))
	env := map[string]string{"DATABASE_URL": dbURL, "TETHER_CONFIG": cfgPath}
	runCtx, stop := context.WithCancel(ctx)
	done, exited := make(chan int, 1), make(chan struct{})
	var out, errb syncBuf
	go func() {
		done <- run(runCtx, []string{"run", "--log-level", "warn"}, &out, &errb, func(k string) string { return env[k] })
		close(exited)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("agent %s did not stop", name)
		}
	})
	c, err := client.New("http://" + addr)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Ready(ctx) == nil || len(done) > 0 }, 30*time.Second, 50*time.Millisecond)
	require.Empty(t, done, "agent %s exited early: %s", name, errb.String())
	return "http://" + addr, done
}

// `tether agent drain` asks a real agent to drain through the database: it
// reads the request with its next heartbeat, hands its resumable job to the
// other agent exactly as on SIGTERM (released "handoff: agent … draining",
// then resumed there), marks itself stopped and exits 0.
func TestAgentDrainEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pluginDir := t.TempDir()
	require.NoError(t, bintest.Build(ctx, pluginDir, map[string]string{"noop": bintest.Noop}))
	dbURL := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st := store.New(pool)

	urlA, doneA := runAgent(ctx, t, "drain-a", dbURL, pluginDir)
	c := &cli{env: map[string]string{"TETHER_SERVER": urlA}}
	var job wire.Job
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "submit", "hold", "--set-json", "wait=true", "-o", "json").stdout), &job))
	jobID := job.ID
	require.Eventually(t, func() bool {
		j, err := st.GetJob(ctx, jobID)
		return err == nil && j.Status == store.StatusRunning && j.Agent == "drain-a"
	}, 30*time.Second, 50*time.Millisecond)
	urlB, _ := runAgent(ctx, t, "drain-b", dbURL, pluginDir)

	// Asked through the other agent's API: the drained one need not answer.
	c.env["TETHER_SERVER"] = urlB
	r := c.ok(t, "agent", "drain", "drain-a", "--reason", "kernel upgrade", "--by", "ops", "--wait", "--wait-timeout", "60s")
	assert.Contains(t, r.stdout, "agent drain-a: drain requested")
	assert.Contains(t, r.stderr, "agent drain-a: stopped")
	select {
	case code := <-doneA:
		assert.Equal(t, 0, code, "a drain ends the agent as SIGTERM does")
	case <-ctx.Done():
		t.Fatal("agent drain-a did not exit after its drain")
	}

	require.Eventually(t, func() bool {
		j, err := st.GetJob(ctx, jobID)
		return err == nil && j.Agent == "drain-b" && j.Status == store.StatusRunning
	}, 30*time.Second, 50*time.Millisecond)
	evs, err := st.Events(ctx, jobID, 0, 0)
	require.NoError(t, err)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind+":"+e.Agent+":"+e.Message)
	}
	assert.Contains(t, kinds, "released:drain-a:handoff: agent drain-a draining", "handed off as on SIGTERM: %v", kinds)
	assert.Contains(t, kinds, "resumed:drain-b:resumed by drain-b", kinds)

	r = c.ok(t, "agents", "--all", "-o", "json")
	assert.Contains(t, r.stdout, `"by": "ops"`)
	assert.Contains(t, r.stdout, `"reason": "kernel upgrade"`)
	r = c.run(t, "agent", "drain", "drain-a")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `agent "drain-a" stopped; there is nothing to drain (HTTP 409)`)
}
