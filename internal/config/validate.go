package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/tetherjobs/tether/internal/limits"
)

var (
	commandNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	// Plugin names become file names (tether-plugin-<name>): no dots or slashes.
	pluginNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envNameRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$|^\*$`)
	tokenNameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$`)
	// A Secrets Manager secret's name or ARN (the API reference's SecretId).
	secretIDRe = regexp.MustCompile(`^(arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:)?[A-Za-z0-9/_+=.@-]{1,512}$`)
	// A pinned binary's sha256sum, as hex.DecodeString reads it.
	sha256Re = regexp.MustCompile(`^[0-9A-Fa-f]{64}$`)
)

// ValidCommandName reports whether name may name a command.
func ValidCommandName(name string) bool { return commandNameRe.MatchString(name) }

// ValidPluginName reports whether name may name a plugin.
func ValidPluginName(name string) bool { return pluginNameRe.MatchString(name) }

// Validate checks every value and the relations between the timing values.
// All problems are reported, joined. Each names the key and how to fix it.
func (c *Config) Validate() error {
	var errs []error
	for _, check := range c.rules() {
		errs = append(errs, check()...)
	}
	return errors.Join(errs...)
}

// rules are Validate's checks in the order their problems are reported.
// Each checks one key, or one relation between keys, and returns what it
// found.
func (c *Config) rules() []func() []error {
	return []func() []error{
		c.checkHandoff,
		c.checkDefaults,
		c.checkCapacity,
		c.checkPoolSizes,
		c.checkPositiveDurations,
		c.checkNonNegativeDurations,
		c.checkKeepaliveRelations,
		c.checkStaleJobRelations,
		c.checkCleanupTimeout,
		func() []error { return c.checkSelfFence(nil) },
		func() []error { return c.checkDrainFitsStop(nil) },
		c.checkDatabaseURLs,
		c.checkHTTPListen,
		c.checkAllowedHosts,
		c.checkMaxBodyBytes,
		c.checkTokens,
		c.checkLogCap,
		c.checkPlugins,
		c.checkCommands,
	}
}

// problems collects what one rule finds.
type problems []error

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf(format, args...))
}

// one is a rule's single problem, as a list.
func one(format string, args ...any) []error {
	return []error{fmt.Errorf(format, args...)}
}

func (c *Config) checkHandoff() []error {
	switch c.Drain.Handoff {
	case HandoffImmediate, HandoffDeadline, HandoffNever:
		return nil
	}
	return one("drain.handoff: must be %q, %q or %q, got %q", HandoffImmediate, HandoffDeadline, HandoffNever, c.Drain.Handoff)
}

func (c *Config) checkDefaults() []error {
	var p problems
	for _, fe := range append(c.Defaults.Set().Partial().Check(), c.Defaults.Set().Relations()...) {
		p.add("defaults.%s (env TETHER_DEFAULT_%s): %s", fe.Field, strings.ToUpper(fe.Field), fe.Msg)
	}
	return p
}

// atLeastOne is the problem of a count or size below 1, if it is.
func atLeastOne[N int | int64](key string, v N) []error {
	var p problems
	if v < 1 {
		p.add("%s: must be at least 1, got %d", key, v)
	}
	return p
}

func (c *Config) checkCapacity() []error { return atLeastOne("agent.capacity", c.Agent.Capacity) }

func (c *Config) checkPoolSizes() []error {
	var p problems
	// The work pool claims, runs the janitor and writes at once. Fewer than
	// 3 would serialize them behind each other.
	for _, pool := range []struct {
		key      string
		v, least int
	}{
		{"database_max_conns (env TETHER_DATABASE_MAX_CONNS)", c.DatabaseMaxConns, 3},
		{"http.database_max_conns (env TETHER_HTTP_DATABASE_MAX_CONNS)", c.HTTP.DatabaseMaxConns, 1},
	} {
		if pool.v < pool.least || pool.v > 1000 {
			p.add("%s: must be from %d to 1000, got %d", pool.key, pool.least, pool.v)
		}
	}
	return p
}

