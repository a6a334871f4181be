package startstop

import (
	"context"
	"errors"
	"testing"
	"time"
)

const wait = 5 * time.Second

// blocking returns a loop that signals when it runs and returns when its
// context ends, and that signal.
func blocking() (*Loop, <-chan struct{}) {
	running := make(chan struct{}, 1)
	return Func("blocking", func(ctx context.Context) {
		running <- struct{}{}
		<-ctx.Done()
	}), running
}

func received(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s: not within %s", what, wait)
	}
}

func TestStartRunsStopWaits(t *testing.T) {
	l, running := blocking()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	received(t, running, "the loop runs after Start")
	if closed(l.Done()) {
		t.Fatal("Done is closed while the loop runs")
	}
	l.Stop()
	if !closed(l.Done()) {
		t.Fatal("Stop returned before the loop did")
	}
	if err := l.Wait(); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
}

func TestStopTwice(t *testing.T) {
	l, _ := blocking()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	l.Stop()
}

func TestStopBeforeStart(t *testing.T) {
	l, _ := blocking()
	l.Stop()
	if l.Done() != nil {
		t.Fatal("Done is set before Start")
	}
	if err := l.Wait(); err != nil {
		t.Fatalf("Wait before Start = %v, want nil", err)
	}
}

func TestStartTwice(t *testing.T) {
	l, _ := blocking()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	if err := l.Start(t.Context()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
}

func TestStartAgainAfterStop(t *testing.T) {
	l, running := blocking()
	for range 2 {
		if err := l.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		received(t, running, "the loop runs after Start")
		l.Stop()
	}
}

func TestContextEndsLoop(t *testing.T) {
	l, _ := blocking()
	ctx, cancel := context.WithCancel(t.Context())
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	received(t, l.Done(), "the loop returns when its context ends")
}

func TestLoopError(t *testing.T) {
	failed := errors.New("lost the name")
	l := New("failing", func(context.Context) error { return failed })
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	received(t, l.Done(), "a failing loop returns")
	if err := l.Wait(); !errors.Is(err, failed) {
		t.Fatalf("Wait = %v, want %v", err, failed)
	}
	l.Stop() // after the loop returned on its own
	if err := l.Start(t.Context()); err != nil {
		t.Fatalf("Start after the loop returned = %v, want nil", err)
	}
}

// refusing is a Service whose Start fails.
type refusing struct{}

func (refusing) Start(context.Context) error { return errors.New("refused") }
func (refusing) Stop()                       {}

func TestStartAllStopsWhatItStarted(t *testing.T) {
	a, _ := blocking()
	b, _ := blocking()
	if err := StartAll(t.Context(), a, b, refusing{}); err == nil {
		t.Fatal("StartAll = nil, want the refusal")
	}
	for _, l := range []*Loop{a, b} {
		if !closed(l.Done()) {
			t.Fatal("a loop StartAll started still runs after its failure")
		}
	}
}

func TestStopAll(t *testing.T) {
	a, _ := blocking()
	b, _ := blocking()
	if err := StartAll(t.Context(), a, b); err != nil {
		t.Fatal(err)
	}
	StopAll(a, b)
	if !closed(a.Done()) || !closed(b.Done()) {
		t.Fatal("StopAll returned before every loop did")
	}
}

func TestTimer(t *testing.T) {
	ticks := make(chan struct{})
	l := Timer("ticking", 0, func(ctx context.Context) time.Duration {
		select {
		case ticks <- struct{}{}:
		case <-ctx.Done():
		}
		return time.Millisecond
	})
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		received(t, ticks, "the timer calls its function again")
	}
	l.Stop()
	if !closed(l.Done()) {
		t.Fatal("Stop returned before the timer loop did")
	}
}
