// Command noop is a test plugin. Execute returns at once unless the job's
// context scripts it:
//
//	{"sleep_ms": 50, "stdout": ["a"], "stderr": ["b"], "checkpoint": "h",
//	 "output": {...}, "fail": {"class": "retriable", "message": "m"},
//	 "panic": true, "panic_once": "/path", "wait": true, "cancel_file": "/path",
//	 "print_env": true, "cleanup_file": "/path", "cleanup_sleep_ms": 0,
//	 "cleanup_started_file": "/path", "stdout2": ["c"], "checkpoint2": "h2",
//	 "log": true}
//
// stdout2 and checkpoint2 come after the sleep. Without "output", the result
// is {"pid": <plugin process id>}. wait blocks until the call's context is
// cancelled (writing waiting_file first, if given). cancel_file is written
// when the context is cancelled before the call returns, so a test can see
// the cancellation reached the plugin. panic crashes the whole process
// mid-job. panic_once does so only if its file does not exist yet (creating
// it first), so a Resume after the crash goes on. Resume reports the handle
// it was given. Cleanup writes cleanup_started_file, sleeps
// cleanup_sleep_ms (until its context ends) and then writes cleanup_file,
// each if set. log writes one line through each logger a plugin author may
// use (log, slog at debug, info and with a group, hclog's default, an hclog
// logger of its own in text format), each naming the job.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tetherjobs/tether/pkg/plugin"
)

type script struct {
	SleepMS    int             `json:"sleep_ms"`
	Stdout     []string        `json:"stdout"`
	Stderr     []string        `json:"stderr"`
	Checkpoint string          `json:"checkpoint"`
	Output     json.RawMessage `json:"output"`
	Fail       *struct {
		Class   plugin.ErrorClass `json:"class"`
		Message string            `json:"message"`
	} `json:"fail"`
	Panic       bool   `json:"panic"`
	PanicOnce   string `json:"panic_once"`
	CleanupMS   int    `json:"cleanup_sleep_ms"`
	CleanupSeen string `json:"cleanup_started_file"`
	Wait        bool   `json:"wait"`
	// WaitingFile is written when wait begins. The call is then past every
	// checkpoint and blocked on its context (tests take a job over then).
	WaitingFile string `json:"waiting_file"`
	CancelFile  string `json:"cancel_file"`
	PrintEnv    bool   `json:"print_env"`
	CleanupFile string `json:"cleanup_file"`
	// After the sleep come more stdout, then a second checkpoint.
	Stdout2     []string `json:"stdout2"`
	Checkpoint2 string   `json:"checkpoint2"`
	Log         bool     `json:"log"`
}

type noop struct{}

func (noop) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "noop", Version: "test"}, nil
}

func (noop) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	return run(ctx, job, rt)
}

func (noop) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	fmt.Fprintf(rt.Stdout(), "resumed %s from %q\n", job.ID, rt.Handle())
	return run(ctx, job, rt)
}

func (noop) Cleanup(ctx context.Context, job *plugin.Job) error {
	s, err := parse(job)
	if err != nil {
		return err
	}
	if s.CleanupSeen != "" {
		if err := os.WriteFile(s.CleanupSeen, []byte(job.ID), 0o600); err != nil {
			return plugin.WithClass(plugin.Retriable, err)
		}
	}
	if s.CleanupMS > 0 {
		t := time.NewTimer(time.Duration(s.CleanupMS) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return plugin.WithClass(plugin.Retriable, ctx.Err())
		case <-t.C:
		}
	}
	if s.CleanupFile != "" {
		if err := os.WriteFile(s.CleanupFile, []byte(job.ID), 0o600); err != nil {
			return plugin.WithClass(plugin.Retriable, err)
		}
	}
	return nil
}

// HealthCheck fails, saying what it holds, while the file the config's
// unhealthy_file names exists.
func (noop) HealthCheck(_ context.Context, config json.RawMessage) error {
	var c struct {
		UnhealthyFile string `json:"unhealthy_file"`
	}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &c); err != nil {
			return plugin.Errorf(plugin.Permanent, "noop: bad config: %v", err)
		}
	}
	if c.UnhealthyFile == "" {
		return nil
	}
	if why, err := os.ReadFile(c.UnhealthyFile); err == nil {
		return plugin.Errorf(plugin.Retriable, "noop: %s", strings.TrimSpace(string(why)))
	}
	return nil
}

