// Package shell implements tether's shell plugin. It runs a job as a local
// process (an argv or a /bin/sh script) in its own process group, streams its
// output to the host, and makes sure no process of the job outlives it.
//
// The plugin does not implement Resume. A local process dies with its agent.
// It implements Cleanup, which kills whatever is left of a job's process group,
// even from a plugin process other than the one that started it. It runs only
// on Linux (it relies on waitid(WNOWAIT) and /proc).
package shell

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Name and Version are reported by Info.
const (
	Name    = "shell"
	Version = "0.1.0"
)

const (
	// killWait bounds how long processes may survive SIGKILL (uninterruptible
	// sleep) before the plugin gives up and reports them.
	killWait = 30 * time.Second
	// cleanupKillWait is the same bound inside Cleanup, which has a caller's
	// deadline to respect.
	cleanupKillWait = 5 * time.Second
	// outputDrainWait bounds how long, once the job's process group is
	// gone, a read of its output waits for data: a process that left the
	// group may still hold the pipes open. What is in the pipes is read
	// however long the host takes to accept it (it may hold a write back:
	// its output budget).
	outputDrainWait = 2 * time.Second
	// outputDrainMax bounds the whole drain, for a process that left the
	// group and keeps writing.
	outputDrainMax = 60 * time.Second
)

var (
	errCleanup  = errors.New("stopped by Cleanup")
	errShutdown = errors.New("the shell plugin is shutting down")
)

// Compile-time checks of the interfaces the plugin serves.
var (
	_ plugin.Plugin        = (*Plugin)(nil)
	_ plugin.Cleaner       = (*Plugin)(nil)
	_ plugin.HealthChecker = (*Plugin)(nil)
	_ plugin.Validator     = (*Plugin)(nil)
	_ plugin.KillGracer    = (*Plugin)(nil)
)

// Plugin is the shell plugin. Create it with New. It is safe for concurrent
// jobs.
type Plugin struct {
	log     *slog.Logger
	tempDir string

	mu      sync.Mutex
	runs    map[runKey]*run
	closing bool
}

type runKey struct {
	id      string
	attempt int
}

// run is a job's process group while Execute is running it.
// forcedStopWait is how long Cleanup waits for a group it had to SIGKILL.
const forcedStopWait = 2 * time.Second

type run struct {
	cancel    context.CancelCauseFunc // cancels Execute's context: graceful stop
	force     chan struct{}           // closed to skip the kill grace
	forceOnce sync.Once
	done      chan struct{} // closed when Execute has returned
}

// kill stops the run without waiting for its kill grace.
func (r *run) kill(cause error) {
	r.cancel(cause)
	r.forceOnce.Do(func() { close(r.force) })
}

// New returns a shell plugin logging to slog.Default().
func New() *Plugin {
	return NewWithLogger(slog.Default())
}

// NewWithLogger returns a shell plugin logging to log.
func NewWithLogger(log *slog.Logger) *Plugin {
	return &Plugin{
		log:     log.With("plugin", Name),
		tempDir: os.TempDir(),
		runs:    make(map[runKey]*run),
	}
}

// Info reports the plugin's name and version. Serve adds the capabilities.
func (p *Plugin) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: Name, Version: Version}, nil
}

// credential is the process credential of a job run as a. It is nil (the
// plugin's own) when a is nil.
func credential(a *account) *syscall.Credential {
	if a == nil {
		return nil
	}
	return &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: a.Groups}
}

// Validate checks the plugin config and the commands' default contexts with
// the parsing Execute uses. A default context may leave out both command and
// script. Its jobs may bring their own.
func (p *Plugin) Validate(_ context.Context, rawConfig json.RawMessage, contexts map[string]json.RawMessage) ([]plugin.Problem, error) {
	cfg, err := parseConfig(rawConfig, p.tempDir)
	if err != nil {
		// Contexts are checked against the config's limits. Without a
		// config, there is nothing to check them against.
		return []plugin.Problem{dec.Problem("", err)}, nil
	}
	var problems []plugin.Problem
	for _, name := range slices.Sorted(maps.Keys(contexts)) {
		if _, err := decodeSpec(contexts[name], cfg, false); err != nil {
			problems = append(problems, dec.Problem(name, err))
		}
	}
	return problems, nil
}

