package config

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// maxKillGraceKey names the longest a plugin may take to stop its local
// work after a cancel. A plugin reports its own value at the agent's start
// (plugin.KillGracer: the shell plugin reports its config.max_kill_grace or
// its default). An operator sets it for any plugin as the agent's key
// plugins.<name>.max_kill_grace, which the plugin never sees. A plugin with
// neither counts 0. It stops nothing local, or at once.
const maxKillGraceKey = "max_kill_grace"

// KillGraces are the longest stop times the plugins reported at the agent's
// start, by plugin name. A plugin that reported none is absent. Before the
// plugins start it is nil, and only the config's max_kill_grace keys count.
type KillGraces = map[string]time.Duration

// killGrace is one plugin's longest stop time and where it comes from.
type killGrace struct {
	d    time.Duration
	key  string // e.g. "plugins.shell.config.max_kill_grace"
	from string // "" (the config), "the default" or "as the plugin reports"
}

func (k killGrace) describe() string {
	if k.key == "" {
		return "none: no configured plugin stops local work"
	}
	if k.from != "" {
		return fmt.Sprintf("%s %s, %s", k.key, secs(k.d), k.from)
	}
	return fmt.Sprintf("%s %s", k.key, secs(k.d))
}

// usedPlugins returns the plugins that may run a job of this agent. They are
// those configured under plugins and those a command names, sorted. A plugin
// found in plugin_dir that no command uses runs no job, so it stops nothing.
func (c *Config) usedPlugins() []string {
	names := sortedKeys(c.Plugins)
	for _, cmd := range c.Commands {
		if cmd.Plugin != "" {
			names = append(names, cmd.Plugin)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// killGraces returns the longest kill grace of the plugins this agent may
// run, and the problems found reading it (each naming its key). Only the
// max_kill_grace key is read. The plugin validates the rest of its config
// itself (a plugin binary may be newer than this agent).
func (c *Config) killGraces(reported KillGraces) (killGrace, []error) {
	var longest killGrace
	var errs []error
	for _, name := range c.usedPlugins() {
		k, err := c.killGraceOf(name, reported)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k.key != "" {
			longest = longer(longest, k)
		}
	}
	return longest, errs
}

// longer returns the longer of k and other (which has a key), other when k
// has no key.
func longer(k, other killGrace) killGrace {
	if k.key == "" || other.d > k.d {
		return other
	}
	return k
}

// killGraceOf is one plugin's kill grace. It is the longest of what the
// agent's plugins.<name>.max_kill_grace sets, what its config's
// max_kill_grace sets (the shell plugin's own key), and what it reported.
// The zero killGrace means it has none.
func (c *Config) killGraceOf(name string, reported KillGraces) (killGrace, error) {
	var k killGrace
	if d := c.Plugins[name].MaxKillGrace.Std(); d > 0 {
		k = killGrace{d: d, key: "plugins." + name + "." + maxKillGraceKey}
	}
	if v, set := c.Plugins[name].Config[maxKillGraceKey]; set {
		key := "plugins." + name + ".config." + maxKillGraceKey
		d, err := parseKillGrace(v)
		if err != nil {
			return killGrace{}, fmt.Errorf("%s: %w", key, err)
		}
		k = longer(k, killGrace{d: d, key: key})
	}
	r, ok := reported[name]
	switch {
	case !ok: // nothing reported: the config's keys alone
	case k.key == "":
		k = killGrace{d: r, key: "plugins." + name + ".config." + maxKillGraceKey, from: "the default"}
	case r > k.d:
		k.d, k.from = r, "as the plugin reports"
	}
	return k, nil
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
// local work after a cancel. Each plugin counts the longer of what it
// reported and its config's max_kill_grace key (default 0). The shell plugin
// reports its config.max_kill_grace (default 10s). A value Validate refuses
// counts as 0.
func (c *Config) LongestKillGrace(reported KillGraces) time.Duration {
	k, _ := c.killGraces(reported)
	return k.d
}

// SelfFenceAfter is how long an agent goes on without a successful
// heartbeat before it stops its own jobs: stale_job − 2×keepalive −
// LongestKillGrace. The janitor may hand a job to another agent stale_job
// after its last renewal. Stopping this early leaves every plugin its kill
// grace to stop local work, and one more keepalive, before that. Validate
// and CheckKillGraces require it to be at least 2×keepalive, so one missed
// heartbeat never fences an agent. With the defaults and the shell plugin,
// it is 120s − 10s − 10s = 100s.
func (c *Config) SelfFenceAfter(reported KillGraces) time.Duration {
	return c.Agent.StaleJob.Std() - 2*c.Agent.Keepalive.Std() - c.LongestKillGrace(reported)
}

// DrainStopBound is how long a drain may take, after shutdown_timeout, to
// stop the jobs still running. It is the longest kill_grace a plugin may use
// (LongestKillGrace, 10s with the shell plugin's defaults) plus the final
// writes, and never less than 12s.
func (c *Config) DrainStopBound(reported KillGraces) time.Duration {
	return max(12*time.Second, c.LongestKillGrace(reported)+drainWriteBound)
}

// CheckKillGraces checks the relations that the plugins' kill graces enter
// (the self-fence point and the drain's stop bound) with what the plugins
// reported at start. Validate checks them with the config's keys alone. The
// agent calls this once its plugins have answered Validate. Each problem
// names the key and the fix.
func (c *Config) CheckKillGraces(reported KillGraces) error {
	return errors.Join(append(c.checkSelfFence(reported), c.checkDrainFitsStop(reported)...)...)
}

// checkSelfFence requires the self-fence point to be at least 2×keepalive.
func (c *Config) checkSelfFence(reported KillGraces) []error {
	a := c.Agent
	grace, errs := c.killGraces(reported)
	if !a.timingsSet() || len(errs) > 0 {
		return errs
	}
	k, st := a.Keepalive.Std(), a.StaleJob.Std()
	if fence := c.SelfFenceAfter(reported); fence < 2*k {
		errs = append(errs, fmt.Errorf("agent.stale_job (%s) − 2×agent.keepalive (%s) − longest kill_grace (%s) = %s must be at least 2×keepalive (%s): an agent without a successful heartbeat stops its own jobs at that point, so that every plugin has its kill_grace and one more keepalive to stop local work before the janitor may act at stale_job, and one missed heartbeat must never fence it; raise agent.stale_job to at least 4×keepalive + kill_grace = %s, or lower keepalive or the kill_grace",
			secs(st), secs(2*k), grace.describe(), secs(fence), secs(2*k), secs(4*k+grace.d)))
	}
	return errs
}

// DrainTotal is the longest a drain takes from SIGTERM to exit:
// agent.shutdown_timeout + DrainStopBound + http.shutdown_grace. It must be
// less than drain.stop_timeout.
func (c *Config) DrainTotal(reported KillGraces) time.Duration {
	return c.Agent.ShutdownTimeout.Std() + c.DrainStopBound(reported) + c.HTTP.ShutdownGrace.Std()
}

// checkDrainFitsStop requires the whole drain to end inside
// drain.stop_timeout, the container's stop timeout.
func (c *Config) checkDrainFitsStop(reported KillGraces) []error {
	a, stop := c.Agent, c.Drain.StopTimeout
	if stop <= 0 {
		return nil // checkPositiveDurations reports it
	}
	if a.ShutdownTimeout >= stop {
		return one("agent.shutdown_timeout (%s) must be less than drain.stop_timeout (%s): the container runtime kills the agent %s after SIGTERM; shutdown_timeout must leave time to hand off and exit (default 100s with stop_timeout 120s)",
			a.ShutdownTimeout, stop, stop)
	}
	bound := c.DrainStopBound(reported)
	if total := Duration(c.DrainTotal(reported)); total >= stop {
		return one("agent.shutdown_timeout (%s) + %s to stop the last jobs (the longest kill_grace, %s, + 2s, at least 12s) + http.shutdown_grace (%s) = %s must be less than drain.stop_timeout (%s, the container's stopTimeout), or the agent is killed mid-drain; lower one of them, or raise the task definition's stopTimeout and drain.stop_timeout with it (at most 120s on Fargate)",
			a.ShutdownTimeout, bound, c.LongestKillGrace(reported), c.HTTP.ShutdownGrace, total, stop)
	}
	return nil
}

// secs writes a whole number of seconds as "120s" (easier to add up in an
// error message than "2m0s"), anything else as time.Duration does.
func secs(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
