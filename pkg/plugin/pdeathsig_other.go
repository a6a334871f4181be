//go:build unix && !linux

package plugin

import "syscall"

func setParentDeathSignal(syscall.Signal) {}
