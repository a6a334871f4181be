package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// execute runs the job in its own process group and waits until nothing of
// the group is left.
func (p *Plugin) execute(ctx context.Context, r *run, job *plugin.Job, s spec, cfg config, rt plugin.Runtime) (*plugin.Result, error) {
	log := p.log.With("job", job.ID, "attempt", job.Attempt)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, plugin.Errorf(plugin.Retriable, "creating state directory: %v", err)
	}
	wd, err := prepareWorkDir(cfg, job, s)
	if err != nil {
		return nil, err
	}

	// Until the process starts, no record names the directory, so Cleanup
	// could not find it. A failure before then removes it here.
	runID := randomHex()
	env := buildEnv(s, wd.path, job, runID, cfg.RunAs)
	path, args, err := program(s, env["PATH"], wd.path)
	if err != nil {
		wd.remove(log)
		return nil, err
	}
	out, err := openPipes()
	if err != nil {
		wd.remove(log)
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        args,
		Env:         environ(env),
		Dir:         wd.path,
		Stdout:      out.outW,
		Stderr:      out.errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: credential(cfg.RunAs)},
	}
	startErr := cmd.Start()
	// The child has its own copies. Ours must go so readers see EOF.
	out.closeWriters()
	if startErr != nil {
		out.closeReaders()
		wd.remove(log)
		return nil, startError(describeArgv(s), startErr)
	}
	pid := cmd.Process.Pid
	log = log.With("pid", pid)

	tail := &tailBuffer{}
	var copiers sync.WaitGroup
	stdout, stderr := &drainReader{f: out.outR}, &drainReader{f: out.errR}
	copiers.Go(func() { p.pump(log, "stdout", stdout, rt.Stdout(), io.Discard) })
	copiers.Go(func() { p.pump(log, "stderr", stderr, rt.Stderr(), tail) })
	exited := make(chan error, 1)
	go func() { exited <- waitExit(pid) }()

	// Record the group before anything else can go wrong, so a crash of this
	// plugin process leaves Cleanup something to find.
	recErr := p.record(cfg, job, s, pid, runID, wd)
	if recErr != nil {
		log.Error("recording process group; stopping the job", "err", recErr)
		r.kill(recErr)
	}

	end := awaitGroup(ctx, log, r, cmd, exited, s.KillGrace)

	p.drain(&copiers, stdout, stderr)
	out.closeReaders()

	// A directory still in use by surviving processes is left to Cleanup,
	// and so is the record that leads to them.
	if end.groupGone() {
		if recErr == nil {
			removeRecord(log, cfg.StateDir, job)
		}
		wd.remove(log)
	}
	return jobResult(end, recErr, s, tail, wd)
}

// workDir is the directory a job runs in.
type workDir struct {
	path string
	// temporary marks a fresh per-job directory the plugin made, to remove
	// once the job's group is gone.
	temporary bool
	// kept marks a fresh per-job directory the job asked to keep. The result
	// names it.
	kept bool
}

// remove deletes the directory if it is temporary.
func (w workDir) remove(log *slog.Logger) {
	if !w.temporary {
		return
	}
	if err := os.RemoveAll(w.path); err != nil {
		log.Warn("removing working directory", "dir", w.path, "err", err)
	}
}

// prepareWorkDir checks the job's working_dir, or creates a fresh private
// directory under config.work_root when the job sets none.
func prepareWorkDir(cfg config, job *plugin.Job, s spec) (workDir, error) {
	if s.WorkingDir != "" {
		if !isDir(s.WorkingDir) {
			return workDir{}, dec.Errorf("context.working_dir: %s is not an existing directory; create it first or leave working_dir unset for a fresh per-job directory", s.WorkingDir)
		}
		return workDir{path: s.WorkingDir}, nil
	}
	dir, err := os.MkdirTemp(cfg.WorkRoot, "tether-shell-"+safeName(job.ID)+"-"+strconv.Itoa(job.Attempt)+"-")
	if err != nil {
		return workDir{}, plugin.Errorf(plugin.Retriable, "creating working directory under %s: %v", cfg.WorkRoot, err)
	}
	if a := cfg.RunAs; a != nil {
		// The directory is private (0700). It must be the job's user's.
		if err := os.Chown(dir, int(a.UID), int(a.GID)); err != nil {
			_ = os.RemoveAll(dir)
			return workDir{}, plugin.Errorf(plugin.Retriable, "handing working directory %s to user %s: %v", dir, a.Name, err)
		}
	}
	return workDir{path: dir, temporary: !s.KeepWorkingDir, kept: s.KeepWorkingDir}, nil
}

// program returns the path and argv the job's process starts with: /bin/sh
// for a script, or the command's program looked up in the job's PATH.
func program(s spec, pathEnv, dir string) (string, []string, error) {
	if s.Script != "" {
		return "/bin/sh", []string{"/bin/sh", "-c", s.Script}, nil
	}
	path, err := lookPath(s.Command[0], pathEnv, dir)
	if err != nil {
		return "", nil, dec.Errorf("context.command[0]: %v", err)
	}
	return path, s.Command, nil
}

// outputPipes are the job's stdout and stderr. The plugin reads the R ends,
// the job's processes write the W ends.
type outputPipes struct {
	outR, outW, errR, errW *os.File
}

func openPipes() (outputPipes, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return outputPipes{}, plugin.Errorf(plugin.Retriable, "creating stdout pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return outputPipes{}, plugin.Errorf(plugin.Retriable, "creating stderr pipe: %v", err)
	}
	return outputPipes{outR: outR, outW: outW, errR: errR, errW: errW}, nil
}

