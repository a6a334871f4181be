package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrLeaseExpired is the cause (context.Cause) of an Execute or Resume
// context that the SDK cancelled because the job's lease deadline passed
// with no renewal from the agent. The agent is frozen or cut off from its
// database, and another agent may soon take the job. A plugin with local
// work stops it, as on any cancel. A plugin watching remote work stops
// watching and leaves the work alone (another agent resumes it, or Cleanup
// stops it). Runtime calls made after it (Checkpoint) fail with it too.
//
// On the host's side, Execute and Resume of a call the SDK stopped this
// way fail with a *LeaseExpiredError, which errors.Is matches to it.
var ErrLeaseExpired = errors.New("the job's lease expired: no renewal from the agent reached the plugin in time")

// maxLeaseMargin caps leaseMargin. The margin only has to cover a message's
// transit between two processes on one host and timer slack. The self-fence
// arithmetic already leaves 2×keepalive + kill_grace between the agent's own
// self-fence point and the moment anyone else may take the job.
const maxLeaseMargin = time.Second

// leaseMargin is how much earlier than the host said the SDK stops a call:
// 10 % of validFor, at most maxLeaseMargin.
func leaseMargin(validFor time.Duration) time.Duration {
	return min(validFor/10, maxLeaseMargin)
}

// leaseWriteGrace is how long output already on its way (or sent later) may
// still take once a call's lease deadline has passed. A live host answers a
// write at once and keeps the stopping job's last words. A frozen one would
// hold the call for writeTimeout.
const leaseWriteGrace = time.Second

// cutAfterLease returns ctx, cancelled leaseWriteGrace after passed is
// done. Call stop when the send is over.
func cutAfterLease(ctx, passed context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	unwatch := context.AfterFunc(passed, func() {
		t := time.NewTimer(leaseWriteGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() {
		unwatch()
		cancel()
	}
}

// LeaseDeadliner is implemented by a host's Runtime whose job has a lease
// deadline. The host's side of the protocol sends LeaseDeadline with every
// Execute and Resume. The plugin's SDK stops the call when it passes without
// a renewal (GRPCClient.Renew).
type LeaseDeadliner interface {
	// LeaseDeadline is how long the job's lease is good from now. 0 means no
	// deadline, a negative value that it has already passed.
	LeaseDeadline() time.Duration
}

// LeaseExpiredError is the host's error for a call the plugin's SDK stopped
// because its lease deadline passed without a renewal. What the plugin
// returned while being stopped is kept for the record only. It is neither
// the job's success nor the plugin's own failure.
type LeaseExpiredError struct {
	Op string // "execute" or "resume"
	// Silent is how long before the stop the last renewal (or the request)
	// had reached the plugin.
	Silent time.Duration
	// PluginSaid is the error the plugin returned while stopping ("" if it
	// returned a result).
	PluginSaid string
}

func (e *LeaseExpiredError) Error() string {
	msg := fmt.Sprintf("plugin %s: stopped by the plugin's SDK: no lease renewal reached it for %s", e.Op, e.Silent.Round(time.Millisecond))
	if e.PluginSaid != "" {
		msg += " (the plugin said: " + e.PluginSaid + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrLeaseExpired) true.
func (e *LeaseExpiredError) Is(target error) bool { return target == ErrLeaseExpired }

// leaseToMS is d in whole milliseconds for the wire: 0 for no deadline, at
// least 1 for any deadline (a deadline already passed stops the call at once).
func leaseToMS(d time.Duration) uint64 {
	if d == 0 {
		return 0
	}
	// Rounded up, and a negative d counts as 1ns.
	return uint64((max(d, 1) + time.Millisecond - 1) / time.Millisecond)
}

// callLease is the plugin side of one call's lease. It is a timer that
// calls expire when the deadline passes without a renewal. The zero deadline
// (validFor 0) never expires.
type callLease struct {
	expire func()

	mu       sync.Mutex
	timer    *time.Timer // nil: no deadline
	renewed  time.Time   // when the last renewal (or the request) arrived
	silent   time.Duration
	expired  bool
	finished bool
	// passed is done once the deadline passed (never otherwise): Runtime
	// calls of the call stop then.
	passed     context.Context
	markPassed context.CancelFunc
}

// newCallLease starts the deadline of a call whose request arrived at
// received saying the lease is good for validFor (0: no deadline).
func newCallLease(received time.Time, validFor time.Duration, expire func()) *callLease {
	l := &callLease{expire: expire, renewed: received}
	l.passed, l.markPassed = context.WithCancel(context.Background())
	if validFor > 0 {
		l.timer = time.AfterFunc(time.Until(received.Add(validFor-leaseMargin(validFor))), l.fire)
	}
	return l
}

func (l *callLease) fire() {
	l.mu.Lock()
	if l.expired || l.finished {
		l.mu.Unlock()
		return
	}
	l.expired = true
	l.silent = time.Since(l.renewed)
	l.mu.Unlock()
	// The call's context ends before its Runtime calls fail. A plugin that
	// sees a checkpoint fail and asks ctx.Err() then learns it was stopped,
	// not that its checkpoint failed on its own.
	l.expire()
	l.markPassed()
}

// renew moves the deadline to received + validFor − margin. It reports
// false for a call without a deadline, or one already expired or over.
func (l *callLease) renew(received time.Time, validFor time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil || l.expired || l.finished || validFor <= 0 {
		return false
	}
	l.renewed = received
	// Reset on an AfterFunc timer that has fired starts it again. fire
	// itself checks expired and finished under mu, so no stale run counts.
	l.timer.Reset(time.Until(received.Add(validFor - leaseMargin(validFor))))
	return true
}

// finish stops the deadline and reports whether it had passed, and then
// how long the call had gone without a renewal.
func (l *callLease) finish() (expired bool, silent time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return l.expired, l.silent
}
