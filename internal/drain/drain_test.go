package drain

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
)

// fakeJobs records the drain's calls. Other jobs end when finish is closed.
type fakeJobs struct {
	mu        sync.Mutex
	calls     []string
	resumable int
	other     int
	finish    chan struct{}
}

func (f *fakeJobs) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeJobs) StopClaiming() { f.record("stop_claiming") }
func (f *fakeJobs) Counts() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resumable, f.other
}
func (f *fakeJobs) HandOff(context.Context, string) (int, error) {
	f.record("handoff")
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.resumable
	f.resumable = 0
	return n, nil
}
func (f *fakeJobs) Detach(context.Context) int {
	f.record("detach")
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.resumable
	f.resumable = 0
	return n
}
func (f *fakeJobs) WaitIdle(ctx context.Context, includeResumable bool) error {
	select {
	case <-f.finish:
		f.mu.Lock()
		f.other = 0
		f.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (f *fakeJobs) StopJobs(context.Context) error {
	f.record("stop_jobs")
	f.mu.Lock()
	f.other = 0
	f.mu.Unlock()
	return nil
}

func cfg(handoff string, timeout time.Duration) Config {
	return Config{Handoff: handoff, ShutdownTimeout: timeout, StopTimeout: time.Second, AgentName: "a"}
}

func TestImmediateHandoffThenWaitForOthers(t *testing.T) {
	f := &fakeJobs{resumable: 5, other: 2, finish: make(chan struct{})}
	close(f.finish) // the others end on their own
	res, err := Run(context.Background(), f, nil, cfg(config.HandoffImmediate, time.Minute))
	require.NoError(t, err)
	assert.Equal(t, Result{HandedOff: 5}, res)
	assert.Equal(t, []string{"stop_claiming", "handoff", "stop_jobs"}, f.calls)
}

func TestDeadlineStopsWhatIsLeft(t *testing.T) {
	f := &fakeJobs{resumable: 1, other: 2, finish: make(chan struct{})}
	res, err := Run(context.Background(), f, nil, cfg(config.HandoffImmediate, 50*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, Result{HandedOff: 1, Stopped: 2}, res)
}

func TestHandoffAtDeadline(t *testing.T) {
	f := &fakeJobs{resumable: 3, other: 0, finish: make(chan struct{})}
	res, err := Run(context.Background(), f, nil, cfg(config.HandoffDeadline, 50*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, 3, res.HandedOff)
	assert.Equal(t, []string{"stop_claiming", "handoff", "stop_jobs"}, f.calls, "handoff only after the wait")
}

func TestNeverHandsOff(t *testing.T) {
	f := &fakeJobs{resumable: 3, finish: make(chan struct{})}
	close(f.finish)
	res, err := Run(context.Background(), f, nil, cfg(config.HandoffNever, time.Minute))
	require.NoError(t, err)
	assert.Equal(t, Result{Detached: 3}, res)
	assert.NotContains(t, f.calls, "handoff")
}

func TestSecondSignalSkipsTheWait(t *testing.T) {
	f := &fakeJobs{resumable: 2, other: 1, finish: make(chan struct{})}
	hurry := make(chan struct{})
	close(hurry)
	began := time.Now()
	res, err := Run(context.Background(), f, hurry, cfg(config.HandoffImmediate, time.Hour))
	require.NoError(t, err)
	assert.Less(t, time.Since(began), time.Minute, "did not wait for shutdown_timeout")
	assert.Equal(t, Result{HandedOff: 2, Stopped: 1, Hurried: true}, res)
}
