package kubetest

import "syscall"

// A child dies with the test binary rather than outliving it.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
