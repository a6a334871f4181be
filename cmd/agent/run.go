package main

import (
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
			logger.Info("starting tether agent", "version", agent.Version, "config", cfg)
			return agent.Run(cmd.Context(), cfg, logger, agent.Options{NoMigrate: noMigrate, Getenv: a.getenv})
		},
	}
	cmd.Flags().BoolVar(&noMigrate, "no-migrate", false, "do not apply database migrations at start")
	return cmd
}
