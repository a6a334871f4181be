package pluginhost_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// leasedRuntime is a job whose lease is good for validFor whenever asked.
type leasedRuntime struct {
	*plugintest.Runtime
	validFor time.Duration
}

func (r leasedRuntime) LeaseDeadline() time.Duration { return r.validFor }

type callResult struct {
	res *plugin.Result
	err error
	at  time.Time
}

func executeAsync(m *pluginhost.Manager, id, jobContext string, rt plugin.Runtime) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		res, err := m.Execute(context.Background(), "noop", job(id, jobContext), rt)
		ch <- callResult{res, err, time.Now()}
	}()
	return ch
}

// Without renewals the plugin process stops the call at its deadline. The
// manager hands that back as a lease expiry, at once (not as a crash after
// waiting for the process to exit), and the process lives on.
func TestLeaseExpiryThroughTheManager(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	const validFor = 300 * time.Millisecond
	begin := time.Now()
	got := <-executeAsync(m, "expire", `{"wait":true}`, leasedRuntime{plugintest.NewRuntime(nil), validFor})
	require.ErrorIs(t, got.err, plugin.ErrLeaseExpired)
	assert.False(t, plugin.IsBroken(got.err))
	assert.Less(t, got.at.Sub(begin), validFor+2*time.Second, "returned long after the deadline")

	res, err := m.Execute(context.Background(), "noop", job("after", `{}`), plugintest.NewRuntime(nil))
	require.NoError(t, err, "the plugin process serves the next job")
	assert.NotNil(t, res)
}

// Renewed every keepalive, a job outlives its first deadline many times
// over and ends as it would have.
func TestManagerRenewKeepsCallsGoing(t *testing.T) {
	m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"})})
	const validFor = 300 * time.Millisecond
	done := executeAsync(m, "renewed", `{"sleep_ms":1500}`, leasedRuntime{plugintest.NewRuntime(nil), validFor})
	tick := time.NewTicker(validFor / 4)
	defer tick.Stop()
	for {
		select {
		case got := <-done:
			require.NoError(t, got.err, "a renewed call must not be stopped")
			return
		case <-tick.C:
			m.Renew(context.Background(), validFor)
		}
	}
}