// durationKey is a duration setting and its key.
type durationKey struct {
	key string
	v   Duration
}

func (c *Config) checkPositiveDurations() []error {
	a := c.Agent
	var p problems
	for _, d := range []durationKey{
		{"agent.poll_interval", a.PollInterval},
		{"agent.keepalive", a.Keepalive},
		{"agent.stale_job", a.StaleJob},
		{"agent.offline_after", a.OfflineAfter},
		{"agent.dead_after", a.DeadAfter},
		{"agent.clean_interval", a.CleanInterval},
		{"agent.awol_timeout", a.AWOLTimeout},
		{"agent.agent_retention", a.AgentRetention},
		{"agent.health_interval", a.HealthInterval},
		{"logs.flush_interval", c.Logs.FlushInterval},
		{"database_connect_timeout", c.DatabaseConnectTimeout},
		{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout},
		{"http.read_timeout", c.HTTP.ReadTimeout},
		{"http.write_timeout", c.HTTP.WriteTimeout},
		{"http.idle_timeout", c.HTTP.IdleTimeout},
		{"drain.stop_timeout", c.Drain.StopTimeout},
	} {
		if d.v <= 0 {
			p.add("%s: must be a positive duration such as \"5s\", got %s", d.key, d.v)
		}
	}
	return p
}

func (c *Config) checkNonNegativeDurations() []error {
	keys := []durationKey{
		{"agent.shutdown_timeout", c.Agent.ShutdownTimeout},
		{"http.shutdown_grace", c.HTTP.ShutdownGrace},
	}
	for _, name := range sortedKeys(c.Plugins) {
		keys = append(keys, durationKey{"plugins." + name + ".max_kill_grace", c.Plugins[name].MaxKillGrace})
	}
	var p problems
	for _, d := range keys {
		if d.v < 0 {
			p.add("%s: must not be negative, got %s", d.key, d.v)
		}
	}
	return p
}

// timingsSet reports whether keepalive and stale_job are both positive. The
// relations only mean something between positive values.
func (a Agent) timingsSet() bool { return a.Keepalive > 0 && a.StaleJob > 0 }

// checkKeepaliveRelations checks the keys that must leave room for missed
// heartbeats.
func (c *Config) checkKeepaliveRelations() []error {
	a := c.Agent
	if !a.timingsSet() {
		return nil
	}
	var p problems
	if a.Keepalive > a.StaleJob/4 {
		p.add("agent.keepalive (%s) must be at most agent.stale_job/4 (%s): an agent stops its jobs itself after stale_job - 2×keepalive without a heartbeat, which must leave room for missed beats; lower keepalive or raise stale_job",
			a.Keepalive, a.StaleJob/4)
	}
	if a.OfflineAfter > 0 && a.OfflineAfter < 2*a.Keepalive {
		p.add("agent.offline_after (%s) must be at least 2×agent.keepalive (2×%s = %s): one late heartbeat must not requeue an agent's accepted jobs; raise offline_after (default 3×keepalive) or lower keepalive",
			secs(a.OfflineAfter.Std()), secs(a.Keepalive.Std()), secs(2*a.Keepalive.Std()))
	}
	if a.DeadAfter > 0 && a.DeadAfter < 2*a.Keepalive {
		p.add("agent.dead_after (%s) must be at least 2×agent.keepalive (2×%s = %s): an agent whose name lock was lost (a database restart) re-takes it and heartbeats within a keepalive, and must not be taken for dead meanwhile. Other agents judge this one by the larger of their dead_after and its own, which it announces, so agents with other keepalives may share the database; raise dead_after (default 2×keepalive) or lower keepalive",
			secs(a.DeadAfter.Std()), secs(a.Keepalive.Std()), secs(2*a.Keepalive.Std()))
	}
	return p
}

