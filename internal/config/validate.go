package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var (
	commandNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	// Plugin names become file names (tether-plugin-<name>): no dots or slashes.
	pluginNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envNameRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$|^\*$`)
	tokenNameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$`)
)

// ValidCommandName reports whether name may name a command.
func ValidCommandName(name string) bool { return commandNameRe.MatchString(name) }

// ValidPluginName reports whether name may name a plugin.
func ValidPluginName(name string) bool { return pluginNameRe.MatchString(name) }

// Validate checks every value and the relations between the timing values.
// All problems are reported, joined; each names the key and how to fix it.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch c.Drain.Handoff {
	case HandoffImmediate, HandoffDeadline, HandoffNever:
	default:
		add("drain.handoff: must be %q, %q or %q, got %q", HandoffImmediate, HandoffDeadline, HandoffNever, c.Drain.Handoff)
	}
	for _, fe := range append(c.Defaults.Set().Partial().Check(), c.Defaults.Set().Relations()...) {
		add("defaults.%s (env TETHER_DEFAULT_%s): %s", fe.Field, strings.ToUpper(fe.Field), fe.Msg)
	}
	a := c.Agent
	if a.Capacity < 1 {
		add("agent.capacity: must be at least 1, got %d", a.Capacity)
	}
	// The work pool claims, runs the janitor and writes at once; fewer than
	// 3 would serialize them behind each other.
	if c.DatabaseMaxConns < 3 || c.DatabaseMaxConns > 1000 {
		add("database_max_conns (env TETHER_DATABASE_MAX_CONNS): must be from 3 to 1000, got %d", c.DatabaseMaxConns)
	}
	if c.HTTP.DatabaseMaxConns < 1 || c.HTTP.DatabaseMaxConns > 1000 {
		add("http.database_max_conns (env TETHER_HTTP_DATABASE_MAX_CONNS): must be from 1 to 1000, got %d", c.HTTP.DatabaseMaxConns)
	}
	for _, d := range []struct {
		key string
		v   Duration
	}{
		{"agent.poll_interval", a.PollInterval},
		{"agent.keepalive", a.Keepalive},
		{"agent.stale_job", a.StaleJob},
		{"agent.offline_after", a.OfflineAfter},
		{"agent.dead_after", a.DeadAfter},
		{"agent.clean_interval", a.CleanInterval},
		{"agent.awol_timeout", a.AWOLTimeout},
		{"agent.agent_retention", a.AgentRetention},
		{"logs.flush_interval", c.Logs.FlushInterval},
		{"database_connect_timeout", c.DatabaseConnectTimeout},
		{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout},
		{"http.read_timeout", c.HTTP.ReadTimeout},
		{"http.write_timeout", c.HTTP.WriteTimeout},
		{"http.idle_timeout", c.HTTP.IdleTimeout},
	} {
		if d.v <= 0 {
			add("%s: must be a positive duration such as \"5s\", got %s", d.key, d.v)
		}
	}
	for _, d := range []struct {
		key string
		v   Duration
	}{
		{"agent.shutdown_timeout", a.ShutdownTimeout},
		{"http.shutdown_grace", c.HTTP.ShutdownGrace},
	} {
		if d.v < 0 {
			add("%s: must not be negative, got %s", d.key, d.v)
		}
	}
	// The relations only mean something between positive values.
	if a.Keepalive > 0 && a.StaleJob > 0 {
		if a.Keepalive > a.StaleJob/4 {
			add("agent.keepalive (%s) must be at most agent.stale_job/4 (%s): an agent stops its jobs itself after stale_job - 2×keepalive without a heartbeat, which must leave room for missed beats; lower keepalive or raise stale_job",
				a.Keepalive, a.StaleJob/4)
		}
		if a.OfflineAfter > 0 && a.OfflineAfter < 2*a.Keepalive {
			add("agent.offline_after (%s) must be at least 2×agent.keepalive (2×%s = %s): one late heartbeat must not requeue an agent's accepted jobs; raise offline_after (default 3×keepalive) or lower keepalive",
				secs(a.OfflineAfter.Std()), secs(a.Keepalive.Std()), secs(2*a.Keepalive.Std()))
		}
		if a.DeadAfter > 0 && a.DeadAfter < 2*a.Keepalive {
			add("agent.dead_after (%s) must be at least 2×agent.keepalive (2×%s = %s): an agent whose name lock was lost (a database restart) re-takes it and heartbeats within a keepalive, and must not be taken for dead meanwhile; raise dead_after (default 2×keepalive) or lower keepalive",
				secs(a.DeadAfter.Std()), secs(a.Keepalive.Std()), secs(2*a.Keepalive.Std()))
		}
		if a.DeadAfter >= a.StaleJob {
			add("agent.dead_after (%s) must be less than agent.stale_job (%s): it is the early path; lower dead_after (default 2×keepalive)",
				a.DeadAfter, a.StaleJob)
		}
		if a.OfflineAfter >= a.StaleJob {
			add("agent.offline_after (%s) must be less than agent.stale_job (%s): accepted jobs of a silent agent are requeued before its running jobs are released; lower offline_after (default 3×keepalive) or raise stale_job",
				a.OfflineAfter, a.StaleJob)
		}
		if a.AWOLTimeout > 0 && a.AWOLTimeout < a.StaleJob {
			add("agent.awol_timeout (%s) must be at least agent.stale_job (%s): a released job needs time to be resumed; raise awol_timeout",
				a.AWOLTimeout, a.StaleJob)
		}
		if a.CleanInterval > a.StaleJob {
			add("agent.clean_interval (%s) must be at most agent.stale_job (%s): the janitor must look at least once per stale_job; lower clean_interval",
				a.CleanInterval, a.StaleJob)
		}
	}
	if a.CleanupTimeout < 0 {
		add("agent.cleanup_timeout: must be a positive duration such as \"1m\" (or 0 for the default: the smaller of %s and stale_job/2), got %s",
			secs(DefaultCleanupTimeout), a.CleanupTimeout)
	} else if a.CleanupTimeout > 0 && a.StaleJob > 0 && a.CleanupTimeout >= a.StaleJob {
		add("agent.cleanup_timeout (%s) must be less than agent.stale_job (%s): a Cleanup call started at an agent's last heartbeat must end before the janitor may act on its jobs; lower cleanup_timeout (unset: the smaller of %s and stale_job/2 = %s) or raise stale_job",
			secs(a.CleanupTimeout.Std()), secs(a.StaleJob.Std()), secs(DefaultCleanupTimeout), secs(min(DefaultCleanupTimeout, a.StaleJob.Std()/2)))
	}
	grace, graceErrs := c.killGraces()
	errs = append(errs, graceErrs...)
	if a.Keepalive > 0 && a.StaleJob > 0 && len(graceErrs) == 0 {
		k, st := a.Keepalive.Std(), a.StaleJob.Std()
		if fence := c.SelfFenceAfter(); fence < 2*k {
			add("agent.stale_job (%s) − 2×agent.keepalive (%s) − longest kill_grace (%s) = %s must be at least 2×keepalive (%s): an agent without a successful heartbeat stops its own jobs at that point, so that every plugin has its kill_grace and one more keepalive to stop local work before the janitor may act at stale_job, and one missed heartbeat must never fence it; raise agent.stale_job to at least 4×keepalive + kill_grace = %s, or lower keepalive or the kill_grace",
				secs(st), secs(2*k), grace.describe(), secs(fence), secs(2*k), secs(4*k+grace.d))
		}
	}
	if a.ShutdownTimeout >= Duration(ECSStopTimeout) {
		add("agent.shutdown_timeout (%s) must be less than %s: ECS stops the task %s after SIGTERM (stopTimeout); shutdown_timeout must leave time to hand off and exit (default 100s)",
			a.ShutdownTimeout, ECSStopTimeout, ECSStopTimeout)
	} else if total := a.ShutdownTimeout + Duration(c.DrainStopBound()) + c.HTTP.ShutdownGrace; total >= Duration(ECSStopTimeout) {
		add("agent.shutdown_timeout (%s) + %s to stop the last jobs (the longest kill_grace, %s, + 2s, at least 12s) + http.shutdown_grace (%s) = %s must be less than ECS's %s stopTimeout, or ECS kills the agent mid-drain; lower one of them",
			a.ShutdownTimeout, c.DrainStopBound(), c.LongestKillGrace(), c.HTTP.ShutdownGrace, total, ECSStopTimeout)
	}

	if c.DatabaseURL != "" {
		if err := checkDatabaseURL(c.DatabaseURL); err != nil {
			add("database_url (env DATABASE_URL): %v", err)
		}
	}
	if c.DatabaseDirectURL != "" {
		if err := checkDatabaseURL(c.DatabaseDirectURL); err != nil {
			add("database_direct_url (env TETHER_DATABASE_DIRECT_URL): %v", err)
		}
	}
	if c.HTTP.Listen == "" {
		add("http.listen: must not be empty; use an address such as \":9090\"")
	} else if err := checkListen(c.HTTP.Listen); err != nil {
		add("http.listen (env TETHER_HTTP_LISTEN): %v", err)
	}
	for i, h := range c.HTTP.AllowedHosts {
		if err := CheckAllowedHost(h); err != nil {
			add("http.allowed_hosts[%d] (env TETHER_HTTP_ALLOWED_HOSTS): %v", i, err)
		}
	}
	if c.HTTP.MaxBodyBytes < 1 {
		add("http.max_body_bytes: must be at least 1, got %d", c.HTTP.MaxBodyBytes)
	}
	names := map[string]bool{}
	secrets := map[string]bool{}
	for i, t := range c.HTTP.Tokens {
		key := fmt.Sprintf("http.tokens[%d]", i)
		if !tokenNameRe.MatchString(t.Name) {
			add("%s.name: %q must be 1-100 letters, digits or _ . @ - (it is recorded as the submitter)", key, t.Name)
		}
		if names[t.Name] {
			add("%s.name: %q is used by another token; names must be unique", key, t.Name)
		}
		names[t.Name] = true
		if len(t.Token) < 16 {
			add("%s.token: must be at least 16 characters (generate one with `openssl rand -hex 32`)", key)
		}
		if secrets[t.Token] {
			add("%s.token: the same token is listed twice; give each name its own token", key)
		}
		secrets[t.Token] = true
	}
	if c.Logs.MaxBytesPerStream < 1 {
		add("logs.max_bytes_per_stream: must be at least 1, got %d", c.Logs.MaxBytesPerStream)
	}

	for _, name := range sortedKeys(c.Plugins) {
		p := c.Plugins[name]
		key := "plugins." + name
		if !ValidPluginName(name) {
			add("%s: plugin names must match %s (the binary is tether-plugin-<name>)", key, pluginNameRe)
		}
		if p.SHA256 != "" {
			if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 {
				add("%s.sha256: must be 64 hex digits (sha256sum of the binary)", key)
			}
		}
		for i, e := range p.PassEnv {
			if err := CheckPassEnv(e); err != nil {
				add("%s.pass_env[%d]: %v", key, i, err)
			}
		}
		for k := range p.Env {
			if strings.ContainsAny(k, "=\x00") || k == "" {
				add("%s.env: %q is not a valid variable name", key, k)
			}
		}
		if _, err := json.Marshal(p.Config); err != nil {
			add("%s.config: cannot be passed to the plugin as JSON (use string keys only): %v", key, err)
		}
	}
	for _, name := range c.CommandNames() {
		cmd := c.Commands[name]
		key := "commands." + name
		if !ValidCommandName(name) {
			add("%s: command names must match %s", key, commandNameRe)
		}
		switch {
		case cmd.Plugin == "":
			add("%s.plugin: required; name the plugin that runs this command (e.g. shell)", key)
		case !ValidPluginName(cmd.Plugin):
			add("%s.plugin: %q is not a valid plugin name; plugin names must match %s", key, cmd.Plugin, pluginNameRe)
		}
		if _, err := json.Marshal(cmd.Context); err != nil {
			add("%s.context: cannot be stored as JSON (use string keys only): %v", key, err)
		}
		errs = append(errs, cmd.Limits.validate(key+".limits", c.Defaults)...)
	}
	return errors.Join(errs...)
}

