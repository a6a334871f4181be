package claim

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acquired runs acquire in a goroutine and reports on the returned channel
// whether it let the bytes in past the limit.
func acquired(b *outputBudget, job, call context.Context, n int64, giveUp time.Time) <-chan bool {
	ch := make(chan bool, 1)
	go func() { ch <- b.acquire(job, call, n, giveUp) }()
	return ch
}

// awaitWaiting waits until n writes wait for room.
func awaitWaiting(t *testing.T, b *outputBudget, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.waiting() == n }, 5*time.Second, time.Millisecond)
}

// TestBudgetWaitsInArrivalOrder checks that a write waits for room, that a
// later write waits behind it even when it would fit (no chatty writer
// passes a waiting one), and that the flusher is asked to run.
func TestBudgetWaitsInArrivalOrder(t *testing.T) {
	bg := context.Background()
	var kicks atomic.Int32
	b := newOutputBudget(100, func() { kicks.Add(1) })
	require.False(t, b.acquire(bg, bg, 60, time.Time{}))

	first := acquired(b, bg, bg, 60, time.Time{})
	awaitWaiting(t, b, 1)
	second := acquired(b, bg, bg, 10, time.Time{}) // fits, but arrives second
	awaitWaiting(t, b, 2)
	select {
	case <-second:
		t.Fatal("a later write passed a waiting one")
	default:
	}

	b.release(60)
	assert.False(t, <-first)
	assert.False(t, <-second)
	assert.Equal(t, budgetStats{used: 70, peak: 70, waits: 2}, b.stats())
	assert.Positive(t, kicks.Load(), "a waiting write asks for a flush")
}

// TestBudgetWaitEnds checks the three ends of a wait that room does not
// end: the job stops, the plugin's call is about to time out, or the
// budget is empty (a write larger than the whole budget).
func TestBudgetWaitEnds(t *testing.T) {
	bg := context.Background()
	// filled is a budget of limit bytes that holds used of them.
	filled := func(t *testing.T, limit, used int64) *outputBudget {
		b := newOutputBudget(limit, func() {})
		require.False(t, b.acquire(bg, bg, used, time.Time{}))
		return b
	}
	t.Run("job stopped", func(t *testing.T) {
		b := filled(t, 10, 10)
		job, stop := context.WithCancel(bg)
		got := acquired(b, job, bg, 5, time.Time{})
		awaitWaiting(t, b, 1)
		stop()
		assert.True(t, <-got, "let in past the limit")
		assert.Equal(t, budgetStats{used: 15, peak: 15, over: 5, waits: 1}, b.stats())
		assert.Zero(t, b.waiting())
	})
	t.Run("call deadline", func(t *testing.T) {
		b := filled(t, 10, 10)
		assert.True(t, b.acquire(bg, bg, 5, time.Now().Add(20*time.Millisecond)))
	})
	t.Run("larger than the budget", func(t *testing.T) {
		b := filled(t, 10, 50)
		got := acquired(b, bg, bg, 50, time.Time{})
		awaitWaiting(t, b, 1)
		b.release(50)
		assert.False(t, <-got)
	})
	t.Run("a waiter that leaves lets the next in", func(t *testing.T) {
		b := filled(t, 10, 6)
		job, stop := context.WithCancel(bg)
		big := acquired(b, job, bg, 8, time.Time{})
		awaitWaiting(t, b, 1)
		small := acquired(b, bg, bg, 4, time.Time{})
		awaitWaiting(t, b, 2)
		stop()
		assert.True(t, <-big)
		b.release(8) // the big write stored
		assert.False(t, <-small)
	})
}

func TestHoldShareAndDefaultBudget(t *testing.T) {
	for _, tc := range []struct {
		capacity int
		budget   int64
		hold     int
	}{
		{capacity: 1, budget: 4 << 20, hold: 2 << 20},
		{capacity: 10, budget: 4 << 20, hold: 209715},
		{capacity: 32, budget: 8 << 20, hold: 128 << 10},
		{capacity: 128, budget: 32 << 20, hold: 128 << 10},
		{capacity: 2000, budget: 32 << 20, hold: 8388},
		{capacity: 5000, budget: 32 << 20, hold: minHold},
	} {
		assert.Equal(t, tc.budget, DefaultLogBufferBudget(tc.capacity), "budget at capacity %d", tc.capacity)
		assert.Equal(t, tc.hold, holdShare(tc.budget, tc.capacity), "hold at capacity %d", tc.capacity)
	}
}
