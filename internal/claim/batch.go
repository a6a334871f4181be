package claim

import (
	"context"
	"errors"
	"time"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

// DefaultBatchMax is the most running or final writes one statement
// carries.
const DefaultBatchMax = 256

// DefaultFinalWindow is how long a final-write batch waits for more after its
// first write (Config.FinalWindow). A negative window does not wait at all.
const DefaultFinalWindow = 5 * time.Millisecond

// batcher gathers one kind of fenced write from many job runners into one
// statement, a group commit. One statement is in flight at a time. The writes
// that arrive meanwhile go out together in the next (at most max), so an idle
// agent writes at once and a busy one in batches as large as its load. A
// window > 0 also waits that long after the first write of a batch for more.
// run answers one result per request, or one error for all.
type batcher[Req, Res any] struct {
	reqs   chan batchItem[Req, Res]
	window time.Duration
	max    int
	run    func(ctx context.Context, reqs []Req) ([]Res, error)
	// timeout bounds one statement (FinalTimeout).
	timeout time.Duration
}

type batchItem[Req, Res any] struct {
	req  Req
	done chan batchResult[Res]
}

type batchResult[Res any] struct {
	res Res
	err error
}

func newBatcher[Req, Res any](window time.Duration, max int, timeout time.Duration, run func(context.Context, []Req) ([]Res, error)) *batcher[Req, Res] {
	return &batcher[Req, Res]{reqs: make(chan batchItem[Req, Res]), window: window, max: max, run: run, timeout: timeout}
}

// do sends req with the next batch and waits for its result. Once sent, it
// waits for the statement whatever ctx says. Its write may land, and a caller
// that gave up would try again and find its own write as a lost lease. Before
// it is sent, ctx ending means nothing was written.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	done := make(chan batchResult[Res], 1)
	select {
	case b.reqs <- batchItem[Req, Res]{req, done}:
	case <-ctx.Done():
		var zero Res
		return zero, context.Cause(ctx)
	}
	r := <-done
	return r.res, r.err
}

// loop runs batches until ctx ends. The service stops it only after every
// runner has returned, so no request is left waiting.
func (b *batcher[Req, Res]) loop(ctx context.Context) {
	timer := time.NewTimer(b.window)
	timer.Stop()
	for {
		var items []batchItem[Req, Res]
		select {
		case it := <-b.reqs:
			items = append(items, it)
		case <-ctx.Done():
			return
		}
		if b.window > 0 {
			timer.Reset(b.window)
		}
	collect:
		for len(items) < b.max {
			if b.window <= 0 { // take what is waiting, do not wait for more
				select {
				case it := <-b.reqs:
					items = append(items, it)
					continue
				default:
					break collect
				}
			}
			select {
			case it := <-b.reqs:
				items = append(items, it)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		b.send(ctx, items)
	}
}

func (b *batcher[Req, Res]) send(ctx context.Context, items []batchItem[Req, Res]) {
	reqs := make([]Req, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	res, err := b.run(sctx, reqs)
	cancel()
	if err == nil && len(res) != len(items) {
		err = errors.New("a write batch answered the wrong number of results")
	}
	for i, it := range items {
		if err != nil {
			it.done <- batchResult[Res]{err: err}
			continue
		}
		it.done <- batchResult[Res]{res: res[i]}
	}
}

// markedRunning is one job's answer in a running batch.
type markedRunning struct {
	status jobstate.JobStatus
	err    error
}

// newRunningBatcher batches running writes into st.
func newRunningBatcher(st *store.Store, window time.Duration, max int, timeout time.Duration) *batcher[store.Running, markedRunning] {
	return newBatcher(window, max, timeout, func(ctx context.Context, rs []store.Running) ([]markedRunning, error) {
		return markRunning(ctx, st, rs)
	})
}

// newFinalsBatcher batches holder h's final writes into st.
func newFinalsBatcher(st *store.Store, h store.Holder, window time.Duration, max int, timeout time.Duration) *batcher[store.End, endResult] {
	return newBatcher(window, max, timeout, func(ctx context.Context, es []store.End) ([]endResult, error) {
		return storeEnds(ctx, st, h, es)
	})
}

// markRunning moves a batch of jobs to running, each fenced by its lease.
func markRunning(ctx context.Context, st *store.Store, rs []store.Running) ([]markedRunning, error) {
	statuses, err := st.MarkRunningBatch(ctx, rs)
	if err != nil {
		return nil, err
	}
	out := make([]markedRunning, len(rs))
	for i, st := range statuses {
		if st == "" {
			out[i].err = store.ErrLeaseLost
			continue
		}
		out[i].status = st
	}
	return out, nil
}

// storeEnds stores a batch of holder h's final ends, each fenced by its
// lease. When the database refuses the batch's data, each end is stored
// alone, so only the outcome it cannot store gets the *store.DataError.
func storeEnds(ctx context.Context, st *store.Store, h store.Holder, es []store.End) ([]endResult, error) {
	out := make([]endResult, len(es))
	stored, err := st.EndFinalBatch(ctx, h, es)
	var de *store.DataError
	switch {
	case errors.As(err, &de) && len(es) > 1:
		for i, e := range es {
			out[i].ended, out[i].err = st.EndAttempt(ctx, e)
		}
		return out, nil
	case err != nil:
		return nil, err
	}
	for i, ok := range stored {
		if !ok {
			out[i].err = store.ErrLeaseLost
			continue
		}
		out[i].ended = store.Ended{Status: es[i].Outcome.Status, Attempt: 0}
	}
	return out, nil
}

// endResult is one end's answer in a final-write batch.
type endResult struct {
	ended store.Ended
	err   error
}
