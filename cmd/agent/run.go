package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
	"github.com/tetherjobs/tether/internal/config"
)

func (a *app) runCmd() *cobra.Command {
	var noMigrate bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run an agent: claim jobs, run them through plugins, serve the API",
		Long: `Run an agent until SIGINT or SIGTERM. It applies pending database migrations
first unless --no-migrate. Configuration comes from --config (TETHER_CONFIG)
and TETHER_* environment variables; see docs/configuration.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(a.configPath, a.getenv)
			if err != nil {
				return err
			}
			logger := a.logger()
			logger.Info("starting tether agent", "version", agent.Version(), "config", cfg)
			ctx, hurry, stop := drainSignals(cmd.Context(), logger)
			defer stop()
			return agent.Run(ctx, cfg, logger, agent.Options{NoMigrate: noMigrate, Getenv: a.getenv, Hurry: hurry})
		},
	}
	cmd.Flags().BoolVar(&noMigrate, "no-migrate", false, "do not apply database migrations at start")
	return cmd
}

// drainSignals turns SIGTERM/SIGINT into the drain. The first ends the
// returned context (the agent drains), the second closes hurry (it stops
// waiting for running jobs). While registered here, signals never kill the
// process outright, so a second Ctrl-C still hands resumable jobs off.
func drainSignals(parent context.Context, log *slog.Logger) (context.Context, <-chan struct{}, func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	// The root command's context also ends on the first signal (and tests
	// end it to stop an in-process agent). Either begins the drain.
	ctx, begin := context.WithCancel(parent)
	hurry := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			log.Info("signal received: draining (a second signal stops waiting for jobs)", "signal", sig.String())
			begin()
		case <-done:
			return
		}
		// Later signals change nothing: Notify drops them once ch is full.
		select {
		case sig := <-ch:
			log.Info("second signal: stopping running jobs now", "signal", sig.String())
			close(hurry)
		case <-done:
		}
	}()
	return ctx, hurry, func() {
		signal.Stop(ch)
		close(done)
		begin()
	}
}
