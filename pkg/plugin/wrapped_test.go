package plugin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
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
