package plugintest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// leased is a host Runtime whose job's lease is good for validFor from the
// moment the host asks (plugin.LeaseDeadliner).
type leased struct {
	*plugintest.Runtime
	validFor time.Duration
}

func (l leased) LeaseDeadline() time.Duration { return l.validFor }

// frozenHost is a host Runtime that never answers a checkpoint or a write,
// like an agent stopped with SIGSTOP.
type frozenHost struct {
	leased
	called chan struct{}
	thaw   chan struct{} // closed when the test ends
}

func (f frozenHost) Stdout() io.Writer { return frozenWriter(f.thaw) }

type frozenWriter chan struct{}

func (w frozenWriter) Write(p []byte) (int, error) {
	<-w
	return len(p), nil
}

func (f frozenHost) Checkpoint(ctx context.Context, _ []byte) error {
	close(f.called)
	<-ctx.Done()
	return ctx.Err()
}

// waiter blocks every call until its context ends or release is closed,
// and reports the context's cause. With checkpoint it first checkpoints on
// an uncancelled context, as the ECS and Spark plugins do.
type waiter struct {
	started    chan struct{}
	release    chan struct{}
	cause      chan error
	succeed    bool // return a result even when stopped
	checkpoint bool
	ckptErr    chan error
}

func newWaiter() *waiter {
	return &waiter{started: make(chan struct{}), release: make(chan struct{}), cause: make(chan error, 1), ckptErr: make(chan error, 1)}
}

func (*waiter) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "waiter", Version: "test"}, nil
}

func (w *waiter) Execute(ctx context.Context, _ *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	close(w.started)
	if w.checkpoint {
		// Output first. The checkpoint flushes it, to a host that does
		// not answer.
		fmt.Fprintln(rt.Stdout(), "tick")
		w.ckptErr <- rt.Checkpoint(context.WithoutCancel(ctx), json.RawMessage(`{"h":1}`))
	}
	select {
	case <-ctx.Done():
		w.cause <- context.Cause(ctx)
		if w.succeed {
			return &plugin.Result{Message: "finished while being stopped"}, nil
		}
		return nil, plugin.Errorf(plugin.Retriable, "stopped: %v", context.Cause(ctx))
	case <-w.release:
		w.cause <- nil
		return &plugin.Result{Message: "released"}, nil
	}
}

type outcome struct {
	res *plugin.Result
	err error
	at  time.Time
}

func execute(c plugintest.Client, rt plugin.Runtime) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := c.Execute(context.Background(), &plugin.Job{ID: "lease"}, rt)
		ch <- outcome{res, err, time.Now()}
	}()
	return ch
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		var zero T
		return zero
	}
}

func TestLeaseDeadlineStopsTheCall(t *testing.T) {
	for _, succeed := range []bool{false, true} {
		name := map[bool]string{false: "plugin returns an error", true: "plugin returns a result"}[succeed]
		t.Run(name, func(t *testing.T) {
			w := newWaiter()
			w.succeed = succeed
			c := plugintest.Connect(t, w)
			const validFor = 300 * time.Millisecond
			sent := time.Now()
			done := execute(c, leased{plugintest.NewRuntime(nil), validFor})

			got := wait(t, done, "Execute")
			require.ErrorIs(t, got.err, plugin.ErrLeaseExpired, "the call must end as lease-expired, never as the plugin's success or failure")
			assert.Nil(t, got.res)
			var le *plugin.LeaseExpiredError
			require.ErrorAs(t, got.err, &le)
			assert.InDelta(t, float64(validFor-validFor/10), float64(le.Silent), float64(100*time.Millisecond), "silent for about valid_for − margin")
			assert.False(t, plugin.IsBroken(got.err), "a lease expiry is not a broken call")
			assert.ErrorIs(t, wait(t, w.cause, "cause"), plugin.ErrLeaseExpired, "the plugin sees why in context.Cause")
			took := got.at.Sub(sent)
			assert.GreaterOrEqual(t, took, validFor-validFor/10, "stopped before the deadline")
			assert.Less(t, took, validFor+time.Second, "stopped long after the deadline")
			if !succeed {
				assert.Contains(t, le.PluginSaid, "stopped:", "what the plugin said is kept for the record")
			}
		})
	}
}

