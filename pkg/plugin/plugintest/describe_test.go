package plugintest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// describing is full with a Describer. Its handles name one resource each.
type describing struct{ full }

func (describing) Describe(job *plugin.Job, handle []byte) []plugin.Resource {
	return []plugin.Resource{{
		Kind: "thing", Name: job.ID + "/" + string(handle), Label: "attempt of " + job.Command,
		URL: "https://example.test/" + string(handle), Command: "inspect " + string(handle),
	}}
}

func TestCheckpointCarriesDescription(t *testing.T) {
	plugintest.Run(t, describing{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), &plugin.Job{ID: "j1", Command: "cmd"}, rt)
		require.NoError(t, err)
		assert.Equal(t, [][]byte{[]byte("handle-j1")}, rt.Checkpoints())
		assert.Equal(t, [][]plugin.Resource{{{
			Kind: "thing", Name: "j1/handle-j1", Label: "attempt of cmd",
			URL: "https://example.test/handle-j1", Command: "inspect handle-j1",
		}}}, rt.Descriptions(), "Describe runs on the checkpointed handle and its result reaches the host")

		rt = plugintest.NewRuntime([]byte("h-7"))
		_, err = c.Resume(context.Background(), &plugin.Job{ID: "r"}, rt)
		require.NoError(t, err)
		require.Len(t, rt.Descriptions(), 1, "Resume's checkpoints are described too")
		assert.Equal(t, "r/resumed", rt.Descriptions()[0][0].Name)
	})
}

func TestCheckpointWithoutDescriberCarriesNone(t *testing.T) {
	plugintest.Run(t, full{}, func(t *testing.T, c plugintest.Client) {
		rt := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), &plugin.Job{ID: "j1"}, rt)
		require.NoError(t, err)
		assert.Len(t, rt.Checkpoints(), 1, "the handle is still stored")
		assert.Empty(t, rt.Descriptions(), "a plugin without Describer sends no description: the host records nothing new")
	})
}

// plainRuntime is a host Runtime that does not record descriptions.
type plainRuntime struct{ *plugintest.Runtime }

func (r plainRuntime) CheckpointDescribed() {} // not the interface's signature: hides it

func TestDescriptionIgnoredByPlainHost(t *testing.T) {
	plugintest.Run(t, describing{}, func(t *testing.T, c plugintest.Client) {
		inner := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), &plugin.Job{ID: "j1"}, plainRuntime{inner})
		require.NoError(t, err)
		assert.Equal(t, [][]byte{[]byte("handle-j1")}, inner.Checkpoints(), "a host without DescribedCheckpointer gets a plain Checkpoint")
		assert.Empty(t, inner.Descriptions())
	})
}