// logEverywhere logs one line through each logger a plugin author may use.
func logEverywhere(id string) {
	log.Printf("std log line of %s", id)
	slog.Debug("slog debug line", "job", id)
	slog.Info("slog info line", "job", id, slog.Group("g", "n", 1))
	hclog.Default().Warn("hclog warn line", "job", id)
	hclog.New(&hclog.LoggerOptions{Name: "own"}).Error("own hclog error line of " + id)
}

func parse(job *plugin.Job) (script, error) {
	var s script
	if len(job.Context) > 0 {
		if err := json.Unmarshal(job.Context, &s); err != nil {
			return s, plugin.Errorf(plugin.Permanent, "noop: bad context: %v", err)
		}
	}
	return s, nil
}

func run(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	s, err := parse(job)
	if err != nil {
		return nil, err
	}
	if s.CancelFile != "" {
		// Written if ctx is cancelled before this call returns, wherever the
		// job is at that moment.
		written := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			defer close(written)
			_ = os.WriteFile(s.CancelFile, []byte(job.ID), 0o600)
		})
		defer func() {
			if !stop() {
				<-written // it started: let it finish before the process may exit
			}
		}()
	}
	if s.Log {
		logEverywhere(job.ID)
	}
	for _, l := range s.Stdout {
		fmt.Fprintln(rt.Stdout(), l)
	}
	for _, l := range s.Stderr {
		fmt.Fprintln(rt.Stderr(), l)
	}
	if s.PrintEnv {
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			fmt.Fprintln(rt.Stdout(), e)
		}
	}
	if s.Checkpoint != "" {
		if err := rt.Checkpoint(ctx, []byte(s.Checkpoint)); err != nil {
			return nil, err
		}
	}
	if s.SleepMS > 0 {
		t := time.NewTimer(time.Duration(s.SleepMS) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, plugin.WithClass(plugin.Retriable, ctx.Err())
		case <-t.C:
		}
	}
	for _, l := range s.Stdout2 {
		fmt.Fprintln(rt.Stdout(), l)
	}
	if s.Checkpoint2 != "" {
		if err := rt.Checkpoint(ctx, []byte(s.Checkpoint2)); err != nil {
			return nil, err
		}
	}
	if s.PanicOnce != "" {
		if _, err := os.Stat(s.PanicOnce); err != nil {
			if err := os.WriteFile(s.PanicOnce, []byte(job.ID), 0o600); err != nil {
				return nil, plugin.WithClass(plugin.Retriable, err)
			}
			s.Panic = true
		}
	}
	if s.Panic {
		// From a fresh goroutine, as a bug in plugin code would. Nothing can
		// recover it, and the whole process dies.
		go func() { panic("noop: panic requested by job " + job.ID) }()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.Wait {
		if s.WaitingFile != "" {
			if err := os.WriteFile(s.WaitingFile, []byte(job.ID), 0o600); err != nil {
				return nil, plugin.Errorf(plugin.Permanent, "noop: writing waiting_file: %v", err)
			}
		}
		<-ctx.Done()
		return nil, plugin.WithClass(plugin.Retriable, ctx.Err())
	}
	// PostgreSQL cannot take a NUL in a job's context, so tests write it as
	// <NUL>: a NUL byte in the error, a \u0000 escape in the output.
	if s.Fail != nil {
		return nil, &plugin.Error{Class: s.Fail.Class, Message: strings.ReplaceAll(s.Fail.Message, "<NUL>", "\x00")}
	}
	out := json.RawMessage(strings.ReplaceAll(string(s.Output), "<NUL>", `\u0000`))
	if len(out) == 0 {
		// The pid lets tests tell whether jobs shared a process.
		out = json.RawMessage(fmt.Sprintf(`{"pid":%d}`, os.Getpid()))
	}
	return &plugin.Result{Output: out, Message: "noop " + job.ID}, nil
}

func main() {
	plugin.Serve(noop{})
}
