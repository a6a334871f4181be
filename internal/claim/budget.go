package claim

import (
	"context"
	"math"
	"sync"
	"time"
)

// outputBudget bounds the bytes of job output the agent holds in memory,
// all jobs together (logs.buffer_budget). A byte counts from the write that
// brought it until the statement that stores it has answered, or until it
// was dropped or spilled to disk. A write that does not fit waits, and so
// does the plugin's Write call that carries it: the plugin's writer blocks
// instead of the agent's heap growing.
//
// Writes wait in arrival order. A job's output streams each have at most
// one write in flight (the SDK sends in order), so no job is passed by
// another twice while it waits: a chatty job cannot starve a quiet one.
// A write waits no longer than its caller can (see acquire), and a write
// into an empty budget is let in whatever its size, so nothing waits on
// bytes that will never be freed.
type outputBudget struct {
	limit int64
	// wake asks for a flush: a waiting write needs room only a flush frees.
	wake func()

	mu    sync.Mutex
	used  int64
	peak  int64 // the most used ever held (tests, benchmarks)
	over  int64 // bytes let in past the limit because their caller could wait no longer
	waits int64 // writes that waited for room
	queue []*budgetWait
}

type budgetWait struct {
	n     int64
	ready chan struct{} // closed once granted
}

func newOutputBudget(limit int64, wake func()) *outputBudget {
	return &outputBudget{limit: limit, wake: wake}
}

// fits reports whether n more bytes would be let in at once.
func (b *outputBudget) fits(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue) == 0 && b.room(n)
}

// room reports whether n more bytes fit, under mu. An empty budget takes
// anything: a single write larger than the limit must not wait forever.
func (b *outputBudget) room(n int64) bool {
	return b.used == 0 || b.used+n <= b.limit
}

// take counts n bytes, under mu.
func (b *outputBudget) take(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

// acquire counts n bytes, waiting behind earlier writes for room. It lets
// them in past the limit, and says so, once job or call ends or giveUp
// passes (the zero time never does): a stopped job's writes must not hold
// up its stop, and a plugin's Write call that times out breaks its output
// stream for good (the SDK's writer keeps the error), which is worse than a
// few bytes over the budget.
func (b *outputBudget) acquire(job, call context.Context, n int64, giveUp time.Time) (over bool) {
	if n <= 0 {
		return false
	}
	b.mu.Lock()
	if len(b.queue) == 0 && b.room(n) {
		b.take(n)
		b.mu.Unlock()
		return false
	}
	w := &budgetWait{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.waits++
	b.mu.Unlock()
	b.wake()
	var timeout <-chan time.Time
	if !giveUp.IsZero() {
		t := time.NewTimer(time.Until(giveUp))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.ready:
		return false
	case <-job.Done():
	case <-call.Done():
	case <-timeout:
	}
	return b.leave(w)
}

// leave takes w out of the queue and counts its bytes past the limit. It
// reports false if w was granted meanwhile (then it is within the limit).
func (b *outputBudget) leave(w *budgetWait) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		return false
	default:
	}
	for i, q := range b.queue {
		if q == w {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			break
		}
	}
	b.take(w.n)
	b.over += w.n
	b.grant() // the head may have changed
	return true
}

// force counts n bytes at once, room or not: bytes already in memory that
// must be counted (held output read back from disk to be stored).
func (b *outputBudget) force(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.take(n)
}

// release gives n bytes back and lets in the waiting writes that now fit,
// in order.
func (b *outputBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.grant()
}

// grant lets in the writes at the head of the queue that fit, under mu.
func (b *outputBudget) grant() {
	for len(b.queue) > 0 && b.room(b.queue[0].n) {
		w := b.queue[0]
		b.queue = b.queue[1:]
		b.take(w.n)
		close(w.ready)
	}
}

// budgetStats is what a budget has seen, in bytes but for waits.
type budgetStats struct {
	used, peak int64 // counted now; the most ever counted
	over       int64 // let in past the limit
	waits      int64 // writes that waited for room
}

func (b *outputBudget) stats() budgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return budgetStats{used: b.used, peak: b.peak, over: b.over, waits: b.waits}
}

// waiting is how many writes wait for room.
func (b *outputBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// holdShare is how many bytes of held output (a resumable job's, waiting
// for its checkpoint) one runner keeps in memory before it spills them to
// disk: half of its even share of budget among capacity runners, so held
// output never takes more than half the budget, and at least minHold.
func holdShare(budget int64, capacity int) int {
	return int(max(minHold, min(budget/int64(2*max(capacity, 1)), math.MaxInt32)))
}

// minHold is the least held output a runner keeps in memory: below it,
// spilling costs a file write per chunk or two.
const minHold = 4 << 10

// DefaultLogBufferBudget is logs.buffer_budget when the config leaves it
// out: 256 KiB per job slot, at least 4 MiB (a flush of 1 MiB while the
// next fills) and at most 32 MiB (the Go heap holds up to about twice what
// is live: an agent under 128 MiB whatever its jobs print).
func DefaultLogBufferBudget(capacity int) int64 {
	return min(max(int64(capacity)*256<<10, 4<<20), 32<<20)
}