// checkListen says why addr is not a host:port to listen on, or returns nil.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsAny(host, "/ \t") {
		return fmt.Errorf("%q is not host:port; use an address such as \":9090\" or \"127.0.0.1:9090\" (no scheme, no path)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 || !wholeNumberRe.MatchString(port) {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// hostNameRe is a DNS name or IPv4 literal: letters, digits, - _ and dots.
var hostNameRe = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$`)

// CheckAllowedHost says why h may not be an http.allowed_hosts entry, or
// returns nil. An entry is "*" (any host), a name, or a name:port as a Host
// header carries it; an IPv6 literal is written in brackets.
func CheckAllowedHost(h string) error {
	const want = `want a host name such as "tether.example.com", a name:port such as "tether.example.com:9090", or "*" alone for any host`
	switch {
	case h == "*":
		return nil
	case h == "":
		return fmt.Errorf("empty; %s", want)
	case strings.Contains(h, "://"):
		return fmt.Errorf("%q has a scheme; %s", h, want)
	case strings.ContainsAny(h, "/?#"):
		return fmt.Errorf("%q has a path; %s", h, want)
	case strings.ContainsFunc(h, unicode.IsSpace):
		return fmt.Errorf("%q contains a space; %s (separate entries with commas in TETHER_HTTP_ALLOWED_HOSTS)", h, want)
	case strings.Contains(h, "*"):
		return fmt.Errorf("%q: * matches any host only alone, not as part of a name; %s", h, want)
	case strings.Contains(h, "@"):
		return fmt.Errorf("%q has user info; %s", h, want)
	}
	host := h
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		var port string
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			if !strings.HasSuffix(h, "]") {
				return fmt.Errorf("%q is not a name or name:port; %s", h, want)
			}
			host, port = strings.Trim(h, "[]"), ""
		}
		if port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || !wholeNumberRe.MatchString(port) {
				return fmt.Errorf("%q: the port must be a number from 1 to 65535", h)
			}
		}
		if strings.HasPrefix(h, "[") {
			if net.ParseIP(host) == nil {
				return fmt.Errorf("%q: %q in brackets is not an IPv6 address", h, host)
			}
			return nil
		}
	}
	if net.ParseIP(host) != nil {
		return nil // a bare IPv6 literal
	}
	if !hostNameRe.MatchString(host) || len(host) > 253 {
		return fmt.Errorf("%q is not a host name (letters, digits, - and dots); %s", h, want)
	}
	return nil
}

// validate checks a command's limits: no negative lever, no maximum inside
// the maximum, the command's own resolved values within its maxima and
// consistent. key is "commands.<name>.limits".
func (l Limits) validate(key string, defaults Defaults) []error {
	var errs []error
	for _, fe := range l.Partial().Check() {
		errs = append(errs, fmt.Errorf("%s.%w", key, fe))
	}
	if l.Max != nil {
		if l.Max.Max != nil {
			errs = append(errs, fmt.Errorf("%s.max.max: a maximum has no maximum; remove it", key))
		}
		for _, fe := range l.Max.Partial().Check() {
			errs = append(errs, fmt.Errorf("%s.max.%w", key, fe))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	resolved := defaults.Set().Apply(l.Partial())
	for _, fe := range resolved.Partial().Within(l.MaxPartial()) {
		errs = append(errs, fmt.Errorf("%s.%s: the command's own value (from the command or defaults) must be within limits.max: %s", key, fe.Field, fe.Msg))
	}
	for _, fe := range resolved.Relations() {
		errs = append(errs, fmt.Errorf("%s.%w", key, fe))
	}
	return errs
}
