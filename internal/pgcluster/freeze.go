package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Freeze hangs the server without stopping it. It sends SIGSTOP to the
// postmaster and then to every process below it (backends, walwriter,
// checkpointer, WAL senders and receivers...). While frozen, the kernel still
// accepts TCP connections into the listen backlog and queues what clients
// send, but nothing answers. A connection attempt or a statement waits until
// Thaw (or its client gives up). A statement already in a backend's socket
// runs when it is thawed, even if its client has given up since.
//
// What is in that socket depends on the client. pgx's default exec mode
// sends a statement with arguments that the connection has not prepared yet
// as Parse/Describe alone and waits for the answer before Bind/Execute, so
// under a freeze that statement never runs. The simple protocol (Exec without
// arguments) and pgx.QueryExecModeExec send it whole, and it runs on Thaw.
// pgx answers a context timeout with a cancel request on a new connection
// (pgconn's asyncClose), which the postmaster reads only after Thaw. It races
// the thawed backend (which won every time we looked, since the cancel waits
// for the postmaster to fork a process that reads it).
//
// Freeze is a no-op on a frozen server. StopServer and Stop work on a frozen
// server (they thaw it). A process that exits while its server is frozen
// leaves it stopped: `kill -CONT` it, and it then obeys its parent-death
// signal.
func (c *Cluster) Freeze(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return fmt.Errorf("freezing postgres (data %s): not running", c.dataDir)
	}
	if c.frozen != nil {
		return nil
	}
	frozen, err := freezeTree(ctx, c.srv.pid)
	if err == nil && len(frozen) == 0 {
		err = errors.New("the postmaster has exited")
	}
	if err != nil {
		contAll(frozen)
		return fmt.Errorf("freezing postgres (pid %d, data %s): %w", c.srv.pid, c.dataDir, err)
	}
	c.frozen = frozen
	c.logger.Info("postgres frozen", "data_dir", c.dataDir, "processes", len(frozen))
	return nil
}

// Thaw resumes what Freeze stopped and waits until none of it is still
// stopped. It is a no-op on a server that is not frozen.
func (c *Cluster) Thaw(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := c.thawLocked()
	if err := pollProcs(ctx, pids, func(state byte) bool { return !isStopped(state) }); err != nil {
		return fmt.Errorf("thawing postgres (data %s): %w", c.dataDir, err)
	}
	if len(pids) > 0 {
		c.logger.Info("postgres thawed", "data_dir", c.dataDir, "processes", len(pids))
	}
	return nil
}

// thawLocked sends SIGCONT to every frozen process and forgets them.
func (c *Cluster) thawLocked() []int {
	pids := c.frozen
	c.frozen = nil
	contAll(pids)
	return pids
}

// freezeTree stops root, waits until it is stopped, then stops the processes
// below it, level by level, until a look at /proc finds none that is not
// stopped yet. Root goes first. A stopped postmaster forks no more children,
// so the loop ends. It returns what it stopped, root first, also on error.
func freezeTree(ctx context.Context, root int) ([]int, error) {
	var frozen []int
	seen := map[int]bool{}
	next := []int{root}
	for len(next) > 0 {
		for _, pid := range next {
			seen[pid] = true
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				if errors.Is(err, syscall.ESRCH) {
					continue // exited meanwhile
				}
				return frozen, fmt.Errorf("stopping pid %d: %w", pid, err)
			}
			frozen = append(frozen, pid)
		}
		// SIGSTOP takes effect asynchronously. A process still running
		// could fork after the scan below.
		if err := pollProcs(ctx, next, isStopped); err != nil {
			return frozen, err
		}
		kids, err := descendants(root)
		if err != nil {
			return frozen, err
		}
		next = next[:0]
		for _, pid := range kids {
			if !seen[pid] {
				next = append(next, pid)
			}
		}
	}
	return frozen, nil
}

func contAll(pids []int) {
	// Children first, postmaster last: the reverse of freezing.
	for i := len(pids) - 1; i >= 0; i-- {
		_ = syscall.Kill(pids[i], syscall.SIGCONT)
	}
}

// isStopped reports whether a /proc state is one a stopped process can be
// in: stopped, or past caring (a zombie or dead process, which SIGSTOP does
// not change).
func isStopped(state byte) bool {
	switch state {
	case 'T', 't', 'Z', 'X':
		return true
	}
	return false
}

// pollProcs waits until every process in pids that still exists is in a
// state ok accepts.
func pollProcs(ctx context.Context, pids []int, ok func(state byte) bool) error {
	return poll(ctx, time.Millisecond, func(context.Context) (bool, error) {
		for _, pid := range pids {
			st, err := readStat(pid)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return false, err
			}
			if !ok(st.state) {
				return false, fmt.Errorf("pid %d in state %c", pid, st.state)
			}
		}
		return true, nil
	})
}

// poll calls check every interval until it reports done or ctx ends. Then
// the error check gave last says what it was still waiting for.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) (bool, error)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (still: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-t.C:
		}
		done, why := check(ctx)
		if done {
			return nil
		}
		last = why
		t.Reset(interval)
	}
}

type procStat struct {
	state byte
	ppid  int
}

// readStat reads a process's state and parent from /proc/<pid>/stat
// ("pid (comm) state ppid ...", proc(5)). comm may hold spaces and
// parentheses, so the fields start after the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: %q", pid, b)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: %w", pid, err)
	}
	return procStat{state: f[0][0], ppid: ppid}, nil
}

// descendants lists the processes below root, found by parent pid in /proc.
func descendants(root int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		children[st.ppid] = append(children[st.ppid], pid)
	}
	var out []int
	queue := children[root]
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out, nil
}
