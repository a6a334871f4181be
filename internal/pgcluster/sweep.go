package pgcluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A throwaway cluster lives in <tmp>/tether-pg-*/ and holds an flock on its
// lock file while its owner runs. A test binary killed before Stop (timeout,
// kill -9) leaves the directory behind. The next Start removes such
// directories, recognised by a lock nobody holds.
const (
	tmpPrefix = "tether-pg-"
	lockName  = "lock"
)

func lockTmpBase(base string) (*os.File, error) {
	// Lock under a temporary name, then rename. A sweeper only considers
	// "lock", so it never sees our directory before we hold the lock.
	tmp := filepath.Join(base, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating cluster lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking cluster directory: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(base, lockName)); err != nil {
		f.Close()
		return nil, fmt.Errorf("creating cluster lock: %w", err)
	}
	return f, nil
}

func sweepStale(logger *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPrefix+"*"))
	for _, dir := range dirs {
		if err := sweepOne(dir); err != nil {
			logger.Debug("leaving stale postgres directory", "dir", dir, "reason", err)
		} else {
			logger.Debug("removed stale postgres directory", "dir", dir)
		}
	}
}

func sweepOne(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("in use: %w", err)
	}
	// Owner gone. Its server should have followed (parent-death signal),
	// but never delete data under a live server.
	if b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && processAlive(pid) {
			return errors.New("its server is still running")
		}
	}
	return os.RemoveAll(dir)
}
