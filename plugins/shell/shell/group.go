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
		// kill(-1) signals every process we may signal. kill(0) signals our
		// own group.
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
	if pgid <= 1 {
		return stopOutcome{}, fmt.Errorf("refusing to stop process group %d", pgid)
	}
	members, err := groupMembers(pgid)
	if err != nil || len(members) == 0 {
		return stopOutcome{}, err
	}
	g := &groupStop{pgid: pgid, killWait: killWait, members: members}
	g.out.Termed = true
	if err := signalGroup(pgid, unix.SIGTERM); err != nil {
		return g.out, err
	}
	_ = signalGroup(pgid, unix.SIGCONT) // best effort; TERM already went out
	err = g.wait(grace, hurry)
	return g.out, err
}

// groupStop is a process group on its way out after SIGTERM.
type groupStop struct {
	pgid     int
	killWait time.Duration
	members  []int // the live members last seen
	out      stopOutcome
	giveUp   <-chan time.Time // fires killWait after the first SIGKILL
}

// kill sends SIGKILL to the group, and starts the killWait clock the first
// time.
func (g *groupStop) kill() error {
	if !g.out.Killed {
		g.out.Killed = true
		g.giveUp = time.After(g.killWait)
	}
	return signalGroup(g.pgid, unix.SIGKILL)
}

// wait polls the group until it is empty, killing it when grace runs out or
// hurry is closed. A grace of 0 or less kills it before the first poll.
func (g *groupStop) wait(grace time.Duration, hurry <-chan struct{}) error {
	graceTimer := time.NewTimer(grace)
	defer graceTimer.Stop()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		var err error
		select {
		case <-ticker.C:
		case <-graceTimer.C:
			err = g.kill()
		case <-hurry:
			hurry = nil
			err = g.kill()
		case <-g.giveUp:
			return fmt.Errorf("process group %d still has processes %v %s after SIGKILL", g.pgid, g.members, g.killWait)
		}
		if err != nil {
			return err
		}
		if done, err := g.poll(); done || err != nil {
			return err
		}
	}
}

// poll reads the group's live members and reports done when none is left.
// A group already killed gets SIGKILL again, for anything forked while the
// first SIGKILL went out.
func (g *groupStop) poll() (done bool, err error) {
	if g.members, err = groupMembers(g.pgid); err != nil || len(g.members) == 0 {
		return true, err
	}
	if !g.out.Killed {
		return false, nil
	}
	return false, signalGroup(g.pgid, unix.SIGKILL)
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
