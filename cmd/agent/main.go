// Command tether is the tether agent (`tether run`) and its command-line
// client (submit, get, logs, cancel, requeue, jobs, agents, commands).
//
// Exit codes: 0 success. 1 an error (bad flags, API error, agent failure).
// The commands that follow a job to its end (`submit --wait`, `wait`,
// `logs -f`) exit with the job's outcome instead: 0 succeeded, 1 failed,
// 2 canceled, 3 anything else (the job's outcome is unknown: the submit was
// rejected, the wait was interrupted or timed out). docs/cli.md has the rest.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
	"github.com/tetherjobs/tether/pkg/client"
)

const defaultServer = "http://127.0.0.1:9090"

func main() {
	// Before anything reads a secret. A job running as this user must not
	// read the agent's environment or memory through /proc (see
	// docs/security.md). agent.Run logs the outcome.
	if err := agent.SetNonDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "tether: warning: cannot make the process non-dumpable, so jobs running as this user may read its environment: %v\n", err)
	}
	// The first SIGINT/SIGTERM cancels ctx. Commands wind down from there.
	// `run` (and the later drain) may register its own signal channel to
	// treat SIGTERM and a second signal specially.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second Ctrl-C kills a stuck client
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// exitError ends the process with a specific code. A nil err prints nothing.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// app holds what every subcommand shares: I/O, environment and global flags.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	configPath string
	servers    []string
	token      string
	timeout    time.Duration
	logLevel   string
	logFormat  string
	output     string
	noHeaders  bool
}

// syncWriter serialises writes from the log-following goroutines and the
// status lines of `submit --wait`.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: &syncWriter{w: stdout}, stderr: &syncWriter{w: stderr}, getenv: getenv}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	// Any other error exits 1 with its message.
	ee := &exitError{code: 1, err: err}
	errors.As(err, &ee)
	if ee.err != nil {
		fmt.Fprintf(a.stderr, "tether: %v\n", ee.err)
	}
	return ee.code
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "tether",
		Short: "tether runs jobs through plugins under fenced leases, and reattaches them when agents die",
		Long: `tether is a pluggable remote-job agent. "tether run" starts an agent; the other
commands talk to an agent's HTTP API (--server, TETHER_SERVER).

Exit codes: 0 success, 1 error. "tether submit --wait", "tether wait" and
"tether logs -f" exit with the job's outcome: 0 succeeded, 1 failed,
2 canceled, 3 unknown (rejected, interrupted, or --wait-timeout passed).
They reconnect, to the next --server or the same one after a restart, for as
long as the job runs. docs/cli.md is the full reference; "tether completion"
prints shell completion scripts.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.resolveFlags(cmd)
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&a.configPath, "config", "", "config file (YAML) (env TETHER_CONFIG)")
	f.StringSliceVar(&a.servers, "server", []string{defaultServer}, "API server URL; repeat it or comma-separate several agents to fail over between them (env TETHER_SERVER)")
	f.DurationVar(&a.timeout, "timeout", 30*time.Second, "bound of each single request, and of connecting when following a job (which reconnects rather than time out)")
	f.StringVar(&a.token, "token", "", "API bearer token (env TETHER_TOKEN)")
	f.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error (env TETHER_LOG_LEVEL)")
	f.StringVar(&a.logFormat, "log-format", "text", "log format: text or json (env TETHER_LOG_FORMAT)")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table, json, jsonl or yaml (machine output goes to stdout alone)")
	f.BoolVar(&a.noHeaders, "no-headers", false, "tables without their header line")

	root.AddCommand(
		a.runCmd(),
		a.migrateCmd(),
		a.configCmd(),
		a.submitCmd(),
		a.getCmd(),
		a.logsCmd(),
		a.cancelCmd(),
		a.requeueCmd(),
		a.jobsCmd(),
		a.agentsCmd(),
		a.agentCmd(),
		a.commandsCmd(),
		a.waitCmd(),
		a.eventsCmd(),
		a.cleanupsCmd(),
		a.versionCmd(),
		a.devCmd(),
	)
	return root
}

// resolveFlags fills unset flags from the environment and checks them. Env
// values are read here, not as flag defaults, so --help never shows a token.
func (a *app) resolveFlags(cmd *cobra.Command) error {
	f := cmd.Flags()
	for flag, env := range map[string]string{
		"config": "TETHER_CONFIG", "server": "TETHER_SERVER", "token": "TETHER_TOKEN",
		"log-level": "TETHER_LOG_LEVEL", "log-format": "TETHER_LOG_FORMAT",
	} {
		if v := a.getenv(env); v != "" && !f.Changed(flag) {
			if err := f.Set(flag, v); err != nil {
				return fmt.Errorf("%s: %w", env, err)
			}
		}
	}
	if !validOutput(a.output) {
		return fmt.Errorf("--output must be table, json, jsonl or yaml, got %q", a.output)
	}
	if a.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", a.timeout)
	}
	if len(a.servers) == 0 {
		return errors.New("--server: give at least one API server URL")
	}
	if _, err := parseLevel(a.logLevel); err != nil {
		return err
	}
	if !slices.Contains([]string{"text", "json"}, a.logFormat) {
		return fmt.Errorf("--log-format must be text or json, got %q", a.logFormat)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// logger writes to stderr at --log-level in --log-format.
func (a *app) logger() *slog.Logger {
	level, _ := parseLevel(a.logLevel) // checked in resolveFlags
	opts := &slog.HandlerOptions{Level: level}
	if a.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, opts))
}

// client returns an API client of the first --server with --token.
func (a *app) client() (*client.Client, error) {
	cs, err := a.clients()
	if err != nil {
		return nil, err
	}
	return cs[0], nil
}

// call runs one request with the client of the first --server.
func call[T any](a *app, request func(*client.Client) (T, error)) (T, error) {
	c, err := a.client()
	if err != nil {
		var zero T
		return zero, err
	}
	return request(c)
}

// clients returns an API client per --server, each bounding single requests
// by --timeout and connections by it too.
func (a *app) clients() ([]*client.Client, error) {
	// An empty token sends no Authorization header.
	opts := []client.Option{client.WithRequestTimeout(a.timeout), client.WithConnectTimeout(a.timeout), client.WithToken(a.token)}
	var out []*client.Client
	for _, s := range a.servers {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		c, err := client.New(s, opts...)
		if err != nil {
			return nil, fmt.Errorf("--server: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("--server: give at least one API server URL")
	}
	return out, nil
}

// failover returns a Failover over every --server. Retries are noted on
// stderr so a follower that is reconnecting says so.
func (a *app) failover() (*client.Failover, error) {
	cs, err := a.clients()
	if err != nil {
		return nil, err
	}
	return client.NewFailover(cs, client.OnRetry(func(server string, err error, in time.Duration) {
		fmt.Fprintf(a.stderr, "tether: %s: %v; reconnecting in %s\n", server, err, in)
	}))
}
