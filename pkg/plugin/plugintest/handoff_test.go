package plugintest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// backend is a pretend remote service whose work outlives any plugin
// value: it produces lines 1..total for a job, one every step.
type backend struct {
	mu      sync.Mutex
	started map[string]int // job ID → starts
}

const total = 6

// counter is a resumable plugin against backend. With inMemory it keeps its
// position in memory instead of its handle, which a fresh value forgets.
type counter struct {
	be       *backend
	inMemory bool
	pos      int
}

func (c *counter) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "counter"}, nil
}

func (c *counter) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	c.be.mu.Lock()
	c.be.started[job.ID]++
	c.be.mu.Unlock()
	return c.follow(ctx, 0, rt)
}

func (c *counter) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	from := c.pos
	if !c.inMemory {
		n, err := strconv.Atoi(string(rt.Handle()))
		if err != nil {
			return nil, plugin.Errorf(plugin.Permanent, "counter: bad handle %q", rt.Handle())
		}
		from = n
	}
	return c.follow(ctx, from, rt)
}

// follow writes the lines after from, checkpointing each.
func (c *counter) follow(ctx context.Context, from int, rt plugin.Runtime) (*plugin.Result, error) {
	for i := from + 1; i <= total; i++ {
		fmt.Fprintf(rt.Stdout(), "line %d\n", i)
		if err := rt.Checkpoint(ctx, []byte(strconv.Itoa(i))); err != nil {
			return nil, err
		}
		c.pos = i
		select {
		case <-ctx.Done():
			return nil, plugin.WithClass(plugin.Retriable, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond): // the backend's pace
		}
	}
	return &plugin.Result{Output: json.RawMessage(`{"lines":6}`)}, nil
}

func wantLines() string {
	var b strings.Builder
	for i := 1; i <= total; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestHandOffAndCrashResumeOnAFreshValue checks that HandOff and Crash
// resume on a fresh plugin value: a plugin that resumes from its handle
// writes each line once and starts the backend's work once, and one that
// keeps its position in memory is caught writing lines twice.
func TestHandOffAndCrashResumeOnAFreshValue(t *testing.T) {
	for _, move := range []struct {
		name string
		fn   func(*testing.T, plugintest.NewPlugin, *plugin.Job, int) plugintest.Moved
	}{{"hand-off", plugintest.HandOff}, {"crash", plugintest.Crash}} {
		t.Run(move.name, func(t *testing.T) {
			be := &backend{started: map[string]int{}}
			job := &plugin.Job{ID: "j-" + move.name, Command: "count", Attempt: 1}
			m := move.fn(t, func() plugin.Plugin { return &counter{be: be} }, job, 2)
			require.NoError(t, m.Err)
			assert.JSONEq(t, `{"lines":6}`, string(m.Result.Output))
			assert.Equal(t, wantLines(), m.Runtime.StdoutString(), "each line once")
			assert.Equal(t, "6", string(m.Runtime.Handle()))
			assert.Equal(t, 1, be.started[job.ID], "the work started once")

			forgetful := move.fn(t, func() plugin.Plugin { return &counter{be: be, inMemory: true} }, job, 2)
			require.NoError(t, forgetful.Err)
			assert.NotEqual(t, wantLines(), forgetful.Runtime.StdoutString(), "a position kept in memory is lost with the value")
		})
	}
}

// bigHandle checkpoints a handle one byte above the limit.
type bigHandle struct{}

func (bigHandle) Info(context.Context) (plugin.Info, error) { return plugin.Info{Name: "big"}, nil }

func (bigHandle) Execute(ctx context.Context, _ *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	if err := rt.Checkpoint(ctx, make([]byte, plugin.MaxHandleBytes)); err != nil {
		return nil, err
	}
	return nil, rt.Checkpoint(ctx, make([]byte, plugin.MaxHandleBytes+1))
}

// TestHandleLimitIsTheSameInBothModes checks that a handle above
// plugin.MaxHandleBytes is refused alike in-process and over gRPC, with a
// permanent error naming the limit, and one at the limit is stored.
func TestHandleLimitIsTheSameInBothModes(t *testing.T) {
	plugintest.Run(t, bigHandle{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), &plugin.Job{ID: "big", Command: "big", Attempt: 1}, rt)
		class, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.Permanent, class)
		assert.Contains(t, msg, "plugin.MaxHandleBytes")
		require.Len(t, rt.Checkpoints(), 1, "the handle at the limit is stored")
		assert.Len(t, rt.Handle(), plugin.MaxHandleBytes)
	})
}

// validating checks its config: {"grace": "<duration>"} and nothing else.
type validating struct{}

func (validating) Info(context.Context) (plugin.Info, error) { return plugin.Info{Name: "v"}, nil }

func (validating) Execute(context.Context, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, nil
}

func (validating) Validate(_ context.Context, config json.RawMessage, contexts map[string]json.RawMessage) ([]plugin.Problem, error) {
	var c map[string]any
	_ = json.Unmarshal(config, &c)
	var out []plugin.Problem
	for k := range c {
		if k != "grace" {
			out = append(out, plugin.Problem{Field: k, Message: "unknown key"})
		}
	}
	for name, raw := range contexts {
		if string(raw) != "{}" {
			out = append(out, plugin.Problem{Command: name, Field: "", Message: "takes no context"})
		}
	}
	return out, nil
}

func (validating) MaxKillGrace(config json.RawMessage) (time.Duration, error) {
	var c struct{ Grace string }
	_ = json.Unmarshal(config, &c)
	if c.Grace == "" {
		return 0, nil
	}
	return time.ParseDuration(c.Grace)
}

// TestValidateThroughTheClient checks that a test can validate settings as
// the agent does at start, alike in-process and over gRPC: the problems
// found, and the stop time reported only for a config without problems.
func TestValidateThroughTheClient(t *testing.T) {
	plugintest.Run(t, validating{}, func(t *testing.T, c plugintest.Client) {
		ctx := context.Background()
		v, err := c.Validate(ctx, json.RawMessage(`{"grace":"3s"}`), map[string]json.RawMessage{"a": json.RawMessage(`{}`)})
		require.NoError(t, err)
		assert.True(t, v.Checked)
		assert.Empty(t, v.Problems)
		assert.True(t, v.HasMaxKillGrace)
		assert.Equal(t, 3*time.Second, v.MaxKillGrace)

		v, err = c.Validate(ctx, json.RawMessage(`{"grace":"3s","typo":1}`), map[string]json.RawMessage{"b": json.RawMessage(`{"x":1}`)})
		require.NoError(t, err)
		assert.ElementsMatch(t, []plugin.Problem{{Field: "typo", Message: "unknown key"}, {Command: "b", Message: "takes no context"}}, v.Problems)
		assert.False(t, v.HasMaxKillGrace, "no stop time from a config with problems")
	})
}
