package plugin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

type resumable struct{}

func (resumable) Info(context.Context) (plugin.Info, error) { return plugin.Info{Name: "r"}, nil }
func (resumable) Execute(context.Context, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, nil
}
func (resumable) Resume(context.Context, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, nil
}
func (resumable) Cleanup(context.Context, *plugin.Job) error { return nil }

// logged decorates a plugin by embedding the interface: it hides Resume
// and Cleanup.
type logged struct{ plugin.Plugin }

// forwarding decorates it and forwards what it wraps.
type forwarding struct{ plugin.Plugin }

func (f forwarding) Resume(ctx context.Context, j *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	return f.Plugin.(plugin.Resumer).Resume(ctx, j, rt)
}
func (f forwarding) Cleanup(ctx context.Context, j *plugin.Job) error {
	return f.Plugin.(plugin.Cleaner).Cleanup(ctx, j)
}

// concrete embeds the concrete type, which promotes every method.
type concrete struct{ resumable }

func TestCheckWrappedRefusesADecoratorThatHidesMethods(t *testing.T) {
	err := plugin.CheckWrapped(logged{resumable{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "implements Resume, Cleanup")
	assert.Contains(t, err.Error(), "forward them")
	assert.Error(t, plugin.CheckWrapped(&logged{resumable{}}), "through a pointer too")

	assert.NoError(t, plugin.CheckWrapped(forwarding{resumable{}}))
	assert.NoError(t, plugin.CheckWrapped(concrete{}))
	assert.NoError(t, plugin.CheckWrapped(resumable{}))
	assert.NoError(t, plugin.CheckWrapped(logged{}), "nothing wrapped yet")
	assert.Equal(t, []string{plugin.CapResume, plugin.CapCleanup}, plugin.Capabilities(forwarding{resumable{}}))
}

// traced decorates a plugin by embedding the interface, like logged, and
// says what it wraps through Unwrap.
type traced struct{ plugin.Plugin }

func (t traced) Unwrap() plugin.Plugin { return t.Plugin }

// resumeCounter is a resumable plugin that answers Resume with its own
// result, so a test sees which implementation ran.
type resumeCounter struct{ resumable }

func (resumeCounter) Resume(context.Context, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return &plugin.Result{Output: []byte(`{"resumed_by":"inner"}`)}, nil
}

// A decorator with Unwrap keeps what it wraps: As finds the inner
// plugin's methods, CheckWrapped accepts it, Capabilities reports them,
// and a Resume through the SDK (in-process and over gRPC) reaches the
// inner plugin.
func TestUnwrapKeepsTheWrappedCapabilities(t *testing.T) {
	deco := traced{resumeCounter{}}
	_, ok := plugin.As[plugin.Resumer](deco)
	assert.True(t, ok)
	_, ok = plugin.As[plugin.Resumer](traced{traced{resumeCounter{}}})
	assert.True(t, ok, "through two decorators")
	_, ok = plugin.As[plugin.Validator](deco)
	assert.False(t, ok, "nothing in the chain implements it")
	_, ok = plugin.As[plugin.Resumer](traced{})
	assert.False(t, ok, "nothing wrapped")

	require.NoError(t, plugin.CheckWrapped(deco))
	assert.Equal(t, []string{plugin.CapResume, plugin.CapCleanup}, plugin.Capabilities(deco))

	plugintest.Run(t, deco, func(t *testing.T, c plugintest.Client) {
		res, err := c.Resume(context.Background(), &plugin.Job{ID: "j", Command: "c", Attempt: 1}, plugintest.NewRuntime([]byte(`{}`)))
		require.NoError(t, err)
		assert.JSONEq(t, `{"resumed_by":"inner"}`, string(res.Output))
	})
}
