package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/store"
)

// retryWrite runs one of the executor's fenced writes until it lands, is
// refused, or the agent has been shutting down for FinalTimeout.
func (e *executor) retryWrite(what string, write func(context.Context) error) error {
	return e.untilWritten(e.writes, e.log, what, write)
}

// untilWritten runs write, each try bounded by FinalTimeout, while the
// database cannot be reached. It tries again at the next successful
// heartbeat or after a short backoff, until the write lands, its fence
// refuses it (ErrLeaseLost, ErrOutputGap), the database refuses its data (*DataError), or
// stop ends. It is the one way the host waits out an outage, for final
// writes, releases and checkpoints alike.
func (d *executorDeps) untilWritten(stop context.Context, log *slog.Logger, what string, write func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		// After the database's history changed, nothing is written before the
		// reconcile has compared what it holds. This is bounded, because the
		// fences still hold if it takes longer.
		if err := d.history.Wait(stop, dbhistory.SettleBound); err != nil && !errors.Is(err, dbhistory.ErrNotSettled) {
			return fmt.Errorf("%s: gave up (%v)", what, context.Cause(stop))
		}
		err := d.tryWrite(stop, write)
		if settled(err) {
			return err
		}
		if try == 1 {
			log.Warn(what+"; will retry when the database answers", "err", err)
		}
		if !d.waitForDatabase(stop, wait) {
			return fmt.Errorf("%s: gave up (%v): %w", what, context.Cause(stop), err)
		}
		wait = min(wait*2, writeRetryMax)
	}
}

// tryWrite runs write once, bounded by FinalTimeout whatever stop says.
func (d *executorDeps) tryWrite(stop context.Context, write func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(stop), d.finalTimeout)
	defer cancel()
	return write(ctx)
}

// settled reports whether a write's answer is final. It is when the write
// landed, when its fence refused it, and when the database refused its data.
func settled(err error) bool {
	var de *store.DataError
	return err == nil || errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrOutputGap) || errors.As(err, &de)
}

// waitForDatabase waits for the next successful heartbeat or wait,
// whichever comes first. It reports false when stop ended first.
func (d *executorDeps) waitForDatabase(stop context.Context, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.beats.next():
	case <-t.C:
	case <-stop.Done():
		return false
	}
	return true
}
