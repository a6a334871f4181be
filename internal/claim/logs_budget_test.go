package claim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// heldJobs submits n jobs of command "c" and claims them as h.
func heldJobs(t *testing.T, st *store.Store, h store.Holder, n int) []jobKey {
	t.Helper()
	ctx := context.Background()
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: n, Commands: []string{"c"}})
	require.NoError(t, err)
	for range n {
		_, _, err := st.Submit(ctx, store.SubmitParams{Command: "c", Plugin: "shell"})
		require.NoError(t, err)
	}
	claimed, err := st.Claim(ctx, h, n, []string{"c"})
	require.NoError(t, err)
	require.Len(t, claimed, n)
	keys := make([]jobKey, n)
	for i, c := range claimed {
		keys[i] = jobKey{c.Job.ID, c.Lease}
	}
	return keys
}

// produce writes size bytes of numbered lines to w in the plugin SDK's
// 32 KiB chunks, as fast as w takes them, and returns what it wrote.
func produce(t *testing.T, w *jobWriter, name string, size int) []byte {
	var all bytes.Buffer
	for i := 0; all.Len() < size; i++ {
		fmt.Fprintf(&all, "%s line %07d\n", name, i)
	}
	out := all.Bytes()
	for p := out; len(p) > 0; {
		n := min(len(p), 32<<10)
		_, err := w.Write(p[:n])
		assert.NoError(t, err)
		p = p[n:]
	}
	return out
}

func storedOutput(t *testing.T, st *store.Store, id string) []byte {
	t.Helper()
	chunks, err := st.Logs(context.Background(), id, "stdout", 0, 0)
	require.NoError(t, err)
	var out []byte
	for _, c := range chunks {
		out = append(out, c.Data...)
	}
	return out
}

func testFlusher(st *store.Store, h store.Holder, budget int64, capacity int) *logFlusher {
	f := newLogFlusher(st, 1<<30, 10*time.Millisecond, slog.New(slog.DiscardHandler), func(jobKey) {}, metrics.New())
	f.generation = h.Generation
	f.bound(budget, capacity)
	return f
}

// TestOutputBudgetHoldsUnderAFastProducer runs writers faster than the
// database against a small budget. The writers wait (back-pressure), the
// budget is never exceeded, and every line is stored once, in order.
func TestOutputBudgetHoldsUnderAFastProducer(t *testing.T) {
	st := store.New(pgtest.DB(t))
	h := store.Holder{Name: "a", Generation: "g1"}
	const jobs, budget = 4, 128 << 10
	keys := heldJobs(t, st, h, jobs)
	f := testFlusher(st, h, budget, jobs)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.run(ctx); close(done) }()

	wrote := make([][]byte, jobs)
	var wg sync.WaitGroup
	for i, k := range keys {
		f.track(k, false)
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrote[i] = produce(t, f.writer(context.Background(), k, stdoutStream), k.ID, 2<<20)
		}()
	}
	wg.Wait()
	stop()
	<-done // the last flush runs at exit

	s := f.budget.stats()
	assert.LessOrEqual(t, s.peak, int64(budget), "the budget held")
	assert.Zero(t, s.over)
	assert.Positive(t, s.waits, "the producers were held back")
	assert.Zero(t, s.used, "all stored")
	for i, k := range keys {
		assert.True(t, bytes.Equal(wrote[i], storedOutput(t, st, k.ID)), "job %d's output stored once, in order", i)
	}
}

// TestBlockedWriteEndsWithItsJob fills the budget with output the database
// never takes. A write waiting for room ends when its job is stopped, and
// before its caller's deadline.
func TestBlockedWriteEndsWithItsJob(t *testing.T) {
	h := store.Holder{Name: "a", Generation: "g1"}
	f := testFlusher(nil, h, 64<<10, 2) // never flushed: no run
	k := jobKey{"j", 1}
	f.track(k, false)
	job, stopJob := context.WithCancel(context.Background())
	w := f.writer(job, k, stdoutStream)
	_, err := w.Write(make([]byte, 64<<10))
	require.NoError(t, err)

	wrote := make(chan struct{})
	go func() {
		_, _ = w.Write([]byte("more\n"))
		close(wrote)
	}()
	require.Eventually(t, func() bool { return f.budget.waiting() == 1 }, 5*time.Second, time.Millisecond)
	stopJob()
	<-wrote

	call, cancel := context.WithTimeout(context.Background(), writeMargin+100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = f.writer(context.Background(), k, stdoutStream).WriteContext(call, []byte("late\n"))
	require.NoError(t, err)
	assert.Less(t, time.Since(start), writeMargin, "answered before the caller's deadline")
	assert.Equal(t, int64(len("more\n")+len("late\n")), f.budget.stats().over)
	f.untrack(k)
	assert.Zero(t, f.budget.stats().used, "an ended runner's bytes leave the budget")
}

// TestHeldOutputSpillsAndIsStoredOnce writes a resumable job's output well
// past its share of the budget. It is spilled to disk, not held in memory,
// and its checkpoint stores all of it once, in order, after a failed try
// put it back.
func TestHeldOutputSpillsAndIsStoredOnce(t *testing.T) {
	st := store.New(pgtest.DB(t))
	h := store.Holder{Name: "a", Generation: "g1"}
	k := heldJobs(t, st, h, 1)[0]
	f := testFlusher(st, h, 256<<10, 2) // holds at most 64 KiB per runner
	f.spillDir = t.TempDir()
	f.track(k, true)
	w := f.writer(context.Background(), k, stdoutStream)
	first := produce(t, w, "a", 1<<20)
	s := f.budget.stats()
	assert.LessOrEqual(t, s.peak, int64(f.holdMax+32<<10), "held in memory up to its share and one chunk")
	assert.Zero(t, s.over)
	assert.Empty(t, storedOutput(t, st, k.ID), "held until the checkpoint")

	// An end that failed puts everything back, spilled again.
	lb, settle, err := f.takeForEnd(k)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(first, recordData(lb.Records)))
	settle(errors.New("the database went away"))
	assert.LessOrEqual(t, f.budget.stats().used, int64(f.holdMax))

	second := produce(t, w, "b", 256<<10)
	require.NoError(t, f.checkpoint(context.Background(), k, []byte("h1"), nil))
	assert.True(t, bytes.Equal(append(first, second...), storedOutput(t, st, k.ID)), "stored once, in order")
	assert.Zero(t, f.budget.stats().used)
	f.untrack(k)
}

func recordData(recs []store.LogRecord) []byte {
	var out []byte
	for _, r := range recs {
		out = append(out, r.Data...)
	}
	return out
}
