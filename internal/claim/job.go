package claim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherjobs/tether/internal/store"
)

// runningJob is one job this agent holds under one lease. It is the
// producer's record of the job, which its executor shares.
type runningJob struct {
	key       jobKey
	claimed   store.Claimed
	claimedAt time.Time // local clock, for the durations in the metrics
	ctx       context.Context
	cancelFn  context.CancelCauseFunc

	resumable  bool          // the plugin can reattach: stopping means detaching
	hasCleanup bool          // the plugin declares Cleanup
	done       chan struct{} // closed when its executor has returned
	// ended is set once the attempt's end is stored. The lease is then
	// gone, so the heartbeat stops renewing it (a Cleanup may still run).
	ended atomic.Bool
	// ending says the job's slot is free and its final write queued
	// (under Service.mu).
	ending bool

	// called is set once its plugin is called (or a resume claimed it).
	// It is what the database was told, for the reconcile.
	called atomic.Bool

	mu     sync.Mutex
	handle []byte // the last checkpoint the database acknowledged
}

// cancel stops the plugin call. The first cause wins. A lease lost after a
// cancel request still counts as a cancel request, and vice versa.
func (j *runningJob) cancel(cause error) { j.cancelFn(cause) }

// lastHandle is a copy of the last checkpoint the database acknowledged.
func (j *runningJob) lastHandle() []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]byte(nil), j.handle...)
}

// setHandle records a checkpoint the database acknowledged.
func (j *runningJob) setHandle(handle []byte) {
	j.mu.Lock()
	j.handle = append([]byte(nil), handle...)
	j.mu.Unlock()
}
