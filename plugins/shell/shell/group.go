package shell

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// pollInterval is how often a stopping group is checked for live members.
const pollInterval = 20 * time.Millisecond

// stopOutcome says how a group was stopped, for messages.
type stopOutcome struct {
	Termed bool // SIGTERM was sent
	Killed bool // SIGKILL was sent
}

// signalGroup sends sig to every process in group pgid. A group that is
// already gone is not an error.
func signalGroup(pgid int, sig unix.Signal) error {
	if pgid <= 1 {
		// kill(-1) signals every process we may signal; kill(0) our own group.
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	err := unix.Kill(-pgid, sig)
	if err == nil || errors.Is(err, unix.ESRCH) {
		return nil
	}
	return fmt.Errorf("sending %s to process group %d: %w", unix.SignalName(sig), pgid, err)
}

// stopGroup ends process group pgid and returns once no live process is left
// in it. If any remain, they get SIGTERM (and SIGCONT, so stopped processes
// see it), then SIGKILL when grace runs out or hurry is closed. It gives up
// with an error if processes survive SIGKILL for killWait (e.g. stuck in
// uninterruptible sleep).
func stopGroup(pgid int, grace time.Duration, hurry <-chan struct{}, killWait time.Duration) (stopOutcome, error) {
	var out stopOutcome
	if pgid <= 1 {
		return out, fmt.Errorf("refusing to stop process group %d", pgid)
	}
	members, err := groupMembers(pgid)
	if err != nil || len(members) == 0 {
		return out, err
	}
	out.Termed = true
	if err := signalGroup(pgid, unix.SIGTERM); err != nil {
		return out, err
	}
	_ = signalGroup(pgid, unix.SIGCONT) // best effort; TERM already went out

	graceTimer := time.NewTimer(grace)
	defer graceTimer.Stop()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var giveUp <-chan time.Time
	kill := func() error {
		if !out.Killed {
			out.Killed = true
			giveUp = time.After(killWait)
		}
		return signalGroup(pgid, unix.SIGKILL)
	}
	if grace <= 0 {
		if err := kill(); err != nil {
			return out, err
		}
	}
	for {
		select {
		case <-ticker.C:
		case <-graceTimer.C:
			if err := kill(); err != nil {
				return out, err
			}
		case <-hurry:
			hurry = nil
			if err := kill(); err != nil {
				return out, err
			}
		case <-giveUp:
			return out, fmt.Errorf("process group %d still has processes %v %s after SIGKILL", pgid, members, killWait)
		}
		if members, err = groupMembers(pgid); err != nil || len(members) == 0 {
			return out, err
		}
		if out.Killed {
			// Again, for anything forked while the first SIGKILL went out.
			if err := signalGroup(pgid, unix.SIGKILL); err != nil {
				return out, err
			}
		}
	}
}

// describe renders how the group was stopped, e.g. "SIGTERM, then SIGKILL
// after 10s".
func (o stopOutcome) describe(grace time.Duration) string {
	switch {
	case o.Killed:
		return fmt.Sprintf("sent SIGTERM, then SIGKILL (grace %s)", grace)
	case o.Termed:
		return "stopped by SIGTERM"
	default:
		return "no process was left"
	}
}
