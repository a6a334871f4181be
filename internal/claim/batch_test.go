package claim

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// TestBatcherSharesAStatement checks that concurrent requests within the
// window go out in one run call, at most max per call, each answered with its
// own result.
func TestBatcherSharesAStatement(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(50*time.Millisecond, 4, time.Second, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.loop(ctx)
	var wg sync.WaitGroup
	got := make([]int, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.do(ctx, i)
			assert.NoError(t, err)
			got[i] = r
		}()
	}
	wg.Wait()
	assert.Equal(t, []int{0, 10, 20, 30, 40, 50}, got)
	total, most := 0, 0
	for _, n := range sizes {
		total += n
		most = max(most, n)
	}
	assert.Equal(t, 6, total)
	assert.LessOrEqual(t, most, 4, "at most max per statement")
	assert.Less(t, len(sizes), 6, "requests shared statements: %v", sizes)

	// A run error reaches every request of its batch. A request whose context
	// ended before it was sent gets the context's error.
	fail := newBatcher(time.Millisecond, 8, time.Second, func(context.Context, []int) ([]int, error) {
		return nil, errors.New("database gone")
	})
	go fail.loop(ctx)
	_, err := fail.do(ctx, 1)
	assert.EqualError(t, err, "database gone")
	done, stop := context.WithCancel(context.Background())
	stop()
	unsent := newBatcher(time.Millisecond, 8, time.Second, func(context.Context, []int) ([]int, error) { return nil, nil })
	_, err = unsent.do(done, 1) // no loop: never sent
	assert.ErrorIs(t, err, context.Canceled)
}

// TestRefusedOutcomeDoesNotFailItsBatch checks what happens when the database
// refuses one outcome of a batch. Every other end of the batch is still
// stored and only that one gets the DataError (the runner then stores a
// permanent failure).
func TestRefusedOutcomeDoesNotFailItsBatch(t *testing.T) {
	ctx := context.Background()
	st := store.New(pgtest.DB(t))
	h := store.Holder{Name: "batch", Generation: "batch-1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 4, Commands: []string{"c"}})
	require.NoError(t, err)
	for range 3 {
		_, _, err := st.Submit(ctx, store.SubmitParams{Command: "c", Plugin: "noop", Context: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	cs, err := st.Claim(ctx, h, 3, []string{"c"})
	require.NoError(t, err)
	require.Len(t, cs, 3)
	var es []store.End
	for i, c := range cs {
		o := store.Outcome{Status: store.StatusSucceeded}
		if i == 1 {
			o.Result = json.RawMessage(`{"broken`)
		}
		es = append(es, store.End{JobID: c.Job.ID, Lease: c.Lease, Actor: h, Outcome: o})
	}
	res, err := storeEnds(ctx, st, h, es)
	require.NoError(t, err)
	require.Len(t, res, 3)
	var de *store.DataError
	assert.True(t, errors.As(res[1].err, &de), "the refused one: %v", res[1].err)
	for _, i := range []int{0, 2} {
		require.NoError(t, res[i].err)
		assert.Equal(t, store.StatusSucceeded, res[i].ended.Status)
		j, err := st.GetJob(ctx, cs[i].Job.ID)
		require.NoError(t, err)
		assert.Equal(t, store.StatusSucceeded, j.Status)
	}
}

// TestBatcherGroupCommit checks that, with no window, a lone write goes out
// at once, and the writes that arrive while a statement runs share the next
// one. synctest.Wait returns once every goroutine of the bubble is blocked,
// so the five writes are known to be waiting before the first one finishes.
func TestBatcherGroupCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var calls [][]int
		b := newBatcher(0, 100, time.Second, func(_ context.Context, reqs []int) ([]int, error) {
			calls = append(calls, append([]int(nil), reqs...))
			if reqs[0] == 0 {
				<-release // the first statement is slow
			}
			return make([]int, len(reqs)), nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go b.loop(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = b.do(ctx, 0) }()
		synctest.Wait()
		require.Equal(t, [][]int{{0}}, calls, "a lone write does not wait")
		for i := 1; i <= 5; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = b.do(ctx, i) }()
		}
		synctest.Wait() // all five wait for the busy batcher
		close(release)
		wg.Wait()
		require.Len(t, calls, 2, "the five that waited share one statement: %v", calls)
		assert.ElementsMatch(t, []int{1, 2, 3, 4, 5}, calls[1])
		cancel()
		synctest.Wait()
	})
}
