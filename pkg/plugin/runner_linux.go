package plugin

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// groupAttr puts the plugin in a process group of its own, so that killing
// the group kills whatever the plugin started there too.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// waitNoReap blocks until process pid has exited, leaving it unreaped.
func waitNoReap(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// killGroup sends SIGKILL to p's process group (p leads it, see groupAttr).
func killGroup(p *os.Process) {
	if p.Pid > 1 {
		_ = unix.Kill(-p.Pid, unix.SIGKILL)
	}
}

// killLeftovers kills what is left of the group of p, which has exited
// (unreaped, so its id is still the group's).
func killLeftovers(p *os.Process) { killGroup(p) }
