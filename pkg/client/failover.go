package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
)

// Failover sends requests to one of several equivalent servers (agents of one
// database; or one address that may restart) and follows a job across their
// loss: a request that fails for want of a server, or a stream cut before the
// job ended, is retried with backoff on the next server, resuming after the
// last record seen. Only ctx bounds how long it keeps trying.
type Failover struct {
	clients    []*Client
	minBackoff time.Duration
	maxBackoff time.Duration
	onRetry    func(server string, err error, in time.Duration)
}

// FailoverOption configures a Failover.
type FailoverOption func(*Failover)

// WithBackoff sets the first and the largest pause between retries
// (default 200ms, 5s). The pause doubles after each failure in a row.
func WithBackoff(first, largest time.Duration) FailoverOption {
	return func(f *Failover) { f.minBackoff, f.maxBackoff = first, largest }
}

// OnRetry is called before each pause with the server that failed and why.
func OnRetry(fn func(server string, err error, in time.Duration)) FailoverOption {
	return func(f *Failover) { f.onRetry = fn }
}

// NewFailover returns a Failover over clients, tried in order.
func NewFailover(clients []*Client, opts ...FailoverOption) (*Failover, error) {
	if len(clients) == 0 {
		return nil, errors.New("failover: no servers")
	}
	f := &Failover{clients: clients, minBackoff: 200 * time.Millisecond, maxBackoff: 5 * time.Second}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

// Retryable reports whether err may go away on another server or later: a
// network error, a cut stream or a 5xx/429 answer. Other API errors (a bad
// request, an unknown job) are final.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
	}
	return true
}

// retrier walks the servers with backoff. progress resets the backoff.
type retrier struct {
	f     *Failover
	i     int
	pause time.Duration
}

func (r *retrier) client() *Client { return r.f.clients[r.i%len(r.f.clients)] }

func (r *retrier) progress() { r.pause = 0 }

// failed waits before the next try on the next server. It returns err when
// err is final or ctx ended.
func (r *retrier) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !Retryable(err) {
		return err
	}
	if r.pause == 0 {
		r.pause = r.f.minBackoff
	} else {
		r.pause = min(2*r.pause, r.f.maxBackoff)
	}
	if r.f.onRetry != nil {
		r.f.onRetry(r.client().String(), err, r.pause)
	}
	r.i++
	t := time.NewTimer(r.pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
	case <-t.C:
		return nil
	}
}

// Do calls fn with a client, trying the next server while fn fails with a
// retryable error, up to once per server, without pauses. A single request
// that no server answers is an error at once.
func (f *Failover) Do(ctx context.Context, fn func(context.Context, *Client) error) error {
	var err error
	for _, c := range f.clients {
		if err = fn(ctx, c); !Retryable(err) || ctx.Err() != nil { // nil is not retryable
			return err
		}
	}
	return err
}

// follow calls read with the next server until it returns the end record.
// A retryable error pauses and tries again. Others end the follow.
func (r *retrier) follow(ctx context.Context, read func(*Client) (api.StreamEnd, error)) (api.StreamEnd, error) {
	for {
		end, err := read(r.client())
		if err == nil {
			return end, nil
		}
		if err := r.failed(ctx, err); err != nil {
			return end, err
		}
	}
}

// FollowLogs follows a job's output until its end record, calling fn once
// per line in write order across reconnects, and returns the end record.
// q.After is where it starts. q.Follow is implied. q.Tail and q.Since
// select where it starts too: once a line was passed on, a reconnect asks
// for what comes after it alone.
func (f *Failover) FollowLogs(ctx context.Context, id string, q LogQuery, fn func(api.LogLine) error) (api.StreamEnd, error) {
	r := &retrier{f: f}
	q.Follow = true
	cur := &logCursor{done: q.After}
	return r.follow(ctx, func(c *Client) (api.StreamEnd, error) {
		if cur.started() {
			q.Tail, q.Since, q.SinceAgo = 0, time.Time{}, 0
		}
		q.After = cur.reconnect()
		return c.LogRecords(ctx, id, q, func(rec api.LogLine) error {
			if !cur.admit(rec.Seq) {
				return nil
			}
			r.progress()
			return fn(rec)
		})
	})
}

// FollowEvents follows a job's events after seq after until the end record,
// calling fn once per event across reconnects.
func (f *Failover) FollowEvents(ctx context.Context, id string, after int64, fn func(api.Event) error) (api.StreamEnd, error) {
	r := &retrier{f: f}
	return r.follow(ctx, func(c *Client) (api.StreamEnd, error) {
		return c.EventRecords(ctx, id, after, true, func(e api.Event) error {
			if e.ID <= after {
				return nil
			}
			after = e.ID
			r.progress()
			return fn(e)
		})
	})
}

// Wait polls a job until it is finished and returns it, riding out lost
// servers. onChange is called as by Client.Wait.
func (f *Failover) Wait(ctx context.Context, id string, onChange func(api.JobDetail)) (api.JobDetail, error) {
	r := &retrier{f: f}
	w := watch{onChange: onChange}
	for {
		c := r.client()
		j, err := c.Get(ctx, id)
		if err != nil {
			if err := r.failed(ctx, err); err != nil {
				return w.last, err
			}
			continue
		}
		r.progress()
		if w.saw(j) {
			return j, nil
		}
		t := time.NewTimer(c.pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return w.last, ctx.Err()
		case <-t.C:
		}
	}
}

// Get returns a job from the first server that answers.
func (f *Failover) Get(ctx context.Context, id string) (api.JobDetail, error) {
	var j api.JobDetail
	err := f.Do(ctx, func(ctx context.Context, c *Client) error {
		var err error
		j, err = c.Get(ctx, id)
		return err
	})
	return j, err
}

// logCursor tells which log records a follower has passed on. Lines of one
// chunk share its seq, and a stream may be cut inside a chunk. A reconnect
// asks for the chunks after the last one seen whole (done) and skips the
// lines of the chunk in progress (cur) already passed on (n).
type logCursor struct {
	done, cur int64
	n, skip   int
}

// started reports whether a record was passed on.
func (c *logCursor) started() bool { return c.cur != 0 }

// reconnect returns the after= of the next request.
func (c *logCursor) reconnect() int64 {
	c.skip = c.n
	return c.done
}

// admit reports whether the record of chunk seq is new, and counts it.
func (c *logCursor) admit(seq int64) bool {
	switch {
	case seq == c.cur && c.cur != 0:
		if c.skip > 0 {
			c.skip--
			return false
		}
		c.n++
		return true
	case seq <= c.done || seq < c.cur:
		return false // already passed on: never twice
	default:
		if c.cur != 0 {
			c.done = c.cur
		}
		c.cur, c.n, c.skip = seq, 1, 0
		return true
	}
}
