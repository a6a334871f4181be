//go:build linux

package agent

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SetNonDumpable clears the process's dumpable flag. The kernel then owns
// /proc/<pid>/{environ,mem,maps,…} by root and refuses ptrace to processes of
// the same user, so a job the shell plugin runs as the agent's user cannot
// read DATABASE_URL or the API tokens out of the agent. It also disables core
// dumps, which would hold the same secrets. Plugins are exec'd, which resets
// the flag for them. Their environment is scrubbed instead
// (internal/pluginhost).
func SetNonDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// Dumpable reports the process's dumpable flag. ok is false where the
// platform has none.
func Dumpable() (dumpable, ok bool, err error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, true, fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", err)
	}
	return v != 0, true, nil
}
