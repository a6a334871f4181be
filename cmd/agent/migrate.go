package main

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/store/migrate"
)

func (a *app) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations (safe to run concurrently and repeatedly)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, err := config.Load(a.configPath, a.getenv)
			if err != nil {
				return err
			}
			if _, err := agent.DatabaseSecret(ctx, cfg, a.logger()); err != nil {
				return err
			}
			if cfg.DatabaseURL == "" {
				return errors.New("database_url is not set: set DATABASE_URL or database_url in the config file")
			}
			pc, err := agent.PoolConfig(cfg)
			if err != nil {
				return err
			}
			// tether/<agent.name>/migrate, or tether/cli/migrate: no agent
			// name is resolved for a one-off command.
			agent.SetApplicationName(&pc.ConnConfig.Config, cmp.Or(cfg.Agent.Name, "cli"), "migrate")
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				return fmt.Errorf("database_url %s: %w", config.RedactURL(cfg.DatabaseURL), err)
			}
			defer pool.Close()
			if err := pool.Ping(ctx); err != nil {
				return agent.ConnectError(pc.ConnConfig, cfg.DatabaseURL, err)
			}
			applied, err := migrate.Migrate(ctx, pool, a.logger())
			if err != nil {
				return err
			}
			current, _, err := migrate.Status(ctx, pool)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintf(a.stdout, "database schema is up to date (version %d)\n", current)
				return nil
			}
			fmt.Fprintf(a.stdout, "applied migrations %v; database schema is at version %d\n", applied, current)
			return nil
		},
	}
}
