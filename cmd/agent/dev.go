package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/client"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgcluster"
)

// demoScript is what the demo job runs: a few lines of output over a couple
// of seconds, so the newcomer sees logs stream and a status change.
const demoScript = `echo "hello from tether: job $TETHER_DEMO on $(uname -n)"
for i in 1 2 3 4 5; do echo "step $i of 5"; sleep 0.4; done
echo "a line on stderr" >&2
echo done`

func (a *app) devCmd() *cobra.Command {
	var dataDir, listen string
	var noDemo bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a self-contained agent: private PostgreSQL, shell plugin, a demo job",
		Long: `Run everything a newcomer needs on one machine, with no Docker and no cloud:
a private PostgreSQL started from the installed server binaries under
--data-dir (unless DATABASE_URL is set), an agent with the plugins found next
to the tether binary, and a demo job whose logs are followed. The agent keeps
serving until Ctrl-C. This is what "make run" does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDev(cmd.Context(), dataDir, listen, noDemo)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".tether", "where the private PostgreSQL keeps its data (kept between runs)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9090", "API address (overrides http.listen)")
	cmd.Flags().BoolVar(&noDemo, "no-demo", false, "do not submit the demo job")
	return cmd
}

func (a *app) runDev(ctx context.Context, dataDir, listen string, noDemo bool) error {
	log := a.logger()
	cfg, err := config.Load(a.configPath, a.getenv)
	if err != nil {
		return err
	}
	cfg.HTTP.Listen = listen
	if len(cfg.Commands) == 0 {
		cfg.Commands = map[string]config.Command{
			"shell": {Plugin: "shell"},
			"demo":  {Plugin: "shell", Context: map[string]any{"script": demoScript, "env": map[string]any{"TETHER_DEMO": "demo"}}},
		}
	}
	if cfg.Agent.Name == "" {
		cfg.Agent.Name = "dev"
	}

	if cfg.DatabaseURL == "" {
		abs, err := filepath.Abs(filepath.Join(dataDir, "pgdata"))
		if err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		fmt.Fprintf(a.stderr, "starting a private PostgreSQL in %s (set DATABASE_URL to use your own)\n", abs)
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: abs, Persistent: true, Port: 0, Logger: log})
		if err != nil {
			return fmt.Errorf("starting the private PostgreSQL: %w", err)
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := cluster.Stop(stopCtx); err != nil {
				log.Warn("stopping the private PostgreSQL", "err", err)
			}
		}()
		cfg.DatabaseURL = cluster.URL("postgres")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	started := make(chan string, 1)
	agentErr := make(chan error, 1)
	agentCtx, hurry, stopSignals := drainSignals(ctx, log)
	defer stopSignals()
	go func() {
		agentErr <- agent.Run(agentCtx, cfg, log, agent.Options{Getenv: a.getenv, Hurry: hurry, Started: func(addr string) { started <- addr }})
	}()
	var addr string
	select {
	case addr = <-started:
	case err := <-agentErr:
		if err == nil {
			err = errors.New("agent stopped before it was ready")
		}
		return err
	}
	base := "http://" + addr
	c, err := client.New(base)
	if err != nil {
		return err
	}
	if !noDemo {
		if err := a.demo(ctx, c); err != nil && ctx.Err() == nil {
			fmt.Fprintf(a.stderr, "demo job: %v\n", err)
		}
	}
	exe, _ := os.Executable()
	fmt.Fprintf(a.stdout, `
tether is serving at %[1]s (Ctrl-C stops it). Try, in another terminal:

  %[2]s --server %[1]s submit shell --context '{"script":"echo hi; sleep 2; echo bye"}' --wait
  %[2]s --server %[1]s jobs
  %[2]s --server %[1]s agents
  curl -s %[1]s/api/v1/jobs | head

`, base, relPath(exe))
	return <-agentErr
}

// demo submits the demo job and follows it to its end.
func (a *app) demo(ctx context.Context, c *client.Client) error {
	job, _, err := c.Submit(ctx, api.SubmitRequest{Command: "demo", Submitter: "tether dev"})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "submitted demo job %s; following its output:\n\n", job.ID)
	if err := c.Logs(ctx, job.ID, "", true, a.stdout); err != nil {
		return err
	}
	final, err := c.Wait(ctx, job.ID, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\ndemo job %s %s\n", final.ID, final.Status)
	return nil
}

func relPath(p string) string {
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, p); err == nil && len(r) < len(p) {
			return r
		}
	}
	return p
}
