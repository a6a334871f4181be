package claim

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// fencingPlugin stands in for a plugin process whose SDK stopped the call
// at its lease deadline: Execute reads the deadline the host gives, waits
// for a renewal to arrive, then answers as the SDK does (or with a result,
// when succeed is set, which must not count either).
type fencingPlugin struct {
	caps     []string
	deadline chan time.Duration
	renewed  chan time.Duration

	mu     sync.Mutex
	renews []time.Duration
}

func newFencingPlugin(caps ...string) *fencingPlugin {
	return &fencingPlugin{caps: caps, deadline: make(chan time.Duration, 1), renewed: make(chan time.Duration, 1)}
}

func (p *fencingPlugin) Info(string) (plugin.Info, bool) {
	return plugin.Info{Name: "fence", Capabilities: p.caps}, true
}

func (p *fencingPlugin) Execute(ctx context.Context, _ string, _ *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	ld, ok := rt.(plugin.LeaseDeadliner)
	if !ok {
		return nil, plugin.Errorf(plugin.Permanent, "the host's runtime has no lease deadline")
	}
	p.deadline <- ld.LeaseDeadline()
	select {
	case <-p.renewed:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return nil, &plugin.LeaseExpiredError{Op: "execute", Silent: 1500 * time.Millisecond, PluginSaid: "canceled"}
}

func (p *fencingPlugin) Resume(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	return p.Execute(ctx, name, job, rt)
}

func (p *fencingPlugin) Cleanup(context.Context, string, *plugin.Job) error { return nil }

func (p *fencingPlugin) Renew(_ context.Context, validFor time.Duration) {
	p.mu.Lock()
	p.renews = append(p.renews, validFor)
	p.mu.Unlock()
	select {
	case p.renewed <- validFor:
	default:
	}
}

// runFenced runs one job through p, checks the lease deadline and the
// renewals the plugin got, and returns how the attempt ended.
func runFenced(t *testing.T, p *fencingPlugin) Ended {
	t.Helper()
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	h := store.Holder{Name: "fence-agent", Generation: "fence-1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"fence"}})
	require.NoError(t, err)
	ended := make(chan Ended, 4)
	const selfFenceAfter = 3 * time.Second
	s := New(st, p, Config{
		Holder: h, Capacity: 1, Commands: map[string]Command{"fence": {Plugin: "fence"}},
		PollInterval: 50 * time.Millisecond, Keepalive: 200 * time.Millisecond, SelfFenceAfter: selfFenceAfter,
		TestSignals: TestSignals{Ended: ended},
	})
	_, _, err = st.Submit(ctx, store.SubmitParams{Command: "fence", Plugin: "fence", Context: json.RawMessage(`{}`)})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	var deadline time.Duration
	select {
	case deadline = <-p.deadline:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never reached its plugin")
	}
	assert.Positive(t, deadline, "the call carries a lease deadline")
	assert.LessOrEqual(t, deadline, selfFenceAfter, "no later than the self-fence point")
	select {
	case e := <-ended:
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, v := range p.renews {
			assert.True(t, v > 0 && v <= selfFenceAfter, "renewed for %s: between 0 and the self-fence point", v)
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("the attempt did not end")
		return Ended{}
	}
}

func TestPluginFencedJobFailsRetriably(t *testing.T) {
	e := runFenced(t, newFencingPlugin(plugin.CapCleanup))
	// The default limits allow no retry. The attempt fails, retriable, saying
	// that the plugin stopped it and why.
	assert.Contains(t, []string{string(store.StatusFailed), string(store.StatusQueued)}, e.Status, "%+v", e)
	assert.Contains(t, e.Error, "its plugin stopped the job before its lease could expire (no lease renewal had reached it for 1.5s)", "error %q", e.Error)
}

func TestPluginFencedResumableJobIsReleased(t *testing.T) {
	e := runFenced(t, newFencingPlugin(plugin.CapResume, plugin.CapCleanup))
	assert.Equal(t, "released", e.Status, "%+v", e)
	assert.Contains(t, e.Error, "the plugin stopped the job")
}