// checkStaleJobRelations checks the keys that must come before, or after,
// stale_job.
func (c *Config) checkStaleJobRelations() []error {
	a := c.Agent
	if !a.timingsSet() {
		return nil
	}
	var p problems
	if a.DeadAfter >= a.StaleJob {
		p.add("agent.dead_after (%s) must be less than agent.stale_job (%s): it is the early path; lower dead_after (default 2×keepalive)",
			a.DeadAfter, a.StaleJob)
	}
	if a.OfflineAfter >= a.StaleJob {
		p.add("agent.offline_after (%s) must be less than agent.stale_job (%s): accepted jobs of a silent agent are requeued before its running jobs are released; lower offline_after (default 3×keepalive) or raise stale_job",
			a.OfflineAfter, a.StaleJob)
	}
	if a.AWOLTimeout > 0 && a.AWOLTimeout < a.StaleJob {
		p.add("agent.awol_timeout (%s) must be at least agent.stale_job (%s): a released job needs time to be resumed; raise awol_timeout",
			a.AWOLTimeout, a.StaleJob)
	}
	if a.CleanInterval > a.StaleJob {
		p.add("agent.clean_interval (%s) must be at most agent.stale_job (%s): the janitor must look at least once per stale_job; lower clean_interval",
			a.CleanInterval, a.StaleJob)
	}
	return p
}

func (c *Config) checkCleanupTimeout() []error {
	a := c.Agent
	switch {
	case a.CleanupTimeout < 0:
		return one("agent.cleanup_timeout: must be a positive duration such as \"1m\" (or 0 for the default: the smaller of %s and stale_job/2), got %s",
			secs(DefaultCleanupTimeout), a.CleanupTimeout)
	case a.StaleJob > 0 && a.CleanupTimeout >= a.StaleJob:
		return one("agent.cleanup_timeout (%s) must be less than agent.stale_job (%s): a Cleanup call started at an agent's last heartbeat must end before the janitor may act on its jobs; lower cleanup_timeout (unset: the smaller of %s and stale_job/2 = %s) or raise stale_job",
			secs(a.CleanupTimeout.Std()), secs(a.StaleJob.Std()), secs(DefaultCleanupTimeout), secs(min(DefaultCleanupTimeout, a.StaleJob.Std()/2)))
	}
	return nil
}

func (c *Config) checkDatabaseURLs() []error {
	var p problems
	for _, u := range []struct{ key, url string }{
		{"database_url (env DATABASE_URL)", c.DatabaseURL},
		{"database_direct_url (env TETHER_DATABASE_DIRECT_URL)", c.DatabaseDirectURL},
	} {
		if u.url != "" {
			if err := checkDatabaseURL(u.url); err != nil {
				p.add("%s: %v", u.key, err)
			}
		}
	}
	if c.DatabaseSecret != "" && !secretIDRe.MatchString(c.DatabaseSecret) {
		p.add("database_secret (env TETHER_DATABASE_SECRET): %q is neither a Secrets Manager secret name (up to 512 of A-Za-z0-9/_+=.@-) nor its ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME)", c.DatabaseSecret)
	}
	return p
}

func (c *Config) checkHTTPListen() []error {
	if c.HTTP.Listen == "" {
		return one("http.listen: must not be empty; use an address such as \":9090\"")
	}
	if err := checkListen(c.HTTP.Listen); err != nil {
		return one("http.listen (env TETHER_HTTP_LISTEN): %v", err)
	}
	return nil
}

func (c *Config) checkAllowedHosts() []error {
	var p problems
	for i, h := range c.HTTP.AllowedHosts {
		if err := CheckAllowedHost(h); err != nil {
			p.add("http.allowed_hosts[%d] (env TETHER_HTTP_ALLOWED_HOSTS): %v", i, err)
		}
	}
	return p
}

func (c *Config) checkMaxBodyBytes() []error {
	return atLeastOne("http.max_body_bytes", c.HTTP.MaxBodyBytes)
}

