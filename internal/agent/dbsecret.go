package agent

import (
	"context"
	"log/slog"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/dbsecret"
)

// DatabaseSecret reads database_secret, when set, puts the database URL it
// makes into cfg.DatabaseURL (internal/dbsecret says how) and returns the
// source that reads it again for the pools' new connections, so a rotation
// reaches them (nil when database_secret is unset). `tether run` and
// `tether migrate` call it before they connect.
func DatabaseSecret(ctx context.Context, cfg *config.Config, log *slog.Logger) (*dbsecret.Source, error) {
	if cfg.DatabaseSecret == "" {
		return nil, nil
	}
	c, err := dbsecret.NewClient(ctx, cfg.DatabaseSecret)
	if err != nil {
		return nil, err
	}
	src, err := dbsecret.NewSource(ctx, c, cfg.DatabaseSecret, cfg.DatabaseURL, dbsecret.Refresh, log)
	if err != nil {
		return nil, err
	}
	cfg.DatabaseURL = src.URL()
	return src, nil
}
