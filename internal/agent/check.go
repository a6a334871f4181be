package agent

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/metrics"
)

// CheckPlugins checks cfg's plugin settings as `tether run` does before it
// serves, and connects to nothing (no database, no cloud API): it starts the
// plugins the configured commands use from plugin_dir, has each check its
// config and its commands' default contexts (their Validate), checks the
// timings against the kill graces they report, and stops them. It returns
// the plugins checked. Problems name their keys, and the environment
// variable behind a key getenv set.
func CheckPlugins(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string) ([]string, error) {
	plugins, _, graces, err := startPlugins(ctx, cfg, log, metrics.New())
	if err != nil {
		return nil, config.NameEnv(err, config.EnvSet(getenv))
	}
	defer plugins.Close()
	if err := cfg.CheckKillGraces(graces); err != nil {
		return nil, config.NameEnv(fmt.Errorf("invalid timings with the kill graces the plugins report:\n%w", err), config.EnvSet(getenv))
	}
	return sortedKeys(plugins.Infos()), nil
}
