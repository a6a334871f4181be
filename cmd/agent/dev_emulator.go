package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/localstack/emulator"
)

// The local ECS emulator of `tether dev` runs as a process of its own, so
// its tasks outlive a kill -9 of the agent. That is what lets a restarted
// `tether dev` reattach to them. Its pid and URL are kept in
// <data-dir>/run/emulator.json. A clean exit of `tether dev` (Ctrl-C) and
// `tether dev stop` (`make stop`) stop it, a crash of the agent does not.

// emulatorRun is the content of the emulator's run file.
type emulatorRun struct {
	PID int    `json:"pid"`
	URL string `json:"url"`
}

const (
	emulatorRunFile = "emulator.json"
	emulatorLogFile = "emulator.log"
	devPIDFile      = "dev.pid"
	// emulatorStartTimeout bounds how long `tether dev` waits for the
	// emulator it started to answer.
	emulatorStartTimeout = 15 * time.Second
	// processStopTimeout bounds the wait for a process told to stop before
	// it is killed. The emulator itself gives its tasks a few seconds.
	processStopTimeout = 15 * time.Second
)

// devEmulatorCmd is `tether dev emulator`: the emulator in the foreground.
// `tether dev` starts it detached. It is hidden because nobody needs to
// run it by hand (`go run ./localstack` is the emulator's own command).
func (a *app) devEmulatorCmd() *cobra.Command {
	var addr, runFile string
	cmd := &cobra.Command{
		Use:    "emulator",
		Short:  "Run the local ECS + CloudWatch Logs emulator of tether dev in the foreground",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDevEmulator(cmd.Context(), addr, runFile)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:4566", "listen address; a free port when it is taken")
	cmd.Flags().StringVar(&runFile, "run-file", "", "write {pid, url} here once listening (removed on exit)")
	return cmd
}

func (a *app) runDevEmulator(ctx context.Context, addr, runFile string) error {
	log := a.logger()
	// Long retention. A restarted agent must still find a task that
	// stopped while no agent was watching.
	emu := emulator.New(emulator.Options{StoppedRetention: time.Hour, StopTimeout: 5 * time.Second, Logger: log})
	url, err := emu.Start(addr)
	if err != nil {
		if url, err = emu.Start("127.0.0.1:0"); err != nil { // 4566 is taken (LocalStack?)
			return fmt.Errorf("starting the local ECS emulator: %w", err)
		}
	}
	defer func() {
		if err := emu.Close(); err != nil {
			log.Warn("stopping the local ECS emulator", "err", err)
		}
	}()
	if runFile != "" {
		if err := writeRunFile(runFile, emulatorRun{PID: os.Getpid(), URL: url}); err != nil {
			return err
		}
		defer removeRunFileIfOurs(runFile, os.Getpid())
	}
	log.Info("ECS and CloudWatch Logs emulator listening", "url", url, "pid", os.Getpid())
	<-ctx.Done()
	log.Info("shutting down; killing task processes")
	return nil
}

// writeRunFile writes the file atomically, so a reader never sees half of it.
func writeRunFile(path string, run emulatorRun) error {
	b, _ := json.Marshal(run) // an int and a string: cannot fail
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// readRunFile reads the emulator recorded at path. It returns the zero
// emulatorRun, whose pid 0 no process has, when there is none.
func readRunFile(path string) emulatorRun {
	var run emulatorRun
	b, _ := os.ReadFile(path) // a missing file is nil, which does not parse
	if json.Unmarshal(b, &run) != nil {
		return emulatorRun{}
	}
	return run
}

// removeRunFileIfOurs leaves a file a newer emulator wrote alone.
func removeRunFileIfOurs(path string, pid int) {
	if readRunFile(path).PID == pid {
		_ = os.Remove(path)
	}
}

// runningEmulator reads the run file at path and reports whether the
// emulator it names answers.
func runningEmulator(ctx context.Context, path string) (emulatorRun, bool) {
	run := readRunFile(path)
	if !processAlive(run.PID) || run.URL == "" {
		return run, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(run.URL, "/")+"/_emulator/health", nil)
	if err != nil {
		return run, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return run, false
	}
	_ = resp.Body.Close()
	return run, resp.StatusCode == http.StatusOK
}

// ensureEmulator reuses the emulator recorded in runDir when it answers, or
// starts one as a detached process (its own session: neither a Ctrl-C in
// the terminal nor the agent's death reaches it). started says which.
func ensureEmulator(ctx context.Context, runDir string) (run emulatorRun, started bool, err error) {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return run, false, fmt.Errorf("creating %s: %w", runDir, err)
	}
	path := filepath.Join(runDir, emulatorRunFile)
	if run, ok := runningEmulator(ctx, path); ok {
		return run, false, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return run, false, fmt.Errorf("finding the tether binary to start the ECS emulator: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(runDir, emulatorLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return run, false, fmt.Errorf("opening the ECS emulator's log: %w", err)
	}
	defer logf.Close() // the child has its own copy
	_ = os.Remove(path)
	cmd := exec.Command(exe, "dev", "emulator", "--run-file", path, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return run, false, fmt.Errorf("starting the ECS emulator: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it if this process outlives it

	ctx, cancel := context.WithTimeout(ctx, emulatorStartTimeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-exited:
			return run, false, fmt.Errorf("the ECS emulator exited during start-up (%v); see %s", err, logf.Name())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return run, false, fmt.Errorf("the ECS emulator did not answer: %w; see %s", ctx.Err(), logf.Name())
		case <-t.C:
		}
		if r, ok := runningEmulator(ctx, path); ok && r.PID == cmd.Process.Pid {
			return r, true, nil
		}
	}
}

// stopProcess sends SIGTERM to pid (SIGINT for PostgreSQL's fast shutdown)
// and waits for it to go, killing it after processStopTimeout or when ctx
// ends. It is for processes this one did not start as children, so it polls.
// pid is above 0 (its callers have seen the process alive). A pid gone
// meanwhile answers ESRCH, and is not waited for.
func stopProcess(ctx context.Context, pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling pid %d: %w", pid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, processStopTimeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for processAlive(pid) {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("pid %d did not stop; killed it: %w", pid, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// processAlive reports whether pid exists and is not a zombie (a child of
// this process that exited but is not yet reaped counts as gone). A pid
// below 1 is none: kill(0) would reach this process's group.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	// Field 3, after the parenthesised command name and a space, is the
	// state.
	s := string(b)
	return !strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z")
}

// writeDevPID records this process for `tether dev stop`. remove deletes
// the file unless another `tether dev` has written it since. A file left by
// a killed agent names a dead pid, which dev stop skips.
func writeDevPID(runDir string) (remove func(), err error) {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", runDir, err)
	}
	path := filepath.Join(runDir, devPIDFile)
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return func() {
		if readPID(path) == os.Getpid() {
			_ = os.Remove(path)
		}
	}, nil
}

// devStopCmd is `tether dev stop` (`make stop`). It stops what `tether dev`
// left running under --data-dir — the agent, then the emulator and the
// private PostgreSQL (after a kill -9 of the agent they keep running).
func (a *app) devStopCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "stop",
		Short: "Stop the agent, ECS emulator and private PostgreSQL that tether dev left running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDevStop(cmd.Context(), *dataDir)
		},
	}
}