// MaxKillGrace reports the longest kill_grace a job may ask for under the
// config: config.max_kill_grace, else DefaultMaxKillGrace. The agent counts
// it in its self-fence point and its drain.
func (p *Plugin) MaxKillGrace(rawConfig json.RawMessage) (time.Duration, error) {
	cfg, err := parseConfig(rawConfig, p.tempDir)
	if err != nil {
		return 0, err
	}
	return cfg.MaxKillGrace, nil
}

// HealthCheck reports whether /bin/sh is executable and the configured
// directories are usable.
func (p *Plugin) HealthCheck(_ context.Context, rawConfig json.RawMessage) error {
	if !procSupported {
		return plugin.Errorf(plugin.Permanent, "the shell plugin runs only on Linux")
	}
	cfg, err := parseConfig(rawConfig, p.tempDir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat("/bin/sh"); err != nil || !fi.Mode().IsRegular() || unix.Access("/bin/sh", unix.X_OK) != nil {
		return plugin.Errorf(plugin.Permanent, "/bin/sh is missing or not executable; scripts cannot run")
	}
	if !isDir(cfg.WorkRoot) {
		return plugin.Errorf(plugin.Permanent, "config.work_root: %s is not an existing directory", cfg.WorkRoot)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return plugin.Errorf(plugin.Permanent, "config.state_dir: %v", err)
	}
	return nil
}

// Execute runs the job's command or script and returns when its whole process
// group is gone. On cancellation the group gets SIGTERM, then SIGKILL after
// kill_grace, and Execute returns a retriable "canceled: ..." error.
func (p *Plugin) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	if job == nil {
		return nil, dec.Errorf("job: missing")
	}
	if rt == nil {
		return nil, dec.Errorf("runtime: missing")
	}
	if job.ID == "" || strings.ContainsRune(job.ID, 0) {
		return nil, dec.Errorf("job.id: %q is not a usable job ID", job.ID)
	}
	if !procSupported {
		return nil, plugin.Errorf(plugin.Permanent, "the shell plugin runs only on Linux")
	}
	cfg, err := parseConfig(job.Config, p.tempDir)
	if err != nil {
		return nil, err
	}
	s, err := parseSpec(job.Context, cfg)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, plugin.Errorf(plugin.Retriable, "canceled before start: %v", context.Cause(ctx))
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &run{cancel: cancel, force: make(chan struct{}), done: make(chan struct{})}
	key := runKey{job.ID, job.Attempt}
	if err := p.register(key, r); err != nil {
		return nil, err
	}
	defer p.unregister(key, r)

	return p.execute(runCtx, r, job, s, cfg, rt)
}

// register enters a run in the plugin's table, refusing it while the plugin
// shuts down or while the same attempt already runs here.
func (p *Plugin) register(key runKey, r *run) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closing:
		return plugin.Errorf(plugin.Retriable, "not started: %v", errShutdown)
	case p.runs[key] != nil:
		return plugin.Errorf(plugin.Permanent, "job %s attempt %d is already running in this plugin", key.id, key.attempt)
	}
	p.runs[key] = r
	return nil
}

// unregister removes a run from the plugin's table once its Execute returns.
func (p *Plugin) unregister(key runKey, r *run) {
	p.mu.Lock()
	delete(p.runs, key)
	p.mu.Unlock()
	close(r.done)
}

// running reports whether an Execute of rec's attempt runs in this plugin.
func (p *Plugin) running(rec record) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[runKey{rec.JobID, rec.Attempt}] != nil
}