// checkTokens requires every API token to have a well-formed, unique name
// and a long enough, unique secret.
func (c *Config) checkTokens() []error {
	var p problems
	names := map[string]bool{}
	secrets := map[string]bool{}
	for i, t := range c.HTTP.Tokens {
		key := fmt.Sprintf("http.tokens[%d]", i)
		if !tokenNameRe.MatchString(t.Name) {
			p.add("%s.name: %q must be 1-100 letters, digits or _ . @ - (it is recorded as the submitter)", key, t.Name)
		}
		if names[t.Name] {
			p.add("%s.name: %q is used by another token; names must be unique", key, t.Name)
		}
		names[t.Name] = true
		if len(t.Token) < 16 {
			p.add("%s.token: must be at least 16 characters (generate one with `openssl rand -hex 32`)", key)
		}
		if secrets[t.Token] {
			p.add("%s.token: the same token is listed twice; give each name its own token", key)
		}
		secrets[t.Token] = true
	}
	return p
}

func (c *Config) checkLogCap() []error {
	return atLeastOne("logs.max_bytes_per_stream", c.Logs.MaxBytesPerStream)
}

func (c *Config) checkPlugins() []error {
	var errs []error
	for _, name := range sortedKeys(c.Plugins) {
		errs = append(errs, c.Plugins[name].check("plugins."+name, name)...)
	}
	return errs
}

// check checks one plugin's section. Key is "plugins.<name>".
func (pl Plugin) check(key, name string) []error {
	var p problems
	if !ValidPluginName(name) {
		p.add("%s: plugin names must match %s (the binary is tether-plugin-<name>)", key, pluginNameRe)
	}
	if pl.SHA256 != "" && !sha256Re.MatchString(pl.SHA256) {
		p.add("%s.sha256: must be 64 hex digits (sha256sum of the binary)", key)
	}
	for i, e := range pl.PassEnv {
		if err := CheckPassEnv(e); err != nil {
			p.add("%s.pass_env[%d]: %v", key, i, err)
		}
	}
	p = append(p, checkEnvNames(key, pl.Env)...)
	if _, err := json.Marshal(pl.Config); err != nil {
		p.add("%s.config: cannot be passed to the plugin as JSON (use string keys only): %v", key, err)
	}
	return p
}

// checkEnvNames requires the names of a plugin's env (key
// "plugins.<name>") to be variable names.
func checkEnvNames(key string, env map[string]string) []error {
	var p problems
	for _, k := range sortedKeys(env) { // sorted, so the problems come in one order
		if strings.ContainsAny(k, "=\x00") || k == "" {
			p.add("%s.env: %q is not a valid variable name", key, k)
		}
	}
	return p
}

func (c *Config) checkCommands() []error {
	var errs []error
	for _, name := range c.CommandNames() {
		errs = append(errs, c.Commands[name].check("commands."+name, name, c.Defaults)...)
	}
	return errs
}

// check checks one command. Key is "commands.<name>".
func (cmd Command) check(key, name string, defaults Defaults) []error {
	var p problems
	if !ValidCommandName(name) {
		p.add("%s: command names must match %s", key, commandNameRe)
	}
	switch {
	case cmd.Plugin == "":
		p.add("%s.plugin: required; name the plugin that runs this command (e.g. shell)", key)
	case !ValidPluginName(cmd.Plugin):
		p.add("%s.plugin: %q is not a valid plugin name; plugin names must match %s", key, cmd.Plugin, pluginNameRe)
	}
	if _, err := json.Marshal(cmd.Context); err != nil {
		p.add("%s.context: cannot be stored as JSON (use string keys only): %v", key, err)
	}
	return append(p, cmd.Limits.validate(key+".limits", defaults)...)
}

