package plugin

import (
	"syscall"

	"golang.org/x/sys/unix"
)

func setParentDeathSignal(sig syscall.Signal) {
	// Best effort. The parent-id poll in watchHost covers a failure.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0)
}