// record writes the run's process record to the state directory.
func (p *Plugin) record(cfg config, job *plugin.Job, s spec, pid int, runID string, wd workDir) error {
	info, err := readProc(pid)
	if err != nil {
		return fmt.Errorf("reading /proc for process %d: %w", pid, err)
	}
	rec := record{
		JobID:     job.ID,
		Attempt:   job.Attempt,
		PID:       pid,
		PGID:      pid,
		StartTime: info.StartTime,
		BootID:    bootID(),
		RunID:     runID,
		KillGrace: s.KillGrace.String(),
	}
	if wd.temporary {
		rec.WorkDir = wd.path
	}
	return writeRecord(cfg.StateDir, rec)
}

// pump copies one output stream to tail and to the host as it arrives.
// After a write to the host fails it keeps reading and discards, so the job
// never blocks on a full pipe.
func (p *Plugin) pump(log *slog.Logger, stream string, r io.Reader, w, tail io.Writer) {
	host := &forwarder{w: cmp.Or(w, io.Discard), log: log, stream: stream}
	// Only reads fail: neither writer returns an error. A read cut off by
	// drain's deadline is expected.
	if _, err := io.Copy(io.MultiWriter(tail, host), r); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		log.Warn("reading job output", "stream", stream, "err", err)
	}
}

// forwarder writes one output stream to the host until a write fails, and
// discards the rest.
type forwarder struct {
	w      io.Writer
	log    *slog.Logger
	stream string
	err    error // the failed write's
}

func (f *forwarder) Write(b []byte) (int, error) {
	if f.err == nil {
		if _, f.err = f.w.Write(b); f.err != nil {
			f.log.Warn("forwarding output to the host failed; discarding the rest", "stream", f.stream, "err", f.err)
		}
	}
	return len(b), nil
}

// drain waits for the output copiers. A process that escaped the group may
// hold the pipes open forever, so a read that waits outputDrainWait for
// data ends the copy, and outputDrainMax ends it whatever.
func (p *Plugin) drain(copiers *sync.WaitGroup, readers ...*drainReader) {
	for _, r := range readers {
		r.startDrain()
	}
	done := make(chan struct{})
	go func() {
		copiers.Wait()
		close(done)
	}()
	t := time.NewTimer(outputDrainMax)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	for _, r := range readers {
		r.cut()
	}
	<-done
}

// drainReader reads one of the job's output pipes. Once draining, each read
// waits at most outputDrainWait for data, counted from the read, not from
// the group's end: time spent handing output to the host never cuts what
// is still in the pipe.
type drainReader struct {
	f        *os.File
	draining atomic.Bool
	stopped  atomic.Bool
}

func (r *drainReader) Read(p []byte) (int, error) {
	if r.stopped.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	if r.draining.Load() {
		_ = r.f.SetReadDeadline(time.Now().Add(outputDrainWait))
	}
	return r.f.Read(p)
}

// startDrain bounds the read in progress, if any, and every later one.
func (r *drainReader) startDrain() {
	r.draining.Store(true)
	_ = r.f.SetReadDeadline(time.Now().Add(outputDrainWait))
}

// cut ends the reads now (outputDrainMax passed).
func (r *drainReader) cut() {
	r.stopped.Store(true)
	_ = r.f.SetReadDeadline(time.Now())
}

// Cleanup kills whatever is left of the job's process groups: runs of this
// plugin process and, through the state directory, runs of earlier plugin
// processes. It covers attempts up to job.Attempt (all attempts when
// job.Attempt <= 0), so a later retry running elsewhere is never touched.
// Cleanup of an unknown job succeeds, and Cleanup is idempotent.
func (p *Plugin) Cleanup(ctx context.Context, job *plugin.Job) error {
	if job == nil {
		return dec.Errorf("job: missing")
	}
	if job.ID == "" {
		return nil // nothing can have run under an empty ID
	}
	if err := p.stopLive(ctx, job.ID, job.Attempt); err != nil {
		return err
	}
	if !procSupported {
		return nil
	}
	cfg, err := parseConfig(job.Config, p.tempDir)
	if err != nil {
		return err
	}
	return p.cleanupRecords(ctx, cfg.StateDir, job.ID, job.Attempt)
}

