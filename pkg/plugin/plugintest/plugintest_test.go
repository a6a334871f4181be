package plugintest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// full implements every optional interface. Its job context drives it.
type full struct{}

type jobCtx struct {
	Fail  string `json:"fail"`  // error class to fail with
	Plain bool   `json:"plain"` // fail with an unclassified error
	Block bool   `json:"block"` // wait for cancellation
	Big   int    `json:"big"`   // bytes of stdout to write
}

func (full) Info(context.Context) (plugin.Info, error) {
	// Claims a capability it lacks. Serve and Direct must ignore the claim.
	return plugin.Info{Name: "full", Version: "1.2.3", Capabilities: []string{"bogus"}}, nil
}

func (full) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	var jc jobCtx
	if len(job.Context) > 0 {
		if err := json.Unmarshal(job.Context, &jc); err != nil {
			return nil, plugin.WithClass(plugin.Permanent, err)
		}
	}
	fmt.Fprintf(rt.Stdout(), "hello %s\n", job.ID)
	fmt.Fprintln(rt.Stderr(), "warning: attempt", job.Attempt)
	if err := rt.Checkpoint(ctx, []byte("handle-"+job.ID)); err != nil {
		return nil, err
	}
	if jc.Big > 0 {
		line := strings.Repeat("x", 99) + "\n"
		for i := 0; i < jc.Big/100; i++ {
			if _, err := fmt.Fprintf(rt.Stdout(), "%s", line); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case jc.Block:
		<-ctx.Done()
		return nil, plugin.WithClass(plugin.Retriable, ctx.Err())
	case jc.Plain:
		return nil, errors.New("plain failure")
	case jc.Fail != "":
		return nil, plugin.Errorf(plugin.ErrorClass(jc.Fail), "failed as %s", jc.Fail)
	}
	out, _ := json.Marshal(map[string]any{"id": job.ID, "config": json.RawMessage(job.Config)})
	return &plugin.Result{Output: out, Message: "done"}, nil
}

func (full) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	fmt.Fprintf(rt.Stdout(), "resumed from %s\n", rt.Handle())
	if err := rt.Checkpoint(ctx, []byte("resumed")); err != nil {
		return nil, err
	}
	return &plugin.Result{Message: "handle now " + string(rt.Handle())}, nil
}

func (full) Cleanup(_ context.Context, job *plugin.Job) error {
	if job.ID == "bad" {
		return plugin.Errorf(plugin.OutcomeUnknown, "cannot tell")
	}
	return nil
}

func (full) HealthCheck(_ context.Context, config json.RawMessage) error {
	if string(config) != `{"ok":true}` {
		return plugin.Errorf(plugin.Retriable, "unhealthy: %s", config)
	}
	return nil
}

// minimal implements only Plugin.
type minimal struct{}

func (minimal) Info(context.Context) (plugin.Info, error) { return plugin.Info{Name: "minimal"}, nil }
func (minimal) Execute(context.Context, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, nil
}

func TestExecuteRoundTrip(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime(nil)
		job := &plugin.Job{ID: "j1", Command: "cmd", Attempt: 2, Config: json.RawMessage(`{"k":"v"}`)}
		res, err := c.Execute(context.Background(), job, rt)
		require.NoError(t, err)
		assert.Equal(t, "done", res.Message)
		assert.JSONEq(t, `{"id":"j1","config":{"k":"v"}}`, string(res.Output))
		assert.Equal(t, "hello j1\n", rt.StdoutString())
		assert.Equal(t, "warning: attempt 2\n", rt.StderrString())
		assert.Equal(t, [][]byte{[]byte("handle-j1")}, rt.Checkpoints())
		assert.Equal(t, []byte("handle-j1"), rt.Handle())
	})
}

func TestLargeOutputArrivesInOrder(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime(nil)
		job := &plugin.Job{ID: "big", Context: json.RawMessage(`{"big":300000}`)}
		_, err := c.Execute(context.Background(), job, rt)
		require.NoError(t, err)
		want := "hello big\n" + strings.Repeat(strings.Repeat("x", 99)+"\n", 3000)
		assert.Equal(t, len(want), len(rt.StdoutString()))
		assert.True(t, rt.StdoutString() == want, "stdout differs from what was written")
	})
}

