//go:build !linux

package shell

import "errors"

// The plugin needs waitid(WNOWAIT) and /proc to manage process groups safely.
// Elsewhere Execute fails with a clear error instead of half-working.
const procSupported = false

var errUnsupported = errors.New("the shell plugin runs only on Linux")

type procInfo struct {
	State     byte
	PGID      int
	StartTime uint64
}

func (p procInfo) dead() bool { return true }

func waitExit(int) error              { return errUnsupported }
func readProc(int) (procInfo, error)  { return procInfo{}, errUnsupported }
func groupMembers(int) ([]int, error) { return nil, errUnsupported }
func hasEnv(int, string) bool         { return false }
func bootID() string                  { return "" }