// covered reports whether Cleanup of attempts up to last covers attempt. A
// last of 0 or less covers every attempt.
func covered(attempt, last int) bool { return last <= 0 || attempt <= last }

// stopLive stops the job's runs in this plugin process whose attempts are
// covered. They are stopped the graceful way (SIGTERM, then SIGKILL after
// kill_grace). Cleanup often follows a cancel whose stop is already under
// way, and must not cut its grace short. Only when Cleanup's own deadline
// comes is a group killed at once.
func (p *Plugin) stopLive(ctx context.Context, jobID string, last int) error {
	p.mu.Lock()
	var live []*run
	for k, r := range p.runs {
		if k.id == jobID && covered(k.attempt, last) {
			r.cancel(errCleanup) // does not block
			live = append(live, r)
		}
	}
	p.mu.Unlock()
	for _, r := range live {
		if err := r.awaitOrKill(ctx, errCleanup, forcedStopWait); err != nil {
			return plugin.Errorf(plugin.Retriable, "cleanup of job %s: its process group is still stopping: %v", jobID, err)
		}
	}
	return nil
}

// awaitOrKill waits for the run's Execute to return. When ctx ends first it
// kills the run with cause and waits up to wait more, and returns ctx's cause
// if the run is still not done.
func (r *run) awaitOrKill(ctx context.Context, cause error, wait time.Duration) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
	}
	r.kill(cause)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.done:
		return nil
	case <-t.C:
		return context.Cause(ctx)
	}
}

// cleanupRecords acts on the process records earlier plugin processes left
// for the job's covered attempts.
func (p *Plugin) cleanupRecords(ctx context.Context, stateDir, jobID string, last int) error {
	paths, err := jobRecords(stateDir, jobID)
	if err != nil {
		return plugin.WithClass(plugin.Retriable, err)
	}
	var errs []error
	for _, path := range paths {
		errs = append(errs, p.cleanupPath(ctx, path, jobID, last))
	}
	// Join drops the nil errors of the records that went well.
	if err := errors.Join(errs...); err != nil {
		return plugin.Errorf(plugin.Retriable, "cleanup of job %s: %v", jobID, err)
	}
	return nil
}

// cleanupPath stops the group the record at path describes and removes the
// record, unless the record is of another attempt or a run here owns it.
func (p *Plugin) cleanupPath(ctx context.Context, path, jobID string, last int) error {
	rec, err := readRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed by its Execute meanwhile
	}
	if err != nil {
		// Unreadable records cannot be acted on. Keeping them helps nobody.
		p.log.Warn("removing unreadable process record", "path", path, "err", err)
		_ = os.Remove(path)
		return nil
	}
	if rec.JobID != jobID || !covered(rec.Attempt, last) {
		return nil
	}
	if p.running(rec) {
		return nil // a newer Execute of this attempt owns it
	}
	if err := p.cleanupRecord(ctx, rec); err != nil {
		return err
	}
	if err := removeFile(path); err != nil {
		return fmt.Errorf("removing process record: %w", err)
	}
	return nil
}

// cleanupRecord stops the process group a record describes, if it is still
// the run's group, and removes the run's working directory.
func (p *Plugin) cleanupRecord(ctx context.Context, rec record) error {
	if rec.BootID == "" || rec.BootID == bootID() {
		if err := p.stopRecordedGroup(ctx, rec); err != nil {
			return err
		}
	}
	// Only ever remove a directory this plugin created.
	if filepath.IsAbs(rec.WorkDir) && strings.HasPrefix(filepath.Base(rec.WorkDir), "tether-shell-") {
		if err := os.RemoveAll(rec.WorkDir); err != nil {
			return fmt.Errorf("removing working directory: %w", err)
		}
	}
	return nil
}

