package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
	"github.com/tetherjobs/tether/internal/config"
)

func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration (config check)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(a.configCheckCmd())
	return cmd
}

// configCheckResult is what `config check -o json` prints.
type configCheckResult struct {
	Config   string   `json:"config"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
	Commands []string `json:"commands"`
	Plugins  []string `json:"plugins_checked"`
}

func (a *app) configCheckCmd() *cobra.Command {
	var skipPlugins bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate a configuration and its plugins' settings without connecting anywhere",
		Long: `Validate the configuration --config (TETHER_CONFIG) names, with the TETHER_*
environment overrides applied, as "tether run" does before it serves: every
key, the relations between the timings, and each configured plugin's config
and its commands' default contexts, checked by the plugin itself (its
binary is started from plugin_dir and stopped again). It connects to nothing:
no database, no cloud API.

Exit 0 when all is well; 1 with every problem listed, each naming its key
and, when an environment variable set the value, the variable.
--skip-plugins checks the file and the environment alone.`,
		Example: `  tether config check --config /etc/tether/tether.yaml
  TETHER_AGENT_KEEPALIVE=10s tether config check -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res := configCheckResult{Config: a.configPath, Problems: []string{}, Commands: []string{}, Plugins: []string{}}
			cfg, err := config.Load(a.configPath, a.getenv)
			if err == nil {
				res.Commands = cfg.CommandNames()
				if !skipPlugins {
					var checked []string
					checked, err = agent.CheckPlugins(cmd.Context(), cfg, a.logger(), a.getenv)
					res.Plugins = append(res.Plugins, checked...)
				}
			}
			res.Problems = problemList(err)
			res.OK = len(res.Problems) == 0
			if err := a.show(res, func() error { return a.printConfigCheck(res) }); err != nil {
				return err
			}
			if !res.OK {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipPlugins, "skip-plugins", false, "do not start the plugins to check their settings")
	return cmd
}

// problemList is each problem of err (the parts of an errors.Join, line by
// line), none for nil.
func problemList(err error) []string {
	if err == nil {
		return []string{}
	}
	var out []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasSuffix(l, ":") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		out = append(out, err.Error())
	}
	return out
}

func (a *app) printConfigCheck(res configCheckResult) error {
	where := orEmpty(res.Config, " "+res.Config)
	if where == "" {
		where = " (no file: defaults and environment)"
	}
	if !res.OK {
		fmt.Fprintf(a.stderr, "config%s: %d problem(s):\n", where, len(res.Problems))
		for _, p := range res.Problems {
			fmt.Fprintf(a.stderr, "  - %s\n", p)
		}
		return nil
	}
	fmt.Fprintf(a.stdout, "config%s: OK (commands: %s; plugins checked: %s)\n", where,
		orDash(strings.Join(res.Commands, ", ")), orDash(strings.Join(res.Plugins, ", ")))
	return nil
}
