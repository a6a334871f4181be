package claim

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// blockingPlugin runs every job until its context ends. It declares neither
// resume nor Cleanup, so a job it ran ends through the batched final write.
type blockingPlugin struct{ started chan string }

func (blockingPlugin) Info(string) (plugin.Info, bool) { return plugin.Info{Name: "block"}, true }
func (p blockingPlugin) Execute(ctx context.Context, _ string, job *plugin.Job, _ plugin.Runtime) (*plugin.Result, error) {
	p.started <- job.ID
	<-ctx.Done()
	return nil, context.Cause(ctx)
}
func (blockingPlugin) Resume(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, plugin.Errorf(plugin.Permanent, "cannot resume")
}
func (blockingPlugin) Cleanup(context.Context, string, *plugin.Job) error { return nil }
func (blockingPlugin) Renew(context.Context, time.Duration)               {}

// TestShutdownStoresTheStoppedJobsEnd checks that, when Run's context ends,
// the jobs it stops still get their final write through the write batches.
// Those outlive that context (they stop only once every runner has returned).
func TestShutdownStoresTheStoppedJobsEnd(t *testing.T) {
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	h := store.Holder{Name: "shutdown", Generation: "shutdown-1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 2, Commands: []string{"block"}})
	require.NoError(t, err)
	p := blockingPlugin{started: make(chan string, 1)}
	ended := make(chan Ended, 4)
	s := New(st, p, Config{
		Holder: h, Capacity: 2, Commands: map[string]Command{"block": {Plugin: "block"}},
		PollInterval: 50 * time.Millisecond,
		FinalTimeout: time.Minute, // a write stuck behind a stopped batch would wait this long
		TestSignals:  TestSignals{Ended: ended},
	})
	j, _, err := st.Submit(ctx, store.SubmitParams{Command: "block", Plugin: "block", Context: json.RawMessage(`{}`)})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	select {
	case id := <-p.started:
		require.Equal(t, j.ID, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the job never started")
	}

	stop()
	select {
	case e := <-ended:
		assert.Equal(t, j.ID, e.JobID)
		assert.Equal(t, string(store.StatusFailed), e.Status, "stored, not unrecorded: %+v", e)
	case <-time.After(20 * time.Second):
		t.Fatal("the stopped job's end was not stored")
	}
	require.NoError(t, <-done)
	got, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusFailed, got.Status)
	assert.Equal(t, "agent shut down before the job finished", got.Error)
}
