//go:build !linux

package agent

// SetNonDumpable does nothing, because only Linux has the dumpable flag.
// Elsewhere keep the agent's secrets out of jobs' reach by running jobs as
// another user (the shell plugin's run_as).
func SetNonDumpable() error { return nil }

// Dumpable reports ok false. The platform has no dumpable flag.
func Dumpable() (dumpable, ok bool, err error) { return false, false, nil }
