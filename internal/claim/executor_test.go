package claim

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// scriptedPlugin is a plugin in the test's hands. Execute writes a line,
// then answers what answer says, or waits for its context to end when
// answer is nil. It declares Cleanup and records the jobs it cleaned.
type scriptedPlugin struct {
	answer func() (*plugin.Result, error)
	called chan string

	mu      sync.Mutex
	cleaned []string
}

func (p *scriptedPlugin) Info(string) (plugin.Info, bool) {
	return plugin.Info{Name: "scripted", Capabilities: []string{plugin.CapCleanup}}, true
}

func (p *scriptedPlugin) Execute(ctx context.Context, _ string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	_, _ = rt.Stdout().Write([]byte("hello from " + job.ID + "\n"))
	p.called <- job.ID
	if p.answer != nil {
		return p.answer()
	}
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

func (p *scriptedPlugin) Resume(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, plugin.Errorf(plugin.Permanent, "cannot resume")
}

func (p *scriptedPlugin) Cleanup(_ context.Context, _ string, job *plugin.Job) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleaned = append(p.cleaned, job.ID)
	return nil
}

func (p *scriptedPlugin) Renew(context.Context, time.Duration) {}

// executorFixture is an executor's dependencies on the package's test
// database, with no Service around them.
type executorFixture struct {
	st     *store.Store
	deps   *executorDeps
	ended  chan Ended
	called chan Called
}

func newExecutorFixture(t *testing.T, p Plugins) *executorFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := store.New(pgtest.DB(t))
	h := store.Holder{Name: "exec", Generation: "exec-1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"scripted"}})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	f := &executorFixture{st: st, ended: make(chan Ended, 4), called: make(chan Called, 4)}
	f.deps = &executorDeps{
		holder: h, commands: map[string]Command{"scripted": {Plugin: "scripted"}},
		store: st, plugins: p,
		logs:    newLogFlusher(st, 1<<20, time.Hour, log, func(jobKey) {}, m),
		running: newRunningBatcher(st, 0, 8, 10*time.Second),
		finals:  newFinalsBatcher(st, h, 0, 8, 10*time.Second),
		history: dbhistory.NewTracker(), beats: newBeatClock(time.Now()),
		metrics: m, agentLog: log, now: time.Now,
		signals:      TestSignals{Ended: f.ended, Called: f.called},
		finalTimeout: 10 * time.Second, cleanupTimeout: 10 * time.Second, cleanupRetryIn: time.Second,
		writes: context.Background(), quit: make(chan struct{}),
		freeSlot: func(*runningJob) {}, remember: func(*runningJob, *store.End) {},
	}
	go f.deps.running.loop(ctx)
	go f.deps.finals.loop(ctx)
	return f
}

// claim submits one job and claims it as the producer would, returning its
// record for an executor.
func (f *executorFixture) claim(t *testing.T) *runningJob { return f.claimAs(t, false) }

// claimAs is claim, of a job whose plugin can resume (its output held until
// its checkpoints) or not.
func (f *executorFixture) claimAs(t *testing.T, resumable bool) *runningJob {
	t.Helper()
	ctx := context.Background()
	_, _, err := f.st.Submit(ctx, store.SubmitParams{Command: "scripted", Plugin: "scripted", Context: json.RawMessage(`{}`)})
	require.NoError(t, err)
	cs, err := f.st.ClaimWith(ctx, f.deps.holder, store.ClaimParams{Limit: 1, Commands: []string{"scripted"}, Resumable: []string{}})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	jctx, cancel := context.WithCancelCause(ctx)
	t.Cleanup(func() { cancel(nil) })
	c := cs[0]
	j := &runningJob{key: jobKey{c.Job.ID, c.Lease}, claimed: c, claimedAt: time.Now(), ctx: jctx, cancelFn: cancel,
		resumable: resumable, hasCleanup: !resumable, done: make(chan struct{})}
	f.deps.logs.track(j.key, resumable)
	return j
}

// run runs j's executor on its own goroutine and returns when it is done.
func (f *executorFixture) run(j *runningJob) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		newExecutor(f.deps, j).run()
	}()
	return done
}

func waitOrTimeout[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s within 20s", what)
		var zero T
		return zero
	}
}

func TestExecutorStoresASuccessWithItsOutput(t *testing.T) {
	p := &scriptedPlugin{called: make(chan string, 1), answer: func() (*plugin.Result, error) {
		return &plugin.Result{Output: json.RawMessage(`{"n":1}`), Message: "done"}, nil
	}}
	f := newExecutorFixture(t, p)
	j := f.claim(t)
	done := f.run(j)
	called := waitOrTimeout(t, f.called, "plugin call")
	assert.Equal(t, Called{JobID: j.key.ID, Lease: j.key.Lease}, called)
	e := waitOrTimeout(t, f.ended, "end")
	<-done
	assert.Equal(t, Ended{JobID: j.key.ID, Lease: j.key.Lease, Status: string(store.StatusSucceeded)}, e)
	assert.True(t, j.ended.Load(), "the heartbeat stops renewing it")

	got, err := f.st.GetJob(context.Background(), j.key.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusSucceeded, got.Status)
	assert.JSONEq(t, `{"n":1}`, string(got.Result))
	chunks, err := f.st.Logs(context.Background(), j.key.ID, "stdout", 0, 0)
	require.NoError(t, err)
	require.Len(t, chunks, 1, "the output is stored before the end")
	assert.Equal(t, "hello from "+j.key.ID+"\n", string(chunks[0].Data))
}

func TestExecutorCancelRequestedEndsCanceledThenCleansUp(t *testing.T) {
	p := &scriptedPlugin{called: make(chan string, 1)}
	f := newExecutorFixture(t, p)
	j := f.claim(t)
	done := f.run(j)
	waitOrTimeout(t, p.called, "plugin call")
	j.cancel(errCancelRequested)
	e := waitOrTimeout(t, f.ended, "end")
	<-done
	assert.Equal(t, string(store.StatusCanceled), e.Status, "%+v", e)
	assert.Equal(t, "canceled by request", e.Error)
	p.mu.Lock()
	assert.Equal(t, []string{j.key.ID}, p.cleaned, "Cleanup ran once the end was stored")
	p.mu.Unlock()
	got, err := f.st.GetJob(context.Background(), j.key.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceled, got.Status)
}
