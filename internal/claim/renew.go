package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// The plugin processes' side of the self-fence. The agent's own fence
// (fenceLoop) cannot run while the agent is frozen (SIGSTOP, a paused VM),
// but its plugin processes and their jobs go on. So every Execute and Resume
// carries how long the job's lease is good (runtime.LeaseDeadline). Every
// successful heartbeat moves that deadline in every plugin process
// (renewLoop). A plugin's SDK stops the call itself when its deadline passes
// with no renewal. That is at the agent's self-fence point (less a margin),
// before any other agent may take the job.

// renewLoop passes every successful heartbeat on to the plugin processes, off
// the heartbeat goroutine. A plugin that is slow to answer must never delay a
// heartbeat. The newest heartbeat wins. One that succeeds while a renewal is
// being sent is sent next, and those in between are skipped.
func (s *Service) renewLoop(ctx context.Context) {
	if s.cfg.SelfFenceAfter <= 0 {
		return // the calls carry no deadline to move
	}
	back := s.beats.next()
	for {
		select {
		case <-ctx.Done():
			return
		case <-back:
		}
		var last time.Time
		last, back = s.beats.state() // a heartbeat after this read closes back
		validFor := s.cfg.SelfFenceAfter - time.Since(last)
		if validFor <= 0 {
			continue // the agent's own fence has fired or is about to
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Keepalive)
		s.plugins.Renew(rctx, validFor)
		cancel()
	}
}

// pluginFencedError is the cause of a job whose plugin's SDK stopped the call
// because no lease renewal reached it in time. It is a self-fence (errors.Is
// errSelfFenced). The job ends as one, saying who stopped it.
type pluginFencedError struct {
	silent time.Duration
}

func (e *pluginFencedError) Error() string {
	return fmt.Sprintf("the plugin stopped the job: no lease renewal reached it for %s (agent frozen or cut off from its database)",
		e.silent.Round(time.Millisecond))
}

func (e *pluginFencedError) Is(target error) bool { return target == errSelfFenced }

// pluginFenced turns a plugin call's lease-expired error into the job's
// cause. It returns nil for any other error.
func pluginFenced(err error) error {
	var le *plugin.LeaseExpiredError
	if !errors.As(err, &le) {
		return nil
	}
	return &pluginFencedError{silent: le.Silent}
}

// fenceCause is the account of a self-fence to record. It is the plugin's
// when its SDK stopped the call, else cause. The SDK did so first, whichever
// fence the agent noticed first after a freeze.
func (e *executor) fenceCause(cause error) error {
	if e.fenced != nil && errors.Is(cause, errSelfFenced) {
		return e.fenced
	}
	return cause
}

// selfFencedError is the failure a self-fenced, non-resumable job is stored
// with, and selfFencedReason the release reason of a resumable one. Both
// serve either fence, the agent's own timer or its plugin's SDK.
func selfFencedError(agent string, cause error) string {
	var pf *pluginFencedError
	if errors.As(cause, &pf) {
		return fmt.Sprintf("agent %s lost its database connection or was frozen: its plugin stopped the job before its lease could expire (no lease renewal had reached it for %s)",
			agent, pf.silent.Round(time.Millisecond))
	}
	return "agent " + agent + " lost its database connection and stopped the job before its lease could expire"
}

func selfFencedReason(agent string, cause error) string {
	var pf *pluginFencedError
	if errors.As(cause, &pf) {
		return "self-fenced on agent " + agent + ": " + pf.Error()
	}
	return "self-fenced: agent " + agent + " could not renew its leases"
}