func (o outputPipes) closeWriters() {
	o.outW.Close()
	o.errW.Close()
}

func (o outputPipes) closeReaders() {
	o.outR.Close()
	o.errR.Close()
}

// startError classes a failure to start the job's process. A lack of
// processes or memory may pass, anything else will not.
func startError(what string, err error) error {
	class := plugin.Permanent
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOMEM) {
		class = plugin.Retriable
	}
	return plugin.Errorf(class, "starting %s: %v", what, err)
}

// ending is how a job's process group ended.
type ending struct {
	pid         int
	cancelCause error // why the job was stopped; nil when its leader exited first
	outcome     stopOutcome
	stopErr     error // the group could not be stopped
	waitErr     error // the leader's exit status could not be had
	state       *os.ProcessState
}

// groupGone reports whether nothing of the group is left.
func (e ending) groupGone() bool { return e.stopErr == nil && e.waitErr == nil }

// awaitGroup waits for the leader to exit or ctx to end, then stops what is
// left of the group and reaps the leader. Whether the leader exited or was
// canceled, nothing of the group may outlive the job. After a normal exit,
// leftovers get the same TERM/grace/KILL treatment, hurried by cancellation.
func awaitGroup(ctx context.Context, log *slog.Logger, r *run, cmd *exec.Cmd, exited <-chan error, grace time.Duration) ending {
	end := ending{pid: cmd.Process.Pid}
	// Leftovers of a normal exit are hurried by cancellation, those of a
	// canceled job by a forced stop.
	hurry := ctx.Done()
	select {
	case end.waitErr = <-exited:
	case <-ctx.Done():
		end.cancelCause = context.Cause(ctx)
		hurry = r.force
		log.Info("job canceled; stopping its process group", "cause", end.cancelCause, "kill_grace", grace)
	}

	end.outcome, end.stopErr = stopGroup(end.pid, grace, hurry, killWait)
	if end.stopErr != nil {
		log.Error("stopping process group", "err", end.stopErr)
	}
	if end.cancelCause != nil {
		end.waitErr = reapLeader(cmd, exited)
	}
	if end.waitErr == nil {
		_ = cmd.Wait() // reaps the leader; its status is in ProcessState
		if end.state = cmd.ProcessState; end.state == nil {
			end.waitErr = fmt.Errorf("no exit status for process %d", end.pid)
		}
	}
	return end
}

// reapLeader waits for the leader of a group that was stopped. The leader is
// normally dead by now (it was in the group). If it moved to another group
// it is not, so it is killed directly. It is not reaped yet, and signalling
// a zombie does nothing, so the kill is safe either way.
func reapLeader(cmd *exec.Cmd, exited <-chan error) error {
	_ = cmd.Process.Kill()
	select {
	case err := <-exited:
		return err
	case <-time.After(killWait):
		go func() { _ = cmd.Wait() }() // reap whenever it dies
		return fmt.Errorf("process %d did not exit %s after SIGKILL", cmd.Process.Pid, killWait)
	}
}

// removeRecord deletes the process record of a run whose group is gone.
func removeRecord(log *slog.Logger, stateDir string, job *plugin.Job) {
	if err := removeFile(recordPath(stateDir, job.ID, job.Attempt)); err != nil {
		log.Warn("removing process record", "err", err)
	}
}

// removeFile removes path. A file already gone is no error.
func removeFile(path string) error {
	if err := os.Remove(path); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// jobResult turns how the run ended into Execute's result.
func jobResult(end ending, recErr error, s spec, tail *tailBuffer, wd workDir) (*plugin.Result, error) {
	what := describeArgv(s)
	switch {
	case recErr != nil:
		return nil, plugin.Errorf(plugin.Retriable, "stopped: %v", recErr)
	case end.cancelCause != nil:
		return nil, end.canceled(s.KillGrace)
	case end.waitErr != nil:
		return nil, plugin.Errorf(plugin.OutcomeUnknown, "waiting for %s: %v", what, end.waitErr)
	case !end.state.Success():
		return nil, exitFailure(what, end.state, tail, s.RetryExitCodes)
	}
	out := map[string]any{"exit_code": 0}
	if wd.kept {
		out["working_dir"] = wd.path
	}
	b, _ := json.Marshal(out)
	return &plugin.Result{Output: b, Message: fmt.Sprintf("%s exited with code 0", what)}, nil
}

// canceled is the retriable error of a canceled run, saying how its group
// was stopped.
func (e ending) canceled(grace time.Duration) error {
	msg := fmt.Sprintf("canceled: %v (process group %d %s)", e.cancelCause, e.pid, e.outcome.describe(grace))
	if err := errors.Join(e.stopErr, e.waitErr); err != nil {
		msg += fmt.Sprintf("; %v", err)
	}
	return plugin.Errorf(plugin.Retriable, "%s", msg)
}

// exitFailure is the error of a job that exited non-zero, with the last
// lines of its stderr. Exit codes the job lists in retry_exit_codes mean
// "try again" (e.g. EX_TEMPFAIL, 75) and make it retriable.
func exitFailure(what string, state *os.ProcessState, tail *tailBuffer, retryCodes []int) error {
	msg := what + " " + exitDescription(state)
	if lines := tail.lines(tailLines); len(lines) > 0 {
		msg += "; last stderr lines:\n" + strings.Join(lines, "\n")
	}
	class := plugin.Permanent
	if slices.Contains(retryCodes, state.ExitCode()) {
		class = plugin.Retriable
	}
	return plugin.Errorf(class, "%s", msg)
}