// stopRecordedGroup stops the group in rec if it still belongs to the run,
// with the run's own kill grace.
func (p *Plugin) stopRecordedGroup(ctx context.Context, rec record) error {
	ours, err := ownsGroup(rec)
	if err != nil {
		return fmt.Errorf("checking process group %d: %w", rec.PGID, err)
	}
	if !ours {
		return nil
	}
	grace, err := time.ParseDuration(rec.KillGrace)
	if err != nil || grace < 0 {
		grace = DefaultKillGrace
	}
	outcome, err := stopGroup(rec.PGID, grace, ctx.Done(), cleanupKillWait)
	if err != nil {
		return err
	}
	p.log.Info("cleanup stopped a leftover process group", "job", rec.JobID, "attempt", rec.Attempt, "pgid", rec.PGID, "how", outcome.describe(grace))
	return nil
}

// ownsGroup reports whether the process group in rec still belongs to the
// run, so that a recycled group ID is never killed. The group is the run's if
// its leader is the recorded process (same PID and start time: while the
// leader's PID is allocated, no other group can take that ID), or, once the
// leader is gone, if a member still carries the run's TETHER_SHELL_RUN_ID.
func ownsGroup(rec record) (bool, error) {
	if rec.PGID <= 1 || rec.PID <= 1 {
		return false, nil
	}
	leader, err := readProc(rec.PID)
	if err == nil {
		return leader.StartTime == rec.StartTime, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	members, err := groupMembers(rec.PGID)
	if err != nil {
		return false, err
	}
	marker := runIDEnv + "=" + rec.RunID
	carries := func(pid int) bool { return hasEnv(pid, marker) }
	return rec.RunID != "" && slices.ContainsFunc(members, carries), nil
}

// Shutdown stops every running job, for when the plugin process itself must
// exit (e.g. its host is gone). Jobs get SIGTERM and their kill grace. When
// ctx ends first, SIGKILL. New Executes are refused from now on. It returns
// once every job's Execute has returned.
func (p *Plugin) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	runs := slices.Collect(maps.Values(p.runs))
	p.mu.Unlock()

	for _, r := range runs {
		r.cancel(errShutdown)
	}
	// When ctx ends, every run still going is killed at once.
	stop := context.AfterFunc(ctx, func() {
		for _, r := range runs {
			r.kill(errShutdown)
		}
	})
	defer stop()
	for _, r := range runs {
		if r.awaitOrKill(ctx, errShutdown, killWait+outputDrainWait) != nil {
			return fmt.Errorf("shutting down the shell plugin: a job's processes survive SIGKILL")
		}
	}
	return nil
}

// buildEnv returns the job's environment: a minimal base, the job's env on
// top, and the run marker. Nothing of the plugin's own environment is passed.
func buildEnv(s spec, dir string, job *plugin.Job, runID string, runAs *account) map[string]string {
	m := map[string]string{
		"PATH":               basePath,
		"HOME":               dir,
		"LANG":               "C.UTF-8",
		"TETHER_JOB_ID":      job.ID,
		"TETHER_JOB_ATTEMPT": strconv.Itoa(job.Attempt),
	}
	if runAs != nil {
		m["HOME"], m["USER"], m["LOGNAME"] = runAs.Home, runAs.Name, runAs.Name
	}
	maps.Copy(m, s.Env)
	m[runIDEnv] = runID
	return m
}

// environ renders env as NAME=value pairs, sorted by name.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// lookPath finds the program like a shell would, but with the job's PATH, not
// the plugin's. Relative paths are relative to the working directory.
func lookPath(name, pathEnv, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := inDir(dir, name)
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%q: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		// An empty entry is the working directory, as in a shell.
		p := filepath.Join(inDir(dir, d), name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q; use an absolute path or set env.PATH", name, pathEnv)
}

// inDir is p, relative to dir unless it is absolute.
func inDir(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// isDir reports whether path is an existing directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// exitDescription renders how the leader ended, as in "exited with code 3" or
// "was killed by signal SIGKILL".
func exitDescription(state *os.ProcessState) string {
	// The zero WaitStatus (a platform without one) is no signal.
	if ws, _ := state.Sys().(syscall.WaitStatus); ws.Signaled() {
		return "was killed by signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exited with code %d", state.ExitCode())
}
