package shell

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procSupported reports whether this platform has what the plugin needs:
// waitid(WNOWAIT) and /proc.
const procSupported = true

// waitExit blocks until process pid has exited, without reaping it. Keeping the
// exited leader unreaped keeps its PID (= the group ID) allocated, so the group
// ID cannot be recycled while the plugin is still signalling the group.
func waitExit(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for process %d: %w", pid, err)
		}
		return nil
	}
}

// procInfo is the part of /proc/<pid>/stat the plugin uses.
type procInfo struct {
	State     byte   // R, S, D, Z, ...
	PGID      int    // process group
	StartTime uint64 // clock ticks since boot; with the PID, identifies a process
}

func (p procInfo) dead() bool { return p.State == 'Z' || p.State == 'X' }

// readProc reads /proc/<pid>/stat. A missing process is an error wrapping
// os.ErrNotExist.
func readProc(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	return parseStat(b)
}

// parseStat parses a /proc/<pid>/stat line. The command name (field 2) may
// hold spaces and parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (procInfo, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, errors.New("malformed /proc stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state). Start time is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, errors.New("malformed /proc stat: too few fields")
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return procInfo{}, fmt.Errorf("malformed /proc stat pgrp: %w", err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procInfo{}, fmt.Errorf("malformed /proc stat starttime: %w", err)
	}
	return procInfo{State: f[0][0], PGID: pgid, StartTime: start}, nil
}

// groupMembers returns the live (not zombie) processes in process group pgid.
// Zombies are dead. They hold no resources and cannot be signalled further, and
// an init that does not reap (common in containers) would keep them forever.
func groupMembers(pgid int) ([]int, error) {
	// Fast path: no process at all in the group.
	if err := unix.Kill(-pgid, 0); errors.Is(err, unix.ESRCH) {
		return nil, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing /proc: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readProc(pid)
		if err != nil {
			continue // exited while we looked
		}
		if p.PGID == pgid && !p.dead() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// hasEnv reports whether process pid was started with the variable kv
// ("NAME=value") in its environment.
func hasEnv(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(b), "\x00"), kv)
}

// bootID identifies the running kernel boot. PIDs and start times recorded
// under another boot mean nothing now.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
