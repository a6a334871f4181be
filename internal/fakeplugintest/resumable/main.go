// Command resumable is a test plugin whose "remote work" outlives the agent
// and the plugin process. Execute starts a detached process (its own session,
// re-executing this binary in work mode) that sleeps for the job's
// duration_ms and then writes an outcome record. Resume reattaches to that
// work by names derived from the job ID and the checkpointed handle. It never
// starts work that already exists. Cleanup kills the work and removes its
// files.
//
// Job context (top-level keys of the job win over the command's):
//
//	{"duration_ms": 3000, "fail": "message", "fail_class": "retriable",
//	 "fail_attempts": [1, 2], "work_dir": "/abs/dir", "tick_ms": 200}
//
// With "tick_ms" whoever watches the work prints a unique line that often
// and checkpoints, so the output is stored as it is written.
//
// With "fail" the work ends with a failure record, which the plugin reports
// with "fail_class" (retriable or permanent, the default). "fail_attempts"
// limits the failure to those attempts (plugin.Job.Attempt), empty = all.
// work_dir may also come from the plugin config
// (plugins.resumable.config.work_dir).
// Files under work_dir, per job:
//
//	<job_id>.starts   one line per start of work (O_APPEND, by the work
//	                  itself), never removed
//	<job_id>.pid      the work process id, written by the work first thing
//	<job_id>.lock     flock-held by whoever is starting the work and then by
//	                  the work for its whole life (an inherited descriptor):
//	                  Resume tells "being started or running" from "nobody"
//	<job_id>.record   the outcome, written by the work when it ends
//	<job_id>.journal  one JSON line (O_APPEND) per event of the work, never
//	                  removed: "start" (the work, before Execute may return),
//	                  "end" (the work, before its record), "killed" (Cleanup,
//	                  after the kill), "checkpoint" (Execute, once the
//	                  host answered) and "unwatched" (whoever watched the
//	                  work stopped watching because its context ended, the
//	                  cause in message); see journalLine
//
// Tests assert "started once" by counting the lines of the starts file, and
// check from the journal that attempts never ran side by side.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Work mode. The re-executed binary reads these instead of serving a plugin.
const (
	envWorkRecord   = "TETHER_RESUMABLE_WORK_RECORD"
	envWorkDuration = "TETHER_RESUMABLE_WORK_DURATION_MS"
	envWorkFail     = "TETHER_RESUMABLE_WORK_FAIL"
	envWorkClass    = "TETHER_RESUMABLE_WORK_FAIL_CLASS"
	envWorkAttempt  = "TETHER_RESUMABLE_WORK_ATTEMPT"
	envWorkJournal  = "TETHER_RESUMABLE_WORK_JOURNAL"
	envWorkAgentPID = "TETHER_RESUMABLE_WORK_AGENT_PID"
	envWorkPID      = "TETHER_RESUMABLE_WORK_PID_FILE"
	envWorkStarts   = "TETHER_RESUMABLE_WORK_STARTS"
)

// readyTimeout bounds how long a start waits for the work to journal itself.
const readyTimeout = 10 * time.Second

// Journal events.
const (
	JournalStart      = "start"
	JournalEnd        = "end"
	JournalKilled     = "killed"
	JournalCheckpoint = "checkpoint"
	JournalUnwatched  = "unwatched"
)

// journalLine is one line of <job_id>.journal. Times are wall-clock unix
// nanoseconds of this host (PostgreSQL's now() in tests reads the same clock).
type journalLine struct {
	Event   string `json:"event"`
	Attempt int    `json:"attempt"` // plugin.Job.Attempt of the start (killed: of the Cleanup call)
	PID     int    `json:"pid"`     // the work process
	TimeNS  int64  `json:"time_ns"`
	// end is ok, retriable or permanent. checkpoint is accepted or refused.
	Outcome string `json:"outcome,omitempty"`
	Message string `json:"message,omitempty"`
	// The plugin process that wrote the line (for start, the one that
	// launched the work) and its parent, the agent.
	PluginPID int `json:"plugin_pid,omitempty"`
	AgentPID  int `json:"agent_pid,omitempty"`
	// For checkpoint, when the call was made (TimeNS is when it returned).
	CalledNS int64 `json:"called_ns,omitempty"`
}

