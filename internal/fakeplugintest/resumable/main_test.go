package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// The plugin starts its work by re-executing its own binary, which here is
// the test binary. Serve work mode before running tests.
func TestMain(m *testing.M) {
	if p := os.Getenv(envWorkRecord); p != "" {
		os.Exit(runWork(p))
	}
	os.Exit(m.Run())
}

func newJob(t *testing.T, dir string, ctx map[string]any) *plugin.Job {
	t.Helper()
	c, err := json.Marshal(ctx)
	require.NoError(t, err)
	return &plugin.Job{
		ID:      "01a2-" + filepath.Base(t.Name()),
		Command: "resumable",
		Attempt: 1,
		Context: c,
		Config:  json.RawMessage(`{"work_dir":` + mustJSON(t, dir) + `}`),
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func starts(t *testing.T, _ string, job *plugin.Job) int {
	t.Helper()
	w, err := newWork(job)
	require.NoError(t, err)
	n, err := w.startCount()
	require.NoError(t, err)
	return n
}

// Execute's work survives the cancelled call. Resume with the checkpointed
// handle reattaches and waits for it without starting it again.
func TestExecuteDetachesAndResumeReattaches(t *testing.T) {
	dir := t.TempDir()
	job := newJob(t, dir, map[string]any{"duration_ms": 700})
	p := resumable{}

	ctx, cancel := context.WithCancel(context.Background())
	rt := plugintest.NewRuntime(nil)
	done := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, job, rt)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) == 1 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	err := <-done
	require.Error(t, err)
	assert.Equal(t, plugin.Retriable, plugin.ClassOf(err))

	var h handle
	require.NoError(t, json.Unmarshal(rt.Checkpoints()[0], &h))
	assert.Equal(t, "resumable-"+job.ID, h.Name)
	assert.True(t, alive(h.PID), "the work must outlive the cancelled Execute")

	res, err := p.Resume(context.Background(), job, plugintest.NewRuntime(rt.Checkpoints()[0]))
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"resumable-`+job.ID+`"}`, string(res.Output))
	assert.Equal(t, 1, starts(t, dir, job))

	// Resuming a finished job reads its record. There is still one start.
	_, err = p.Resume(context.Background(), job, plugintest.NewRuntime(rt.Checkpoints()[0]))
	require.NoError(t, err)
	assert.Equal(t, 1, starts(t, dir, job))
}

func TestResumeWithoutHandleOrWorkStartsIt(t *testing.T) {
	dir := t.TempDir()
	job := newJob(t, dir, map[string]any{"duration_ms": 50})
	rt := plugintest.NewRuntime(nil)
	_, err := resumable{}.Resume(context.Background(), job, rt)
	require.NoError(t, err)
	assert.Len(t, rt.Checkpoints(), 1)
	assert.Equal(t, 1, starts(t, dir, job))
}

func TestResumeWithHandleButNoTraceIsOutcomeUnknown(t *testing.T) {
	dir := t.TempDir()
	job := newJob(t, dir, map[string]any{"duration_ms": 50})
	_, err := resumable{}.Resume(context.Background(), job, plugintest.NewRuntime([]byte(`{"name":"x","pid":0}`)))
	require.Error(t, err)
	assert.Equal(t, plugin.OutcomeUnknown, plugin.ClassOf(err))
	assert.Equal(t, 0, starts(t, dir, job), "work the handle speaks of must not be started again")
}

func TestFailureIsRecordedAndReported(t *testing.T) {
	dir := t.TempDir()
	job := newJob(t, dir, map[string]any{"duration_ms": 10, "fail": "boom"})
	_, err := resumable{}.Execute(context.Background(), job, plugintest.NewRuntime(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "boom")
	assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
}

func TestCleanupKillsWorkAndKeepsStartCount(t *testing.T) {
	dir := t.TempDir()
	job := newJob(t, dir, map[string]any{"duration_ms": 60000})
	p := resumable{}
	ctx, cancel := context.WithCancel(context.Background())
	rt := plugintest.NewRuntime(nil)
	done := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, job, rt)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) == 1 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	var h handle
	require.NoError(t, json.Unmarshal(rt.Checkpoints()[0], &h))
	require.True(t, alive(h.PID))

	require.NoError(t, p.Cleanup(context.Background(), job))
	require.Eventually(t, func() bool { return !alive(h.PID) }, 5*time.Second, 10*time.Millisecond)
	_, err := os.Stat(filepath.Join(dir, job.ID+".pid"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, 1, starts(t, dir, job))
	require.NoError(t, p.Cleanup(context.Background(), job), "Cleanup is idempotent")
}

func TestRelativeWorkDirIsRejected(t *testing.T) {
	job := newJob(t, "relative", nil)
	_, err := resumable{}.Execute(context.Background(), job, plugintest.NewRuntime(nil))
	require.Error(t, err)
	assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
}

// A Resume that arrives while another plugin process is still starting the
// work (its agent was killed mid-start, the job was handed over at once)
// waits for that start instead of failing it or starting a second copy.
func TestResumeDuringAStartWaitsForIt(t *testing.T) {
	dir := t.TempDir()
	job := newJob(t, dir, map[string]any{"duration_ms": 50})
	w, err := newWork(job)
	require.NoError(t, err)
	lock, err := w.tryLock()
	require.NoError(t, err)
	require.NotNil(t, lock)

	done := make(chan error, 1)
	go func() {
		_, err := resumable{}.Resume(context.Background(), job, plugintest.NewRuntime(nil))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Resume returned (%v) while a start held the lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, w.start(context.Background(), plugintest.NewRuntime(nil), lock))
	require.NoError(t, <-done)
	assert.Equal(t, 1, starts(t, dir, job))
}
