// Package startstop gives every long-running loop of the agent one shape,
// as River's startstop does. Start runs the loop on a goroutine of its own
// and returns once it runs. Stop ends it and waits for it to return. Stop is
// safe to call twice, and before Start.
package startstop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Service is a long-running loop that starts and stops alike.
type Service interface {
	// Start runs the service until ctx ends or Stop is called. It returns
	// once the service runs.
	Start(ctx context.Context) error
	// Stop ends the service and waits for it to return.
	Stop()
}

// ErrStarted is Start's error for a Loop that already runs.
var ErrStarted = errors.New("already started")

// Loop runs one function with the Service shape. Its zero value is not
// usable. Build it with New or Func.
type Loop struct {
	name string
	fn   func(context.Context) error

	mu  sync.Mutex
	cur *run // the latest run; nil before the first Start
}

// run is one run of a Loop, from Start to the return of its function.
type run struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the function returned
	err    error         // the function's, once done is closed
}

// New returns the Loop of fn, which runs until its context ends. name says
// which loop it is in Start's errors.
func New(name string, fn func(ctx context.Context) error) *Loop {
	return &Loop{name: name, fn: fn}
}

// Func is New for a loop that never fails.
func Func(name string, fn func(ctx context.Context)) *Loop {
	return New(name, func(ctx context.Context) error {
		fn(ctx)
		return nil
	})
}

// Timer returns the Loop that calls fn first after first, and after that
// again each time after the wait fn returned, until its context ends.
func Timer(name string, first time.Duration, fn func(ctx context.Context) (next time.Duration)) *Loop {
	return Func(name, func(ctx context.Context) {
		timer := time.NewTimer(first)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			timer.Reset(fn(ctx))
		}
	})
}

// Start runs the loop on a goroutine of its own until ctx ends or Stop. A
// loop that returned on its own may be started again.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil && !closed(l.cur.done) {
		return fmt.Errorf("starting %s: %w", l.name, ErrStarted)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &run{cancel: cancel, done: make(chan struct{})}
	l.cur = r
	running := make(chan struct{})
	go func() {
		defer close(r.done)
		defer cancel()
		close(running)
		r.err = l.fn(ctx)
	}()
	<-running
	return nil
}

// Stop ends the loop's context and waits for the loop to return.
func (l *Loop) Stop() {
	r := l.latest()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// Done is closed when the loop's latest run returned. It is nil before
// Start, so a select on it waits.
func (l *Loop) Done() <-chan struct{} {
	if r := l.latest(); r != nil {
		return r.done
	}
	return nil
}

// Wait waits for the loop's latest run to return and returns its error. It
// returns nil at once before Start.
func (l *Loop) Wait() error {
	r := l.latest()
	if r == nil {
		return nil
	}
	<-r.done
	return r.err
}

func (l *Loop) latest() *run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// StartAll starts services in order. If one fails, it stops those it
// started, in reverse order, and returns that error.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			StopReverse(services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll stops services side by side and waits for all of them.
func StopAll(services ...Service) {
	var wg sync.WaitGroup
	for _, s := range services {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// StopReverse stops services one after another, the last first.
func StopReverse(services ...Service) {
	for i := len(services) - 1; i >= 0; i-- {
		services[i].Stop()
	}
}
