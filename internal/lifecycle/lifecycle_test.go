package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
)

func TestDecide(t *testing.T) {
	levers := limits.Set{MaxRetry: 2, RetryBackoff: 10 * time.Second, RetryBackoffMax: 25 * time.Second}
	failed := func(class jobstate.ErrorClass, attempt int) Input {
		return Input{Status: jobstate.StatusFailed, ErrorClass: class, Attempt: attempt, Levers: levers, PluginCalled: true, HasCleanup: true, Jitter: 1 - 1e-9}
	}
	tests := []struct {
		name string
		in   Input
		want Plan
	}{
		{"success: no retry, no Cleanup", Input{Status: jobstate.StatusSucceeded, Attempt: 1, Levers: levers, PluginCalled: true, HasCleanup: true}, Plan{}},
		{"retriable, first attempt: retried after the backoff, Cleanup first", failed(jobstate.Retriable, 1), Plan{Retry: true, Wait: 10 * time.Second, Cleanup: true}},
		{"retriable, second attempt: backoff doubles", failed(jobstate.Retriable, 2), Plan{Retry: true, Wait: 20 * time.Second, Cleanup: true}},
		{"retriable, last allowed attempt: final", failed(jobstate.Retriable, 3), Plan{Cleanup: true}},
		{"permanent: final", failed(jobstate.Permanent, 1), Plan{Cleanup: true}},
		{"no class counts as not retriable", failed("", 1), Plan{Cleanup: true}},
		{"NoRetry wins over the levers", func() Input { in := failed(jobstate.Retriable, 1); in.NoRetry = true; return in }(), Plan{Cleanup: true}},
		{"canceled after the plugin ran: Cleanup", Input{Status: jobstate.StatusCanceled, Attempt: 1, Levers: levers, PluginCalled: true, HasCleanup: true}, Plan{Cleanup: true}},
		{"canceled before the plugin ran: nothing to clean", Input{Status: jobstate.StatusCanceled, Attempt: 1, Levers: levers, HasCleanup: true}, Plan{}},
		{"failed before the plugin ran: retried, nothing to clean", func() Input { in := failed(jobstate.Retriable, 1); in.PluginCalled = false; return in }(), Plan{Retry: true, Wait: 10 * time.Second}},
		{"plugin without Cleanup: retried at once after the backoff", func() Input { in := failed(jobstate.Retriable, 1); in.HasCleanup = false; return in }(), Plan{Retry: true, Wait: 10 * time.Second}},
		{"max_retry 0: never retried", func() Input { in := failed(jobstate.Retriable, 1); in.Levers.MaxRetry = 0; return in }(), Plan{Cleanup: true}},
		{"backoff capped by retry_backoff_max", func() Input { in := failed(jobstate.Retriable, 2); in.Levers.MaxRetry = 5; in.Attempt = 4; return in }(), Plan{Retry: true, Wait: 25 * time.Second, Cleanup: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.in)
			assert.Equal(t, tt.want.Retry, got.Retry, "retry")
			assert.Equal(t, tt.want.Cleanup, got.Cleanup, "cleanup")
			assert.InDelta(t, tt.want.Wait.Seconds(), got.Wait.Seconds(), 0.001, "wait")
		})
	}
}

func TestDecideJitterSpreadsOverHalfToAll(t *testing.T) {
	in := Input{Status: jobstate.StatusFailed, ErrorClass: jobstate.Retriable, Attempt: 1, Levers: limits.Set{MaxRetry: 1, RetryBackoff: 10 * time.Second, RetryBackoffMax: time.Minute}}
	in.Jitter = 0
	assert.Equal(t, 5*time.Second, Decide(in).Wait)
	in.Jitter = 0.5
	assert.Equal(t, 7500*time.Millisecond, Decide(in).Wait)
}
