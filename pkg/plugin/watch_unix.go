//go:build unix

package plugin

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// watchHost makes the plugin exit when the host process dies. A plugin left
// running would keep doing work nobody watches.
func watchHost(life *lifecycle) {
	setParentDeathSignal(syscall.SIGTERM)
	ppid := os.Getppid()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		// The poll covers systems without a parent-death signal, and Linux's
		// signal firing on the parent's thread exit rather than process exit.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sig:
			case <-t.C:
			}
			if os.Getppid() != ppid {
				life.shutdown(ShutdownGrace)
				os.Exit(1)
			}
		}
	}()
}
