package janitor

import (
	"testing"
	"time"
)

// await returns the next value a test signal sends on ch, or fails the
// test once within has passed without one.
func await[T any](t *testing.T, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s: not signalled within %s", what, within)
		var zero T
		return zero
	}
}
