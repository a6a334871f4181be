package config

import (
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
)

const redacted = "REDACTED"

var dsnPasswordRe = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactURL hides the password of a database URL or keyword/value string.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); u.User != nil && has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", redacted)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return dsnPasswordRe.ReplaceAllString(s, "${1}"+redacted)
}

// Redacted returns a copy that is safe to log or print: the database
// password, API tokens and plugin env values are replaced.
func (c *Config) Redacted() *Config {
	r := *c
	r.DatabaseURL = RedactURL(c.DatabaseURL)
	r.HTTP.Tokens = make([]Token, len(c.HTTP.Tokens))
	for i, t := range c.HTTP.Tokens {
		r.HTTP.Tokens[i] = Token{Name: t.Name, Token: redacted}
	}
	r.Plugins = make(map[string]Plugin, len(c.Plugins))
	for name, p := range c.Plugins {
		env := make(map[string]string, len(p.Env))
		for k := range p.Env {
			env[k] = redacted
		}
		p.Env = env
		p.PassEnv = slices.Clone(p.PassEnv)
		r.Plugins[name] = p
	}
	r.Commands = maps.Clone(c.Commands)
	return &r
}

// LogValue makes slog print a redacted summary.
func (c *Config) LogValue() slog.Value {
	r := c.Redacted()
	tokenNames := make([]string, len(r.HTTP.Tokens))
	for i, t := range r.HTTP.Tokens {
		tokenNames[i] = t.Name
	}
	return slog.GroupValue(
		slog.String("database_url", r.DatabaseURL),
		slog.String("agent.name", r.Agent.Name),
		slog.Int("agent.capacity", r.Agent.Capacity),
		slog.String("agent.poll_interval", r.Agent.PollInterval.String()),
		slog.String("agent.keepalive", r.Agent.Keepalive.String()),
		slog.String("agent.stale_job", r.Agent.StaleJob.String()),
		slog.String("agent.offline_after", r.Agent.OfflineAfter.String()),
		slog.String("agent.clean_interval", r.Agent.CleanInterval.String()),
		slog.String("agent.awol_timeout", r.Agent.AWOLTimeout.String()),
		slog.String("agent.shutdown_timeout", r.Agent.ShutdownTimeout.String()),
		slog.String("http.listen", r.HTTP.Listen),
		slog.Any("http.tokens", tokenNames),
		slog.String("plugin_dir", r.PluginDir),
		slog.Any("plugins", sortedKeys(r.Plugins)),
		slog.Any("commands", r.CommandNames()),
	)
}