func TestRenewMovesTheDeadline(t *testing.T) {
	w := newWaiter()
	c := plugintest.Connect(t, w)
	gc := c.(*plugin.GRPCClient)
	const validFor = 400 * time.Millisecond
	done := execute(c, leased{plugintest.NewRuntime(nil), validFor})
	wait(t, w.started, "start")

	// It is renewed every quarter of its validity for three validities. The
	// call must outlive its first deadline by far.
	tick := time.NewTicker(validFor / 4)
	defer tick.Stop()
	for range 12 {
		<-tick.C
		supported, err := gc.Renew(context.Background(), validFor)
		require.NoError(t, err)
		require.True(t, supported)
	}
	select {
	case got := <-done:
		t.Fatalf("the call ended although it was renewed: %v", got.err)
	default:
	}
	lastRenew := time.Now()
	got := wait(t, done, "Execute after the renewals stopped")
	require.ErrorIs(t, got.err, plugin.ErrLeaseExpired)
	assert.GreaterOrEqual(t, got.at.Sub(lastRenew), validFor-validFor/10-validFor/4, "the last renewal's deadline")
	assert.ErrorIs(t, wait(t, w.cause, "cause"), plugin.ErrLeaseExpired)
}

func TestNoLeaseDeadline(t *testing.T) {
	for name, rt := range map[string]plugin.Runtime{
		// An older host sends no lease_valid_for_ms at all. On the wire that
		// is the same as 0.
		"older host":         plugintest.NewRuntime(nil),
		"self-fencing off":   leased{plugintest.NewRuntime(nil), 0},
		"renewed regardless": leased{plugintest.NewRuntime(nil), 0},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWaiter()
			c := plugintest.Connect(t, w)
			done := execute(c, rt)
			wait(t, w.started, "start")
			if name == "renewed regardless" {
				// A Renew does not give a call without a deadline one.
				_, err := c.(*plugin.GRPCClient).Renew(context.Background(), time.Millisecond)
				require.NoError(t, err)
			}
			select {
			case got := <-done:
				t.Fatalf("a call without a deadline ended on its own: %v", got.err)
			case <-time.After(300 * time.Millisecond):
			}
			close(w.release)
			got := wait(t, done, "Execute")
			require.NoError(t, got.err)
			assert.Equal(t, "released", got.res.Message)
			assert.NoError(t, wait(t, w.cause, "cause"))
		})
	}
}

// A checkpoint the frozen host never answers is cut at the deadline even
// on an uncancelled context (the ECS and Spark plugins checkpoint that way).
func TestCheckpointStopsAtTheLeaseDeadline(t *testing.T) {
	w := newWaiter()
	w.checkpoint = true
	c := plugintest.Connect(t, w)
	host := frozenHost{leased{plugintest.NewRuntime(nil), 300 * time.Millisecond}, make(chan struct{}), make(chan struct{})}
	t.Cleanup(func() { close(host.thaw) })
	begin := time.Now()
	done := execute(c, host)
	err := wait(t, w.ckptErr, "the checkpoint's return")
	require.ErrorIs(t, err, plugin.ErrLeaseExpired)
	// Nothing waits for the frozen host's answer to the output's flush.
	assert.Less(t, time.Since(begin), 300*time.Millisecond+500*time.Millisecond, "the checkpoint outlived the deadline")
	got := wait(t, done, "Execute")
	assert.Less(t, time.Since(begin), 5*time.Second, "the call outlived the deadline")
	require.ErrorIs(t, got.err, plugin.ErrLeaseExpired)
	assert.False(t, errors.Is(got.err, context.Canceled))
}

// ckptLooper checkpoints on its call's context until a checkpoint fails,
// and reports whether that context had ended by then.
type ckptLooper struct {
	ended chan bool
}

func (*ckptLooper) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "ckpt-looper", Version: "test"}, nil
}

func (l *ckptLooper) Execute(ctx context.Context, _ *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	for {
		if err := rt.Checkpoint(ctx, json.RawMessage(`{"h":1}`)); err != nil {
			l.ended <- ctx.Err() != nil
			return nil, plugin.WithClass(plugin.Retriable, err)
		}
	}
}

// A Runtime call that fails because the lease deadline passed does so only
// once the call's context has ended. A plugin that tells "stopped" from "a
// checkpoint failed" by ctx.Err() (the usual way) journals a stop, never a
// failure of its own.
func TestRuntimeCallsFailOnlyAfterTheContextEnds(t *testing.T) {
	for i := range 20 {
		l := &ckptLooper{ended: make(chan bool, 1)}
		c := plugintest.Connect(t, l)
		host := frozenHost{leased{plugintest.NewRuntime(nil), 20 * time.Millisecond}, make(chan struct{}), make(chan struct{})}
		done := execute(c, host)
		assert.True(t, wait(t, l.ended, "the checkpoint's failure"), "round %d: the checkpoint failed while the call's context was still live", i)
		got := wait(t, done, "Execute")
		close(host.thaw)
		require.ErrorIs(t, got.err, plugin.ErrLeaseExpired)
	}
}