const pollInterval = 50 * time.Millisecond

// handle is what Execute checkpoints once the work exists.
type handle struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

// record is the outcome the work writes when it ends.
type record struct {
	Name    string `json:"name"`
	Attempt int    `json:"attempt,omitempty"` // of the start that wrote it
	OK      bool   `json:"ok"`
	Class   string `json:"class,omitempty"` // of a failure: retriable or permanent
	Message string `json:"message,omitempty"`
}

type spec struct {
	DurationMS   int    `json:"duration_ms"`
	Fail         string `json:"fail"`
	FailClass    string `json:"fail_class"`
	FailAttempts []int  `json:"fail_attempts"`
	WorkDir      string `json:"work_dir"`
	TickMS       int    `json:"tick_ms"`
}

// failFor is the failure message the work of attempt ends with ("" = none).
func (s spec) failFor(attempt int) string {
	if s.Fail == "" || len(s.FailAttempts) == 0 {
		return s.Fail
	}
	for _, a := range s.FailAttempts {
		if a == attempt {
			return s.Fail
		}
	}
	return ""
}

// work is one job's work, located by names derived from the job ID.
type work struct {
	name    string
	dir     string
	spec    spec
	jobID   string
	attempt int
	starts  string
	pid     string
	record  string
	journal string
	lock    string
}