// checkListen says why addr is not a host:port to listen on, or returns nil.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsAny(host, "/ \t") {
		return fmt.Errorf("%q is not host:port; use an address such as \":9090\" or \"127.0.0.1:9090\" (no scheme, no path)", addr)
	}
	if !validPort(port, 0) {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// validPort reports whether port is a whole number in decimal digits from
// lowest to 65535.
func validPort(port string, lowest int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= lowest && n <= 65535 && wholeNumberRe.MatchString(port)
}

// hostNameRe is a DNS name or IPv4 literal: letters, digits, - _ and dots.
var hostNameRe = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$`)

// CheckAllowedHost says why h may not be an http.allowed_hosts entry, or
// returns nil. An entry is "*" (any host), a name, or a name:port as a Host
// header carries it. An IPv6 literal is written in brackets.
func CheckAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	if err := allowedHostShape(h); err != nil {
		return err
	}
	if strings.HasPrefix(h, "[") {
		_, err := allowedHostPort(h) // it checks the IPv6 literal
		return err
	}
	host := h
	if strings.Count(h, ":") == 1 {
		var err error
		if host, err = allowedHostPort(h); err != nil {
			return err
		}
	}
	if net.ParseIP(host) != nil {
		return nil // a bare IPv6 literal
	}
	if !hostNameRe.MatchString(host) || len(host) > 253 {
		return fmt.Errorf("%q is not a host name (letters, digits, - and dots); %s", h, allowedHostWant)
	}
	return nil
}

const allowedHostWant = `want a host name such as "tether.example.com", a name:port such as "tether.example.com:9090", or "*" alone for any host`

// allowedHostShape says why h cannot be a Host header value at all (a
// URL, a pattern, user info), or returns nil.
func allowedHostShape(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("empty; %s", allowedHostWant)
	case strings.Contains(h, "://"):
		return fmt.Errorf("%q has a scheme; %s", h, allowedHostWant)
	case strings.ContainsAny(h, "/?#"):
		return fmt.Errorf("%q has a path; %s", h, allowedHostWant)
	case strings.ContainsFunc(h, unicode.IsSpace):
		return fmt.Errorf("%q contains a space; %s (separate entries with commas in TETHER_HTTP_ALLOWED_HOSTS)", h, allowedHostWant)
	case strings.Contains(h, "*"):
		return fmt.Errorf("%q: * matches any host only alone, not as part of a name; %s", h, allowedHostWant)
	case strings.Contains(h, "@"):
		return fmt.Errorf("%q has user info; %s", h, allowedHostWant)
	}
	return nil
}

// allowedHostPort splits a name:port or a bracketed IPv6 literal (with or
// without a port), checks the port and the literal, and returns the host.
func allowedHostPort(h string) (string, error) {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if !strings.HasSuffix(h, "]") {
			return "", fmt.Errorf("%q is not a name or name:port; %s", h, allowedHostWant)
		}
		host, port = strings.Trim(h, "[]"), ""
	}
	if port != "" && !validPort(port, 1) {
		return "", fmt.Errorf("%q: the port must be a number from 1 to 65535", h)
	}
	if strings.HasPrefix(h, "[") && net.ParseIP(host) == nil {
		return "", fmt.Errorf("%q: %q in brackets is not an IPv6 address", h, host)
	}
	return host, nil
}

// validate checks a command's limits: no negative lever, no maximum inside
// the maximum, the command's own resolved values within its maxima and
// consistent. key is "commands.<name>.limits".
func (l Limits) validate(key string, defaults Defaults) []error {
	errs := fieldErrors(key, l.Partial().Check())
	if l.Max != nil && l.Max.Max != nil {
		errs = append(errs, fmt.Errorf("%s.max.max: a maximum has no maximum; remove it", key))
	}
	errs = append(errs, fieldErrors(key+".max", l.MaxPartial().Check())...)
	if len(errs) > 0 {
		return errs
	}
	resolved := defaults.Set().Apply(l.Partial())
	for _, fe := range resolved.Partial().Within(l.MaxPartial()) {
		errs = append(errs, fmt.Errorf("%s.%s: the command's own value (from the command or defaults) must be within limits.max: %s", key, fe.Field, fe.Msg))
	}
	return append(errs, fieldErrors(key, resolved.Relations())...)
}

// fieldErrors names each lever's problem under key ("commands.x.limits").
func fieldErrors(key string, fes []*limits.FieldError) []error {
	var errs []error
	for _, fe := range fes {
		errs = append(errs, fmt.Errorf("%s.%w", key, fe))
	}
	return errs
}
