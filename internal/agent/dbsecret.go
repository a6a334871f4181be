package agent

import (
	"context"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/dbsecret"
)

// ResolveDatabaseSecret reads database_secret, when set, and puts the
// database URL it makes into cfg.DatabaseURL (internal/dbsecret says how).
// `tether run` and `tether migrate` call it before they connect.
func ResolveDatabaseSecret(ctx context.Context, cfg *config.Config) error {
	if cfg.DatabaseSecret == "" {
		return nil
	}
	c, err := dbsecret.NewClient(ctx, cfg.DatabaseSecret)
	if err != nil {
		return err
	}
	u, err := dbsecret.Resolve(ctx, c, cfg.DatabaseSecret, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	cfg.DatabaseURL = u
	return nil
}