func newWork(job *plugin.Job) (*work, error) {
	var s spec
	if len(job.Context) > 0 {
		if err := json.Unmarshal(job.Context, &s); err != nil {
			return nil, plugin.Errorf(plugin.Permanent, "resumable: bad context: %v", err)
		}
	}
	if s.WorkDir == "" && len(job.Config) > 0 {
		var cfg struct {
			WorkDir string `json:"work_dir"`
		}
		if err := json.Unmarshal(job.Config, &cfg); err != nil {
			return nil, plugin.Errorf(plugin.Permanent, "resumable: bad config: %v", err)
		}
		s.WorkDir = cfg.WorkDir
	}
	if !filepath.IsAbs(s.WorkDir) {
		return nil, plugin.Errorf(plugin.Permanent, "resumable: work_dir must be an absolute path (context or config), got %q", s.WorkDir)
	}
	switch plugin.ErrorClass(s.FailClass) {
	case "", plugin.Retriable, plugin.Permanent:
	default:
		return nil, plugin.Errorf(plugin.Permanent, "resumable: fail_class must be retriable or permanent, got %q", s.FailClass)
	}
	if s.DurationMS < 0 {
		return nil, plugin.Errorf(plugin.Permanent, "resumable: duration_ms must be >= 0, got %d", s.DurationMS)
	}
	// Job IDs are UUIDs. Refuse anything that could escape work_dir.
	if job.ID == "" || strings.ContainsAny(job.ID, `/\`) || strings.HasPrefix(job.ID, ".") {
		return nil, plugin.Errorf(plugin.Permanent, "resumable: unusable job id %q", job.ID)
	}
	base := filepath.Join(s.WorkDir, job.ID)
	return &work{
		name:    "resumable-" + job.ID,
		dir:     s.WorkDir,
		spec:    s,
		jobID:   job.ID,
		attempt: job.Attempt,
		starts:  base + ".starts",
		pid:     base + ".pid",
		record:  base + ".record",
		journal: base + ".journal",
		lock:    base + ".lock",
	}, nil
}

type resumable struct{}

// Describe reports the local process the work runs as, so the resources
// path (SDK → remote event → API → console) runs in every test with this
// plugin, the randomized invariant test included.
func (resumable) Describe(job *plugin.Job, b []byte) []plugin.Resource {
	var h handle
	if json.Unmarshal(b, &h) != nil || h.PID == 0 {
		return nil
	}
	return []plugin.Resource{{
		Kind:    "local_process",
		Name:    h.Name,
		Label:   fmt.Sprintf("work process %d", h.PID),
		Command: "ps -o pid,etime,args -p " + strconv.Itoa(h.PID),
	}}
}

func (resumable) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "resumable", Version: "test"}, nil
}

func (resumable) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	w, err := newWork(job)
	if err != nil {
		return nil, err
	}
	// Execute always starts. A second Execute for the same job shows up as a
	// second line in the starts file, which is what tests look for. It takes
	// the lock when it is free, so that a Resume can see the start. When an
	// earlier start's work still holds it, it starts anyway (unlocked).
	lock, err := w.tryLock()
	if err != nil {
		return nil, err
	}
	if err := w.start(ctx, rt, lock); err != nil {
		return nil, err
	}
	return w.wait(ctx, rt)
}

func (resumable) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	w, err := newWork(job)
	if err != nil {
		return nil, err
	}
	var h *handle
	if raw := rt.Handle(); len(raw) > 0 {
		h = new(handle)
		if err := json.Unmarshal(raw, h); err != nil {
			return nil, plugin.Errorf(plugin.OutcomeUnknown, "resumable: stored handle %q is not valid: %v", raw, err)
		}
	}
	fmt.Fprintf(rt.Stdout(), "resuming %s (handle %s)\n", w.name, rt.Handle())

	if _, err := os.Stat(w.record); err == nil {
		return w.wait(ctx, rt) // finished while nobody watched
	}
	pid, err := w.readPID()
	if err != nil {
		return nil, err
	}
	if pid == 0 && h != nil {
		pid = h.PID
	}
	switch {
	case pid != 0:
		return w.wait(ctx, rt)
	case h != nil:
		return nil, plugin.Errorf(plugin.OutcomeUnknown, "resumable: work %s (pid %d) was started but no trace of it is left", h.Name, h.PID)
	}
	// No pid file. Either nobody started the work, or a start (perhaps of a
	// plugin process that is dying with its agent) is under way. The lock
	// tells them apart. A start holds it, and then the work does.
	lock, err := w.tryLock()
	if err != nil {
		return nil, err
	}
	if lock == nil {
		if err := w.awaitPID(ctx); err != nil {
			return nil, err
		}
		return w.wait(ctx, rt)
	}
	// Under the lock nobody else can be starting it. Look again.
	if pid, err := w.readPID(); err != nil || pid != 0 {
		lock.Close()
		if err != nil {
			return nil, err
		}
		return w.wait(ctx, rt)
	}
	n, err := w.startCount()
	if err != nil {
		lock.Close()
		return nil, err
	}
	if n > 0 {
		// It ran (it counts itself) but its pid file is gone: Cleanup ran.
		lock.Close()
		return nil, plugin.Errorf(plugin.OutcomeUnknown, "resumable: work %s was started (%d start(s)) but its pid file is gone", w.name, n)
	}
	// Never submitted, so start it now.
	if err := w.start(ctx, rt, lock); err != nil {
		return nil, err
	}
	return w.wait(ctx, rt)
}

// tryLock takes the work's start lock without waiting. It returns nil when
// someone (a start, or the running work) holds it.
func (w *work) tryLock() (*os.File, error) {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return nil, plugin.Errorf(plugin.Retriable, "resumable: creating work_dir: %v", err)
	}
	f, err := os.OpenFile(w.lock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, plugin.Errorf(plugin.Retriable, "resumable: opening lock of %s: %v", w.name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, plugin.Errorf(plugin.Retriable, "resumable: locking %s: %v", w.name, err)
	}
	return f, nil
}

// awaitPID waits, while someone holds the lock, for the work to record its
// pid (a start under way). A start whose work never appears is unknown.
func (w *work) awaitPID(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		pid, err := w.readPID()
		if err != nil || pid != 0 {
			return err
		}
		if _, err := os.Stat(w.record); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return plugin.Errorf(plugin.OutcomeUnknown, "resumable: work %s is being started elsewhere but recorded no pid within %s", w.name, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return plugin.WithClass(plugin.Retriable, fmt.Errorf("waiting for work %s to start: %w", w.name, ctx.Err()))
		case <-t.C:
		}
	}
}

func (resumable) Cleanup(_ context.Context, job *plugin.Job) error {
	w, err := newWork(job)
	if err != nil {
		return err
	}
	pid, err := w.readPID()
	if err != nil {
		return plugin.WithClass(plugin.Retriable, err)
	}
	if pid > 0 && alive(pid) {
		// The work leads its own session. Kill the whole group.
		err := syscall.Kill(-pid, syscall.SIGKILL)
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			return plugin.Errorf(plugin.Retriable, "resumable: killing work %s (pid %d): %v", w.name, pid, err)
		}
		if err == nil {
			if err := w.journalAppend(journalLine{Event: JournalKilled, Attempt: w.attempt, PID: pid, TimeNS: time.Now().UnixNano(),
				PluginPID: os.Getpid(), AgentPID: os.Getppid()}); err != nil {
				return plugin.Errorf(plugin.Retriable, "resumable: journaling the kill of %s: %v", w.name, err)
			}
		}
	}
	for _, p := range []string{w.pid, w.record} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return plugin.Errorf(plugin.Retriable, "resumable: removing %s: %v", p, err)
		}
	}
	return nil
}

// start launches the detached work, records it and checkpoints its handle.
// lock, when not nil, is the held start lock. The work inherits it and holds
// it for its life. start closes this process's descriptor.
func (w *work) start(ctx context.Context, rt plugin.Runtime, lock *os.File) error {
	if lock != nil {
		defer lock.Close()
	}
	// Left over from an earlier start, if any. This start's outcome is what
	// counts.
	if err := os.Remove(w.record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return plugin.Errorf(plugin.Retriable, "resumable: removing old record: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return plugin.Errorf(plugin.OutcomeUnknown, "resumable: finding own binary: %v", err)
	}
	// The work journals its own start, then says so on this pipe (its fd 3).
	// The start is on record before Execute can return.
	ready, readyW, err := os.Pipe()
	if err != nil {
		return plugin.Errorf(plugin.Retriable, "resumable: creating a pipe: %v", err)
	}
	defer ready.Close()
	// Not CommandContext. The work must survive the call, the plugin and the
	// agent.
	cmd := exec.Command(exe, w.name)
	class := w.spec.FailClass
	if class == "" {
		class = string(plugin.Permanent)
	}
	cmd.Env = []string{
		envWorkRecord + "=" + w.record,
		envWorkDuration + "=" + strconv.Itoa(w.spec.DurationMS),
		envWorkFail + "=" + w.spec.failFor(w.attempt),
		envWorkClass + "=" + class,
		envWorkAttempt + "=" + strconv.Itoa(w.attempt),
		envWorkJournal + "=" + w.journal,
		envWorkAgentPID + "=" + strconv.Itoa(os.Getppid()),
		envWorkPID + "=" + w.pid,
		envWorkStarts + "=" + w.starts,
	}
	cmd.ExtraFiles = []*os.File{readyW}
	if lock != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, lock) // fd 4: the work holds the lock while it lives
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return plugin.Errorf(plugin.OutcomeUnknown, "resumable: starting work %s: %v", w.name, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it ends while this plugin lives. Otherwise init does.
	go func() { _ = cmd.Wait() }()
	// A line, or EOF if the work died first. Either way its start is over.
	_ = ready.SetReadDeadline(time.Now().Add(readyTimeout))
	_, _ = ready.Read(make([]byte, 16))
	if got, err := w.readPID(); err != nil || got != pid {
		if err != nil {
			return err
		}
		return plugin.Errorf(plugin.OutcomeUnknown, "resumable: work %s (pid %d) did not record itself (pid file says %d)", w.name, pid, got)
	}
	h, err := json.Marshal(handle{Name: w.name, PID: pid})
	if err != nil {
		return plugin.Errorf(plugin.OutcomeUnknown, "resumable: encoding handle: %v", err)
	}
	called := time.Now().UnixNano()
	err = rt.Checkpoint(ctx, h)
	cp := journalLine{Event: JournalCheckpoint, Attempt: w.attempt, PID: pid, TimeNS: time.Now().UnixNano(), CalledNS: called,
		Outcome: "accepted", PluginPID: os.Getpid(), AgentPID: os.Getppid()}
	if err != nil {
		cp.Outcome, cp.Message = "refused", err.Error()
	}
	if jerr := w.journalAppend(cp); jerr != nil {
		return plugin.Errorf(plugin.OutcomeUnknown, "resumable: journaling the checkpoint of %s: %v", w.name, jerr)
	}
	if err != nil {
		// The work runs on. A later Resume finds it by name.
		return plugin.WithClass(plugin.Retriable, fmt.Errorf("checkpointing work %s: %w", w.name, err))
	}
	fmt.Fprintf(rt.Stdout(), "started %s pid %d\n", w.name, pid)
	return nil
}

// wait polls for the record. On ctx cancellation it returns and leaves the
// work running. It is remote work, detached from whoever watches it.
func (w *work) wait(ctx context.Context, rt plugin.Runtime) (*plugin.Result, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var tick <-chan time.Time // tick_ms: a line of output, stored at once
	if w.spec.TickMS > 0 {
		tt := time.NewTicker(time.Duration(w.spec.TickMS) * time.Millisecond)
		defer tt.Stop()
		tick = tt.C
	}
	for {
		rec, ok, err := w.readRecord()
		if err != nil {
			return nil, err
		}
		if ok && rec.Attempt != 0 && rec.Attempt != w.attempt {
			ok = false // another attempt's outcome is not this one's
		}
		if ok {
			return w.result(rt, rec)
		}
		pid, err := w.readPID()
		if err != nil {
			return nil, err
		}
		if pid == 0 || !alive(pid) {
			// It may have written the record just before exiting.
			if rec, ok, err := w.readRecord(); err != nil || (ok && (rec.Attempt == 0 || rec.Attempt == w.attempt)) {
				if err != nil {
					return nil, err
				}
				return w.result(rt, rec)
			}
			return nil, plugin.Errorf(plugin.OutcomeUnknown, "resumable: work %s (pid %d) ended without an outcome", w.name, pid)
		}
		select {
		case <-ctx.Done():
			return nil, w.unwatched(ctx, pid)
		case <-t.C:
		case now := <-tick:
			// Unique text, so a test can tell a line printed twice. The
			// checkpoint stores it now (a resumable job's output is held
			// until the next checkpoint).
			fmt.Fprintf(rt.Stdout(), "tick %d by plugin %d\n", now.UnixNano(), os.Getpid())
			h, err := json.Marshal(handle{Name: w.name, PID: pid})
			if err != nil {
				return nil, plugin.Errorf(plugin.OutcomeUnknown, "resumable: encoding handle: %v", err)
			}
			if err := rt.Checkpoint(ctx, h); err != nil {
				if ctx.Err() != nil {
					return nil, w.unwatched(ctx, pid)
				}
				return nil, plugin.WithClass(plugin.Retriable, fmt.Errorf("checkpointing work %s: %w", w.name, err))
			}
		}
	}
}

// unwatched journals that this watcher stopped watching work pid because
// ctx ended (the work goes on), and returns the call's error.
func (w *work) unwatched(ctx context.Context, pid int) error {
	cause := context.Cause(ctx)
	_ = w.journalAppend(journalLine{Event: JournalUnwatched, Attempt: w.attempt, PID: pid, TimeNS: time.Now().UnixNano(),
		Message: cause.Error(), PluginPID: os.Getpid(), AgentPID: os.Getppid()})
	return plugin.WithClass(plugin.Retriable, fmt.Errorf("watching work %s: %w", w.name, cause))
}

func (w *work) result(rt plugin.Runtime, rec record) (*plugin.Result, error) {
	if !rec.OK {
		class := plugin.ErrorClass(rec.Class)
		if class != plugin.Retriable {
			class = plugin.Permanent
		}
		return nil, plugin.Errorf(class, "resumable: work %s failed: %s", w.name, rec.Message)
	}
	fmt.Fprintf(rt.Stdout(), "work %s done\n", w.name)
	out, err := json.Marshal(map[string]string{"name": w.name})
	if err != nil {
		return nil, plugin.Errorf(plugin.Permanent, "resumable: encoding output: %v", err)
	}
	return &plugin.Result{Output: out, Message: "work " + w.name + " done"}, nil
}

func (w *work) readRecord() (record, bool, error) {
	b, err := os.ReadFile(w.record)
	if errors.Is(err, fs.ErrNotExist) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, plugin.Errorf(plugin.Retriable, "resumable: reading record of %s: %v", w.name, err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return record{}, false, plugin.Errorf(plugin.OutcomeUnknown, "resumable: record of %s is corrupt: %v", w.name, err)
	}
	return rec, true, nil
}

// readPID returns 0 when there is no pid file.
func (w *work) readPID() (int, error) {
	b, err := os.ReadFile(w.pid)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, plugin.Errorf(plugin.Retriable, "resumable: reading pid of %s: %v", w.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, plugin.Errorf(plugin.OutcomeUnknown, "resumable: pid file of %s is corrupt: %q", w.name, b)
	}
	return pid, nil
}

func (w *work) startCount() (int, error) {
	b, err := os.ReadFile(w.starts)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, plugin.Errorf(plugin.Retriable, "resumable: reading starts of %s: %v", w.name, err)
	}
	return strings.Count(string(b), "\n"), nil
}

// alive reports whether pid runs and is not a zombie (an unreaped zombie
// still answers kill 0 but will never write its record).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func (w *work) journalAppend(l journalLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return appendLine(w.journal, string(b))
}

// appendLine appends line and a newline in one write (O_APPEND: lines of
// concurrent writers never interleave).
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(line + "\n")); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeAtomic makes path appear complete or not at all.
func writeAtomic(path string, data []byte) error {
	tmp := fmt.Sprintf("%s.tmp%d", path, os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// runWork is the detached work. It journals the start, sleeps, journals the
// end, then writes the outcome.
func runWork(recordPath string) int {
	ms, _ := strconv.Atoi(os.Getenv(envWorkDuration))
	attempt, _ := strconv.Atoi(os.Getenv(envWorkAttempt))
	agentPID, _ := strconv.Atoi(os.Getenv(envWorkAgentPID))
	w := &work{journal: os.Getenv(envWorkJournal)}
	// Findable by name first, then counted. A Resume that sees the lock held
	// waits for this pid file.
	if p := os.Getenv(envWorkPID); p != "" {
		if err := writeAtomic(p, []byte(strconv.Itoa(os.Getpid()))); err != nil {
			fmt.Fprintf(os.Stderr, "resumable work: recording pid: %v\n", err)
			return 1
		}
	}
	if p := os.Getenv(envWorkStarts); p != "" {
		if err := appendLine(p, fmt.Sprintf("%d %s", os.Getppid(), time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
			fmt.Fprintf(os.Stderr, "resumable work: counting start: %v\n", err)
		}
	}
	if w.journal != "" {
		if err := w.journalAppend(journalLine{Event: JournalStart, Attempt: attempt, PID: os.Getpid(), TimeNS: time.Now().UnixNano(),
			PluginPID: os.Getppid(), AgentPID: agentPID}); err != nil {
			fmt.Fprintf(os.Stderr, "resumable work: journaling the start: %v\n", err)
		}
	}
	// Tell the plugin the start is on record (fd 3, when it gave one). A
	// write to a pipe nobody reads fails with EPIPE on fds other than 1 and
	// 2.
	if f := os.NewFile(3, "ready"); f != nil {
		_, _ = f.Write([]byte("started\n"))
		_ = f.Close()
	}
	time.Sleep(time.Duration(ms) * time.Millisecond) // a process of its own; nothing to cancel it but a signal
	rec := record{Name: filepath.Base(recordPath), Attempt: attempt, OK: true}
	if msg := os.Getenv(envWorkFail); msg != "" {
		rec.OK, rec.Class, rec.Message = false, os.Getenv(envWorkClass), msg
	}
	if w.journal != "" {
		end := journalLine{Event: JournalEnd, Attempt: attempt, PID: os.Getpid(), TimeNS: time.Now().UnixNano(), Outcome: "ok", Message: rec.Message}
		if !rec.OK {
			end.Outcome = rec.Class
		}
		// Before the record, because once the record exists the next attempt
		// may start.
		if err := w.journalAppend(end); err != nil {
			fmt.Fprintf(os.Stderr, "resumable work: journaling the end: %v\n", err)
		}
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = writeAtomic(recordPath, b)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "resumable work: writing %s: %v\n", recordPath, err)
		return 1
	}
	return 0
}

func main() {
	if p := os.Getenv(envWorkRecord); p != "" {
		os.Exit(runWork(p))
	}
	plugin.Serve(resumable{})
}
