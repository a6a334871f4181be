package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// demoScript is what the demo job runs. It prints a few lines of output over
// a couple of seconds, so the newcomer sees logs stream and a status change.
const demoScript = `echo "hello from tether: job $TETHER_DEMO on $(uname -n)"
for i in 1 2 3 4 5; do echo "step $i of 5"; sleep 0.4; done
echo "a line on stderr" >&2
echo done`

func (a *app) devCmd() *cobra.Command {
	var dataDir, listen string
	var noDemo, keepEmulator, verbose bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a self-contained agent: private PostgreSQL, shell plugin, a demo job",
		Long: `Run everything a newcomer needs on one machine, with no Docker and no cloud:
a private PostgreSQL started from the installed server binaries under
--data-dir (unless DATABASE_URL is set), an agent with the plugins found next
to the tether binary, and a demo job whose logs are followed. The agent keeps
serving until Ctrl-C. This is what "make run" does.

When the ECS plugin is built, a local ECS + CloudWatch Logs emulator runs as
a process of its own (log in <data-dir>/run/emulator.log), and PostgreSQL
too, so both outlive a crash (kill -9) of this agent: started again,
"tether dev" reuses them and reattaches to the jobs that were running. Ctrl-C
stops all three (the emulator stays with --keep-emulator); "tether dev stop"
("make stop") stops whatever is left.

The agent's per-request log lines are at debug level here, so the job output
stays readable; --verbose (or --log-level debug) shows them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDev(cmd.Context(), devOptions{dataDir: dataDir, listen: listen, noDemo: noDemo, keepEmulator: keepEmulator, verbose: verbose})
		},
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", ".tether", "where the private PostgreSQL keeps its data (kept between runs) and run/ holds the emulator's pid, URL and log")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9090", "API address (overrides http.listen)")
	cmd.Flags().BoolVar(&noDemo, "no-demo", false, "do not submit the demo job")
	cmd.Flags().BoolVar(&keepEmulator, "keep-emulator", false, "leave the ECS emulator (and its tasks) running on exit")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "log every API request (at info level)")
	cmd.AddCommand(a.devEmulatorCmd(), a.devStopCmd(&dataDir))
	return cmd
}

type devOptions struct {
	dataDir, listen               string
	noDemo, keepEmulator, verbose bool
}

// runDev loads the config with dev's defaults, starts the ECS emulator and
// the private PostgreSQL where needed, then runs the agent with the demo
// jobs. What it started is stopped, in reverse order, when it returns.
func (a *app) runDev(ctx context.Context, o devOptions) error {
	log := a.logger()
	cfg, err := a.devConfig(o.listen)
	if err != nil {
		return err
	}
	stop, err := a.startDevServices(ctx, cfg, o, log)
	defer stop()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return a.serveDev(ctx, cfg, o, log)
}

// startDevServices starts the ECS emulator (when the ECS plugin is built)
// and the private PostgreSQL (when DATABASE_URL is not set), and writes the
// pid file `tether dev stop` reads when either outlives this process. The
// func it returns, even on error, stops what it started, in reverse order.
func (a *app) startDevServices(ctx context.Context, cfg *config.Config, o devOptions, log *slog.Logger) (func(), error) {
	var stops stopList
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return stops.run, fmt.Errorf("--data-dir: %w", err)
	}
	runDir := filepath.Join(dataDir, "run")
	ecsRunning, err := a.startDevECS(ctx, cfg, runDir, o.keepEmulator, &stops)
	if err != nil {
		return stops.run, err
	}
	if ecsRunning || cfg.DatabaseURL == "" {
		remove, err := writeDevPID(runDir)
		if err != nil {
			return stops.run, err
		}
		stops.add(remove)
	}
	if cfg.DatabaseURL == "" {
		stopPG, err := a.devPostgres(ctx, cfg, dataDir, log)
		if err != nil {
			return stops.run, err
		}
		stops.add(stopPG)
	}
	return stops.run, nil
}

// startDevECS starts the ECS emulator when the ECS plugin is built, and
// reports whether it runs. Unless keep is set, stopping it is added to
// stops. That runs only on a clean exit (Ctrl-C, SIGTERM). After a kill -9
// the emulator keeps the tasks a restarted agent reattaches to.
func (a *app) startDevECS(ctx context.Context, cfg *config.Config, runDir string, keep bool, stops *stopList) (bool, error) {
	stopECS, err := a.devECS(ctx, cfg, runDir)
	if err != nil || stopECS == nil {
		return false, err
	}
	if !keep {
		stops.add(func() { stopECS(context.WithoutCancel(ctx)) })
	}
	return true, nil
}

// stopList holds what was started, to stop in reverse order.
type stopList []func()

func (s *stopList) add(f func()) { *s = append(*s, f) }

func (s *stopList) run() {
	for _, f := range slices.Backward(*s) {
		f()
	}
}

// devConfig loads the config and applies dev's settings. The listen
// address (refused beyond this machine without tokens), the demo commands
// when none are configured, and the agent name "dev" when none is set.
func (a *app) devConfig(listen string) (*config.Config, error) {
	cfg, err := config.Load(a.configPath, a.getenv)
	if err != nil {
		return nil, err
	}
	cfg.HTTP.Listen = listen
	if err := checkDevListen(listen, len(cfg.HTTP.Tokens)); err != nil {
		return nil, err
	}
	if len(cfg.HTTP.Tokens) == 0 {
		fmt.Fprintf(a.stderr, "API auth is OFF (no http.tokens): it listens on %s, reachable only from this machine, where any local user or program can run the configured commands\n", listen)
	} else {
		fmt.Fprintf(a.stderr, "API auth is on (%d token(s) from http.tokens / TETHER_API_TOKENS)\n", len(cfg.HTTP.Tokens))
	}
	if len(cfg.Commands) == 0 {
		cfg.Commands = map[string]config.Command{
			"shell": {Plugin: "shell"},
			"demo":  {Plugin: "shell", Context: map[string]any{"script": demoScript, "env": map[string]any{"TETHER_DEMO": "demo"}}},
		}
	}
	cfg.Agent.Name = cmp.Or(cfg.Agent.Name, "dev")
	return cfg, nil
}

// devPostgres starts the private PostgreSQL under dataDir/pgdata and points
// cfg at it. dataDir is absolute. It returns the func that stops it.
func (a *app) devPostgres(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (func(), error) {
	pgdata := filepath.Join(dataDir, "pgdata")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	fmt.Fprintf(a.stderr, "starting a private PostgreSQL in %s (set DATABASE_URL to use your own)\n", pgdata)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: pgdata, Persistent: true, Port: 0, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("starting the private PostgreSQL: %w", err)
	}
	cfg.DatabaseURL = cluster.URL("postgres")
	return func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(stopCtx); err != nil {
			log.Warn("stopping the private PostgreSQL", "err", err)
		}
	}, nil
}

// serveDev runs the agent until a signal drains it, submitting the demo
// jobs and printing what to try once it serves.
func (a *app) serveDev(ctx context.Context, cfg *config.Config, o devOptions, log *slog.Logger) error {
	started := make(chan string, 1)
	agentErr := make(chan error, 1)
	agentCtx, hurry, stopSignals := drainSignals(ctx, log)
	defer stopSignals()
	go func() {
		agentErr <- agent.Run(agentCtx, cfg, log, agent.Options{Getenv: a.getenv, Hurry: hurry, QuietRequests: !o.verbose, Started: func(addr string) { started <- addr }})
	}()
	var addr string
	select {
	case addr = <-started:
	case err := <-agentErr:
		return cmp.Or(err, errors.New("agent stopped before it was ready"))
	}
	base := "http://" + addr
	if !o.noDemo {
		if err := a.devDemos(ctx, cfg, base); err != nil {
			return err
		}
	}
	a.printDevHelp(base)
	return <-agentErr
}

// devDemos submits the demo jobs of the commands configured and follows
// them.
func (a *app) devDemos(ctx context.Context, cfg *config.Config, base string) error {
	var copts []client.Option
	if len(cfg.HTTP.Tokens) > 0 { // the demo job needs a token too
		copts = append(copts, client.WithToken(cfg.HTTP.Tokens[0].Token))
	}
	c, err := client.New(base, copts...)
	if err != nil {
		return err
	}
	for _, command := range []string{"demo", "ecs-demo"} {
		if _, ok := cfg.Commands[command]; !ok {
			continue
		}
		if err := a.demo(ctx, c, command); err != nil && ctx.Err() == nil {
			fmt.Fprintf(a.stderr, "%s job: %v\n", command, err)
		}
	}
	return nil
}

func (a *app) printDevHelp(base string) {
	exe, _ := os.Executable()
	fmt.Fprintf(a.stdout, `
tether is serving at %[1]s (Ctrl-C stops it).
The web console: %[1]s/ (jobs, live logs, timelines, agents).
Try, in another terminal:

  %[2]s --server %[1]s submit shell --context '{"script":"echo hi; sleep 2; echo bye"}' --wait
  %[2]s --server %[1]s submit ecs-demo --wait     # an ECS task, on the local emulator
  %[2]s --server %[1]s jobs
  %[2]s --server %[1]s agents
  %[2]s --server %[1]s commands                   # who serves each command, what is queued
  curl -s %[1]s/api/v1/jobs | head

A crash of this agent (kill -9 %[3]d) leaves PostgreSQL and the ECS emulator
running: started again, it reattaches to the running jobs (make demo-reattach
shows it); "%[2]s dev stop" stops what is left.

`, base, relPath(exe), os.Getpid())
}

// checkDevListen refuses to serve `tether dev`'s unauthenticated API beyond
// this machine. It runs shell commands for whoever can reach it. With
// tokens configured any address is allowed.
func checkDevListen(listen string, tokens int) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port such as 127.0.0.1:9090: %w", listen, err)
	}
	if tokens > 0 || host == "localhost" {
		return nil
	}
	if net.ParseIP(host).IsLoopback() { // false for a nil IP, a host name
		return nil
	}
	return fmt.Errorf("--listen %q: tether dev serves its API without auth, so it listens only on a loopback address (127.0.0.1:9090, [::1]:9090 or localhost:9090); to serve other machines, configure http.tokens (or TETHER_API_TOKENS), or use `tether run`", listen)
}

// demo submits a demo job and follows it to its end.
func (a *app) demo(ctx context.Context, c *client.Client, command string) error {
	job, _, err := c.Submit(ctx, api.SubmitRequest{Command: command, Submitter: "tether dev"})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "submitted %s job %s; following its output:\n\n", command, job.ID)
	if err := c.Logs(ctx, job.ID, "", true, a.stdout); err != nil {
		return err
	}
	final, err := c.Wait(ctx, job.ID, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\n%s job %s %s\n\n", command, final.ID, final.Status)
	return nil
}

// relPath is p relative to the working directory when that is shorter.
// Without a working directory Rel fails on the absolute p, which is kept.
func relPath(p string) string {
	wd, _ := os.Getwd()
	if r, err := filepath.Rel(wd, p); err == nil && len(r) < len(p) {
		return r
	}
	return p
}

// ecsDemoTask is the ECS demo: a task definition whose container the local
// emulator runs as a process, with its output in CloudWatch Logs.
var ecsDemoTask = map[string]any{
	"family": "tether-dev-demo",
	"containerDefinitions": []any{map[string]any{
		"name":      "demo",
		"image":     "public.ecr.aws/docker/library/busybox:latest",
		"essential": true,
		// DEMO_LINES and DEMO_INTERVAL (container_overrides environment)
		// make it longer, e.g. for `make demo-reattach`.
		"command": []any{"sh", "-c", `n=${DEMO_LINES:-4}; i=1; while [ "$i" -le "$n" ]; do echo "ecs task line $i of $n"; sleep "${DEMO_INTERVAL:-0.5}"; i=$((i+1)); done`},
		"logConfiguration": map[string]any{
			"logDriver": "awslogs",
			"options": map[string]any{
				"awslogs-group": "/tether/dev", "awslogs-region": "us-east-1",
				"awslogs-stream-prefix": "demo", "awslogs-create-group": "true",
			},
		},
	}},
}

// devECS sets up the ECS plugin for `tether dev` when its binary is next to
// tether and nothing says where AWS is. It reuses the local ECS + CloudWatch
// Logs emulator recorded in runDir or starts one as its own process, and
// points the plugin at it. It returns the emulator's stop func (nil when
// ECS is not set up here).
func (a *app) devECS(ctx context.Context, cfg *config.Config, runDir string) (func(context.Context), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil
	}
	dir := cmp.Or(cfg.PluginDir, filepath.Dir(exe))
	if _, err := os.Stat(filepath.Join(dir, "tether-plugin-ecs")); err != nil {
		return nil, nil // not built: the shell demo is enough
	}
	if _, configured := cfg.Plugins["ecs"]; configured || a.getenv("AWS_ENDPOINT_URL") != "" {
		return nil, nil // the user says where ECS is
	}
	run, started, err := ensureEmulator(ctx, runDir)
	if err != nil {
		return nil, err
	}
	verb := "started"
	if !started {
		verb = "reusing"
	}
	fmt.Fprintf(a.stderr, "%s the local ECS + CloudWatch Logs emulator at %s, pid %d, log %s (set AWS_ENDPOINT_URL to use another)\n",
		verb, run.URL, run.PID, relPath(filepath.Join(runDir, emulatorLogFile)))
	url := run.URL
	if cfg.Plugins == nil {
		cfg.Plugins = map[string]config.Plugin{}
	}
	cfg.Plugins["ecs"] = config.Plugin{Env: map[string]string{
		"AWS_ENDPOINT_URL": url, "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
	}}
	if _, defaults := cfg.Commands["demo"]; defaults { // only next to the built-in demo
		cfg.Commands["ecs-demo"] = config.Command{Plugin: "ecs", Context: map[string]any{
			// The local emulator delivers log lines at once, so the last
			// read after the task stops need not wait for CloudWatch's lag.
			"task_definition_template": ecsDemoTask, "poll_interval": "500ms", "log_settle": "500ms",
		}}
	}
	return func(ctx context.Context) {
		if err := stopProcess(ctx, run.PID, syscall.SIGTERM); err != nil {
			fmt.Fprintf(a.stderr, "stopping the local ECS emulator: %v\n", err)
			return
		}
		fmt.Fprintf(a.stderr, "stopped the local ECS emulator (pid %d) and its tasks\n", run.PID)
	}, nil
}
