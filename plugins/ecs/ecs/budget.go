package ecs

import (
	"context"
	"slices"
	"sync"

	"golang.org/x/time/rate"
)

// Priorities of a log read in the process's GetLogEvents budget.
const (
	prioFinish = iota // a drain already begun: finishing it ends its job soonest
	prioDrain         // a stopped task's last lines: its job waits for them
	prioTail          // a running task's lines, for people following the job
	numPrios
)

// budget hands out one API call at a time from a rate limiter, by priority
// (FIFO within one). Every job of the process draws from it, so their sum
// stays under the process's rate however many jobs there are, and jobs
// waiting for a stopped task's last lines go before live tails.
type budget struct {
	lim *rate.Limiter

	mu      sync.Mutex
	queues  [numPrios][]*ticket
	running bool
}

// ticket is one call, granted when ready is closed.
type ticket struct {
	b     *budget
	prio  int
	ready chan struct{}
}

func newBudget(lim *rate.Limiter) *budget { return &budget{lim: lim} }

// request queues a call. The caller selects on t.ready and must call
// t.cancel if it stops waiting.
func (b *budget) request(prio int) *ticket {
	t := &ticket{b: b, prio: prio, ready: make(chan struct{})}
	b.mu.Lock()
	b.queues[prio] = append(b.queues[prio], t)
	if !b.running {
		b.running = true
		go b.dispatch()
	}
	b.mu.Unlock()
	return t
}

// cancel withdraws a ticket not yet granted.
func (t *ticket) cancel() {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[t.prio]
	if i := slices.Index(q, t); i >= 0 {
		b.queues[t.prio] = append(q[:i:i], q[i+1:]...)
	}
}

// dispatch grants tickets at the limiter's rate while any wait. It ends
// when the queues are empty, so an idle plugin holds no goroutine. The
// next request starts it again.
func (b *budget) dispatch() {
	for {
		b.mu.Lock()
		if b.next() < 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		// The wait is bounded by the rate. Nothing cancels it but the
		// process's end.
		_ = b.lim.Wait(context.Background())
		b.mu.Lock()
		if p := b.next(); p >= 0 {
			t := b.queues[p][0]
			b.queues[p] = b.queues[p][1:]
			close(t.ready)
		}
		b.mu.Unlock()
	}
}

// next is the most urgent priority with a ticket waiting, or -1.
func (b *budget) next() int {
	return slices.IndexFunc(b.queues[:], func(q []*ticket) bool { return len(q) > 0 })
}
