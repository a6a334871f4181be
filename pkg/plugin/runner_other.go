//go:build !linux

package plugin

import (
	"os"
	"syscall"
)

// Elsewhere the plugin shares the host's process group and only the plugin
// process itself is killed. An inherited pipe is still cut after pipeGrace.
func groupAttr() *syscall.SysProcAttr { return nil }

func waitNoReap(int) {}

func killGroup(p *os.Process) { _ = p.Kill() }

// killLeftovers does nothing. Without waitid(WNOWAIT) the exited leader may
// already be reaped, and its pid reused.
func killLeftovers(*os.Process) {}
