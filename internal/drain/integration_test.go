package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/jobstate"
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

func startService(t *testing.T, st *store.Store, name string) (*claim.Service, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	plugins, err := pluginhost.New(pluginhost.Config{Dir: pluginDir, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, plugins.Start(ctx))
	h := store.Holder{Name: name, Generation: name + "-gen"}
	_, err = st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 10, Commands: []string{"noop", "shell"}})
	require.NoError(t, err)
	svc := claim.New(st, plugins, claim.Config{
		Holder: h, Capacity: 10,
		Commands: map[string]claim.Command{
			"noop":  {Plugin: "noop"},
			"shell": {Plugin: "shell", Context: json.RawMessage(`{"kill_grace":"200ms"}`)},
		},
		PollInterval: 100 * time.Millisecond, Keepalive: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop := func() {
		cancel()
		<-done
		plugins.Close()
	}
	t.Cleanup(stop)
	return svc, stop
}

func submit(t *testing.T, st *store.Store, command, ctx string) string {
	t.Helper()
	j, _, err := st.Submit(context.Background(), store.SubmitParams{Command: command, Plugin: command, Context: json.RawMessage(ctx)})
	require.NoError(t, err)
	return j.ID
}

func status(t *testing.T, st *store.Store, id string) store.Job {
	t.Helper()
	j, err := st.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

func kinds(t *testing.T, st *store.Store, id string) []string {
	t.Helper()
	evs, err := st.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind+":"+e.Agent)
	}
	return out
}

// A drains with B running. The resumable job moves to B at once, the shell
// job that ends in time succeeds, and the one that does not is stopped.
func TestDrainHandsOffAndStops(t *testing.T) {
	st := store.New(pgtest.DB(t))
	a, _ := startService(t, st, "a")
	resumable := submit(t, st, "noop", `{"wait":true}`)
	quick := submit(t, st, "shell", `{"script":"sleep 1; echo done"}`)
	slow := submit(t, st, "shell", `{"script":"sleep 300"}`)
	require.Eventually(t, func() bool {
		for _, id := range []string{resumable, quick, slow} {
			if status(t, st, id).Status != store.StatusRunning {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
	startService(t, st, "b")

	res, err := Run(context.Background(), a, nil, Config{
		Handoff: config.HandoffImmediate, ShutdownTimeout: 3 * time.Second, StopTimeout: 10 * time.Second, AgentName: "a",
	})
	require.NoError(t, err)
	assert.Equal(t, Result{HandedOff: 1, Stopped: 1}, res)

	assert.Equal(t, store.StatusSucceeded, status(t, st, quick).Status)
	failed := status(t, st, slow)
	assert.Equal(t, store.StatusFailed, failed.Status)
	assert.Equal(t, "agent shut down before the job finished", failed.Error)
	assert.Equal(t, jobstate.Retriable, failed.ErrorClass)

	require.Eventually(t, func() bool { return status(t, st, resumable).Agent == "b" }, 10*time.Second, 20*time.Millisecond)
	evs, err := st.Events(context.Background(), resumable, 0, 0)
	require.NoError(t, err)
	var released *store.Event
	for i := range evs {
		if evs[i].Kind == "released" {
			released = &evs[i]
		}
	}
	require.NotNil(t, released, "events: %v", kinds(t, st, resumable))
	assert.Equal(t, "handoff: agent a draining", released.Message)
	assert.Contains(t, kinds(t, st, resumable), "resumed:b")
	assert.NotContains(t, kinds(t, st, resumable), "lease_lost:a", "the handoff is clean: a wrote nothing after it")
}