func TestErrorClassesCrossTheBoundary(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		for _, class := range []plugin.ErrorClass{plugin.Retriable, plugin.Permanent, plugin.OutcomeUnknown} {
			job := &plugin.Job{ID: "e", Context: json.RawMessage(`{"fail":"` + string(class) + `"}`)}
			res, err := c.Execute(context.Background(), job, plugintest.NewRuntime(nil))
			assert.Nil(t, res)
			got, msg := plugintest.Error(t, err)
			assert.Equal(t, class, got)
			assert.Equal(t, "failed as "+string(class), msg)
		}
		_, err := c.Execute(context.Background(), &plugin.Job{Context: json.RawMessage(`{"plain":true}`)}, plugintest.NewRuntime(nil))
		got, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.Permanent, got, "an unclassified error is permanent")
		assert.Equal(t, "plain failure", msg)

		got, msg = plugintest.Error(t, c.Cleanup(context.Background(), &plugin.Job{ID: "bad"}))
		assert.Equal(t, plugin.OutcomeUnknown, got)
		assert.Equal(t, "cannot tell", msg)
		require.NoError(t, c.Cleanup(context.Background(), &plugin.Job{ID: "good"}))

		got, _ = plugintest.Error(t, c.HealthCheck(context.Background(), json.RawMessage(`{}`)))
		assert.Equal(t, plugin.Retriable, got)
		require.NoError(t, c.HealthCheck(context.Background(), json.RawMessage(`{"ok":true}`)))
	})
}

func TestRuntimeErrorsReachThePlugin(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime(nil)
		rt.FailCheckpoints(plugin.Errorf(plugin.Retriable, "lease lost"))
		_, err := c.Execute(context.Background(), &plugin.Job{ID: "x"}, rt)
		got, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.Retriable, got)
		assert.Equal(t, "lease lost", msg)
	})
}

func TestResumeSeesPresetHandle(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime([]byte("h-7"))
		res, err := c.Resume(context.Background(), &plugin.Job{ID: "r"}, rt)
		require.NoError(t, err)
		assert.Equal(t, "resumed from h-7\n", rt.StdoutString())
		assert.Equal(t, "handle now resumed", res.Message, "Handle reflects the plugin's own checkpoint")
		assert.Equal(t, []byte("resumed"), rt.Handle())
	})
}

func TestCapabilitiesComeFromInterfaces(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		info, err := c.Info(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "full", info.Name)
		assert.Equal(t, "1.2.3", info.Version)
		assert.ElementsMatch(t, []string{plugin.CapResume, plugin.CapCleanup, plugin.CapHealth}, info.Capabilities)
	})
	plugintest.Run(t, minimal{}, func(t *testing.T, c plugintest.Client) {
		info, err := c.Info(context.Background())
		require.NoError(t, err)
		assert.Empty(t, info.Capabilities)
		assert.False(t, info.Has(plugin.CapResume))

		res, err := c.Execute(context.Background(), &plugin.Job{}, plugintest.NewRuntime(nil))
		require.NoError(t, err)
		assert.Equal(t, &plugin.Result{}, res, "a nil result arrives as an empty one")

		_, err = c.Resume(context.Background(), &plugin.Job{}, plugintest.NewRuntime(nil))
		_, msg := plugintest.Error(t, err)
		assert.Contains(t, msg, "does not implement Resume")
		_, msg = plugintest.Error(t, c.Cleanup(context.Background(), &plugin.Job{}))
		assert.Contains(t, msg, "does not implement Cleanup")
	})
}

func TestCancelReachesThePlugin(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		ctx, cancel := context.WithCancel(context.Background())
		rt := plugintest.NewRuntime(nil)
		done := make(chan error, 1)
		go func() {
			_, err := c.Execute(ctx, &plugin.Job{ID: "c", Context: json.RawMessage(`{"block":true}`)}, rt)
			done <- err
		}()
		// The checkpoint shows the plugin is running before we cancel.
		require.Eventually(t, func() bool { return len(rt.Checkpoints()) == 1 }, 5*time.Second, 5*time.Millisecond)
		cancel()
		select {
		case err := <-done:
			require.Error(t, err)
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(5 * time.Second):
			t.Fatal("Execute did not return after cancel")
		}
	})
}
