package config

import (
	"fmt"
	"slices"
	"time"

	"github.com/tetherjobs/tether/plugins/shell/shell"
)

// maxKillGraceKey is the plugin config key naming the longest a plugin may
// take to stop its local work after a cancel. The shell plugin enforces it
// on every job's kill_grace (default shell.DefaultMaxKillGrace); any other
// plugin may declare it in its config too (default 0: it stops nothing
// local, or at once).
const maxKillGraceKey = "max_kill_grace"

// killGrace is one plugin's longest stop time and where it comes from.
type killGrace struct {
	d    time.Duration
	key  string // e.g. "plugins.shell.config.max_kill_grace"
	dflt bool   // d is the plugin's default, not set in the config
}

func (k killGrace) describe() string {
	if k.key == "" {
		return "none: no configured plugin stops local work"
	}
	if k.dflt {
		return fmt.Sprintf("%s %s, the default", k.key, secs(k.d))
	}
	return fmt.Sprintf("%s %s", k.key, secs(k.d))
}

// usedPlugins returns the plugins that may run a job of this agent: those
// configured under plugins and those a command names, sorted. A plugin found
// in plugin_dir that no command uses runs no job, so it stops nothing.
func (c *Config) usedPlugins() []string {
	names := sortedKeys(c.Plugins)
	for _, cmd := range c.Commands {
		if cmd.Plugin != "" && !slices.Contains(names, cmd.Plugin) {
			names = append(names, cmd.Plugin)
		}
	}
	slices.Sort(names)
	return names
}

// killGraces returns the longest kill grace of the plugins this agent may
// run, and the problems found reading it (each naming its key). Only the
// max_kill_grace key is read: the plugin validates the rest of its config
// itself (a plugin binary may be newer than this agent).
func (c *Config) killGraces() (killGrace, []error) {
	var longest killGrace
	var errs []error
	for _, name := range c.usedPlugins() {
		key := "plugins." + name + ".config." + maxKillGraceKey
		k := killGrace{key: key}
		v, set := c.Plugins[name].Config[maxKillGraceKey]
		switch {
		case set:
			d, err := parseKillGrace(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", key, err))
				continue
			}
			k.d = d
		case name == "shell":
			k.d, k.dflt = shell.DefaultMaxKillGrace, true
		default:
			continue // a plugin that stops nothing local, or at once
		}
		if longest.key == "" || k.d > longest.d {
			longest = k
		}
	}
	return longest, errs
}

// parseKillGrace reads a max_kill_grace value as the plugins do: a Go
// duration string, not negative.
func parseKillGrace(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("use a duration string like \"30s\", got %v", v)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; use a Go duration like \"30s\"", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %s", s)
	}
	return d, nil
}

// LongestKillGrace is the longest time any plugin this agent may run (one
// configured under plugins or named by a command) may take to stop its
// local work after a cancel: the shell plugin's config.max_kill_grace
// (default 30s), and for any other plugin the max_kill_grace key of its
// config (default 0). A value Validate refuses counts as 0.
func (c *Config) LongestKillGrace() time.Duration {
	k, _ := c.killGraces()
	return k.d
}

// SelfFenceAfter is how long an agent goes on without a successful
// heartbeat before it stops its own jobs: stale_job − 2×keepalive −
// LongestKillGrace(). The janitor may hand a job to another agent stale_job
// after its last renewal; stopping this early leaves every plugin its kill
// grace to stop local work, and one more keepalive, before that. Validate
// requires it to be at least 2×keepalive, so one missed heartbeat never
// fences an agent. With the defaults and the shell plugin: 120s − 10s −
// 30s = 80s.
func (c *Config) SelfFenceAfter() time.Duration {
	return c.Agent.StaleJob.Std() - 2*c.Agent.Keepalive.Std() - c.LongestKillGrace()
}

// secs writes a whole number of seconds as "120s" (easier to add up in an
// error message than "2m0s"), anything else as time.Duration does.
func secs(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