func (a *app) runDevStop(ctx context.Context, dataDir string) error {
	runDir := filepath.Join(dataDir, "run")
	var errs []error
	stopped := 0
	stop := func(what, pidFile string, pid int, sig syscall.Signal, cmdWord string) {
		// A pid file left by a crash may name a pid now reused by an
		// unrelated process. Signal only one that looks like ours.
		if !processAlive(pid) || !cmdlineHas(pid, cmdWord) {
			return
		}
		stopped++
		fmt.Fprintf(a.stderr, "stopping %s (pid %d)\n", what, pid)
		if err := stopProcess(ctx, pid, sig); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", what, err))
			return
		}
		if pidFile != "" {
			_ = os.Remove(pidFile)
		}
	}
	// The agent first. On SIGTERM it drains and stops the other two itself.
	devPID := filepath.Join(runDir, devPIDFile)
	stop("tether dev", devPID, readPID(devPID), syscall.SIGTERM, "dev")
	emuFile := filepath.Join(runDir, emulatorRunFile)
	stop("the ECS emulator", emuFile, readRunFile(emuFile).PID, syscall.SIGTERM, "emulator")
	// postmaster.pid's first line is the server's pid. SIGINT is its fast
	// shutdown.
	stop("the private PostgreSQL", "", readPID(filepath.Join(dataDir, "pgdata", "postmaster.pid")), syscall.SIGINT, "postgres")
	if pid := readPID(devPID); pid != 0 && !processAlive(pid) {
		_ = os.Remove(devPID) // left by a killed agent
	}
	if stopped == 0 {
		fmt.Fprintf(a.stderr, "nothing of tether dev is running under %s\n", dataDir)
	}
	return errors.Join(errs...)
}

// cmdlineHas reports whether one of pid's arguments, or its base name, is
// word, a name without a slash (true when /proc cannot tell).
func cmdlineHas(pid int, word string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	return slices.ContainsFunc(strings.Split(string(b), "\x00"), func(arg string) bool { return filepath.Base(arg) == word })
}

// readPID reads the pid on the first line of a pid file. It returns 0 when
// there is none.
func readPID(path string) int {
	b, _ := os.ReadFile(path) // a missing file is nil, which holds no pid
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}
