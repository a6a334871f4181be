package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/limits"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/internal/jobctx"
)

func noEnv(string) string { return "" }

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tether.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("", noEnv)
	require.NoError(t, err)
	assert.Equal(t, "", cfg.Agent.Name)
	assert.Equal(t, 10, cfg.Agent.Capacity)
	assert.Equal(t, time.Second, cfg.Agent.PollInterval.Std())
	assert.Equal(t, 5*time.Second, cfg.Agent.Keepalive.Std())
	assert.Equal(t, 120*time.Second, cfg.Agent.StaleJob.Std())
	assert.Equal(t, 15*time.Second, cfg.Agent.OfflineAfter.Std(), "offline_after defaults to 3×keepalive")
	assert.Equal(t, 10*time.Second, cfg.Agent.CleanInterval.Std())
	assert.Equal(t, time.Hour, cfg.Agent.AWOLTimeout.Std())
	assert.Equal(t, 100*time.Second, cfg.Agent.ShutdownTimeout.Std())
	assert.Equal(t, 60*time.Second, cfg.Agent.CleanupTimeout.Std(), "cleanup_timeout defaults to the smaller of 2m and stale_job/2")
	assert.Equal(t, time.Duration(0), cfg.LongestKillGrace(nil), "no plugin is configured")
	assert.Equal(t, 110*time.Second, cfg.SelfFenceAfter(nil), "120s − 2×5s − 0")
	assert.Equal(t, ":9090", cfg.HTTP.Listen)
	assert.Equal(t, int64(1<<20), cfg.HTTP.MaxBodyBytes)
	assert.Empty(t, cfg.HTTP.Tokens)
	assert.Equal(t, 5*time.Second, cfg.HTTP.ShutdownGrace.Std())
	assert.Equal(t, int64(10485760), cfg.Logs.MaxBytesPerStream)
	assert.Equal(t, 200*time.Millisecond, cfg.Logs.FlushInterval.Std())
	assert.Equal(t, "", cfg.PluginDir)
	assert.Empty(t, cfg.Commands)
}

const fullYAML = `
database_url: postgres://tether:secret@db:5432/tether
agent:
  name: agent-a
  capacity: 4
  poll_interval: 500ms
  keepalive: 2s
  stale_job: 60s
  clean_interval: 5s
  awol_timeout: 30m
  shutdown_timeout: 90s
http:
  listen: 127.0.0.1:8080
  max_body_bytes: 2048
  shutdown_grace: 3s
  tokens:
    - name: ci
      token: 0123456789abcdef0123
logs:
  max_bytes_per_stream: 1000
  flush_interval: 50ms
plugin_dir: /opt/tether/plugins
plugins:
  shell:
    sha256: "` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `"
    env: {LANG: C.UTF-8}
    pass_env: [PATH, AWS_*]
    config: {grace: 5s, max_kill_grace: 5s, nested: {a: [1, 2]}}
commands:
  hello:
    plugin: shell
    context:
      script: echo hello
      env: {GREETING: hi}
  nightly.report-2:
    plugin: shell
`

func TestParseYAML(t *testing.T) {
	cfg, err := Load(writeConfig(t, fullYAML), noEnv)
	require.NoError(t, err)
	assert.Equal(t, "postgres://tether:secret@db:5432/tether", cfg.DatabaseURL)
	assert.Equal(t, "agent-a", cfg.Agent.Name)
	assert.Equal(t, 4, cfg.Agent.Capacity)
	assert.Equal(t, 500*time.Millisecond, cfg.Agent.PollInterval.Std())
	assert.Equal(t, 2*time.Second, cfg.Agent.Keepalive.Std())
	assert.Equal(t, 6*time.Second, cfg.Agent.OfflineAfter.Std(), "derived from the configured keepalive")
	assert.Equal(t, 30*time.Minute, cfg.Agent.AWOLTimeout.Std())
	assert.Equal(t, 90*time.Second, cfg.Agent.ShutdownTimeout.Std())
	assert.Equal(t, "127.0.0.1:8080", cfg.HTTP.Listen)
	assert.Equal(t, int64(2048), cfg.HTTP.MaxBodyBytes)
	assert.Equal(t, []Token{{Name: "ci", Token: "0123456789abcdef0123"}}, cfg.HTTP.Tokens)
	assert.Equal(t, int64(1000), cfg.Logs.MaxBytesPerStream)
	assert.Equal(t, "/opt/tether/plugins", cfg.PluginDir)
	sh := cfg.Plugins["shell"]
	assert.Equal(t, map[string]string{"LANG": "C.UTF-8"}, sh.Env)
	assert.Equal(t, []string{"PATH", "AWS_*"}, sh.PassEnv)
	pc, err := sh.ConfigJSON()
	require.NoError(t, err)
	assert.JSONEq(t, `{"grace":"5s","max_kill_grace":"5s","nested":{"a":[1,2]}}`, string(pc))
	assert.Equal(t, 5*time.Second, cfg.LongestKillGrace(nil))
	assert.Equal(t, 60*time.Second-4*time.Second-5*time.Second, cfg.SelfFenceAfter(nil))
	assert.Equal(t, []string{"hello", "nightly.report-2"}, cfg.CommandNames())
	ctx, err := cfg.Commands["hello"].ContextJSON()
	require.NoError(t, err)
	assert.JSONEq(t, `{"script":"echo hello","env":{"GREETING":"hi"}}`, string(ctx))
}

func TestEmptyFileGivesDefaults(t *testing.T) {
	cfg, err := Load(writeConfig(t, "# nothing\n"), noEnv)
	require.NoError(t, err)
	want := Default()
	want.fillDerived()
	assert.Equal(t, want, cfg)
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), noEnv)
	require.ErrorContains(t, err, "reading config")
}

func TestUnknownKeysNamed(t *testing.T) {
	_, err := Load(writeConfig(t, `
agent:
  keepaliv: 5s
htp:
  listen: ":1"
commands:
  x:
    plugin: shell
    contxt: {}
`), noEnv)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "agent.keepaliv: unknown key (line 3)")
	assert.Contains(t, msg, "keepalive") // known keys listed
	assert.Contains(t, msg, "htp: unknown key")
	assert.Contains(t, msg, "commands.x.contxt: unknown key")
}

func TestDurationErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"agent:\n  keepalive: 5\n", `agent.keepalive: use a duration string like "5s"`},
		{"agent:\n  awol_timeout: 24hh\n", `agent.awol_timeout: "24hh" is not a duration`},
		{"logs:\n  flush_interval: [1s]\n", `logs.flush_interval: use a duration string`},
	} {
		_, err := Load(writeConfig(t, tc.yaml), noEnv)
		require.Error(t, err, tc.yaml)
		assert.Contains(t, err.Error(), tc.want)
	}
	// "0" is a valid duration (shutdown_timeout may be 0: no waiting).
	cfg, err := Load(writeConfig(t, "agent:\n  shutdown_timeout: 0\n"), noEnv)
	require.NoError(t, err)
	assert.Zero(t, cfg.Agent.ShutdownTimeout)
}

func TestEnvOverrides(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":                     "postgres://env/db",
		"TETHER_AGENT_NAME":                "from-env",
		"TETHER_AGENT_CAPACITY":            "3",
		"TETHER_AGENT_KEEPALIVE":           "1s",
		"TETHER_AGENT_STALE_JOB":           "10s",
		"TETHER_AGENT_CLEAN_INTERVAL":      "2s",
		"TETHER_AGENT_AWOL_TIMEOUT":        "10m",
		"TETHER_HTTP_LISTEN":               ":7000",
		"TETHER_HTTP_MAX_BODY_BYTES":       "4096",
		"TETHER_PLUGIN_DIR":                "/plugins",
		"TETHER_LOGS_MAX_BYTES_PER_STREAM": "123",
		"TETHER_LOGS_FLUSH_INTERVAL":       "1s",
		"TETHER_API_TOKENS":                "alice:aaaaaaaaaaaaaaaa1, bob:bbbbbbbbbbbbbbbb2",
	}
	cfg, err := Load(writeConfig(t, fullYAML), envMap(env))
	require.NoError(t, err)
	assert.Equal(t, "postgres://env/db", cfg.DatabaseURL)
	assert.Equal(t, "from-env", cfg.Agent.Name)
	assert.Equal(t, 3, cfg.Agent.Capacity)
	assert.Equal(t, time.Second, cfg.Agent.Keepalive.Std())
	assert.Equal(t, 3*time.Second, cfg.Agent.OfflineAfter.Std())
	assert.Equal(t, ":7000", cfg.HTTP.Listen)
	assert.Equal(t, int64(4096), cfg.HTTP.MaxBodyBytes)
	assert.Equal(t, "/plugins", cfg.PluginDir)
	assert.Equal(t, int64(123), cfg.Logs.MaxBytesPerStream)
	assert.Equal(t, time.Second, cfg.Logs.FlushInterval.Std())
	assert.Equal(t, []Token{{"alice", "aaaaaaaaaaaaaaaa1"}, {"bob", "bbbbbbbbbbbbbbbb2"}}, cfg.HTTP.Tokens)
	// Untouched keys keep the file's values.
	assert.Equal(t, 90*time.Second, cfg.Agent.ShutdownTimeout.Std())
}

func TestEnvVarNames(t *testing.T) {
	got := map[string]string{}
	for _, e := range EnvVars() {
		got[e.Key] = e.Env
	}
	want := map[string]string{
		"database_url":               "DATABASE_URL",
		"drain.handoff":              "TETHER_DRAIN_HANDOFF",
		"drain.stop_timeout":         "TETHER_DRAIN_STOP_TIMEOUT",
		"database_secret":            "TETHER_DATABASE_SECRET",
		"agent.name":                 "TETHER_AGENT_NAME",
		"agent.capacity":             "TETHER_AGENT_CAPACITY",
		"agent.poll_interval":        "TETHER_AGENT_POLL_INTERVAL",
		"agent.keepalive":            "TETHER_AGENT_KEEPALIVE",
		"agent.stale_job":            "TETHER_AGENT_STALE_JOB",
		"agent.offline_after":        "TETHER_AGENT_OFFLINE_AFTER",
		"agent.clean_interval":       "TETHER_AGENT_CLEAN_INTERVAL",
		"agent.awol_timeout":         "TETHER_AGENT_AWOL_TIMEOUT",
		"agent.shutdown_timeout":     "TETHER_AGENT_SHUTDOWN_TIMEOUT",
		"agent.cleanup_timeout":      "TETHER_AGENT_CLEANUP_TIMEOUT",
		"agent.agent_retention":      "TETHER_AGENT_AGENT_RETENTION",
		"agent.health_interval":      "TETHER_AGENT_HEALTH_INTERVAL",
		"http.listen":                "TETHER_HTTP_LISTEN",
		"http.max_body_bytes":        "TETHER_HTTP_MAX_BODY_BYTES",
		"http.shutdown_grace":        "TETHER_HTTP_SHUTDOWN_GRACE",
		"http.read_header_timeout":   "TETHER_HTTP_READ_HEADER_TIMEOUT",
		"http.read_timeout":          "TETHER_HTTP_READ_TIMEOUT",
		"http.write_timeout":         "TETHER_HTTP_WRITE_TIMEOUT",
		"http.idle_timeout":          "TETHER_HTTP_IDLE_TIMEOUT",
		"http.allowed_hosts":         "TETHER_HTTP_ALLOWED_HOSTS",
		"database_connect_timeout":   "TETHER_DATABASE_CONNECT_TIMEOUT",
		"database_direct_url":        "TETHER_DATABASE_DIRECT_URL",
		"database_max_conns":         "TETHER_DATABASE_MAX_CONNS",
		"http.database_max_conns":    "TETHER_HTTP_DATABASE_MAX_CONNS",
		"agent.dead_after":           "TETHER_AGENT_DEAD_AFTER",
		"http.tokens":                "TETHER_API_TOKENS",
		"logs.max_bytes_per_stream":  "TETHER_LOGS_MAX_BYTES_PER_STREAM",
		"logs.flush_interval":        "TETHER_LOGS_FLUSH_INTERVAL",
		"plugin_dir":                 "TETHER_PLUGIN_DIR",
		"defaults.max_retry":         "TETHER_DEFAULT_MAX_RETRY",
		"defaults.retry_backoff":     "TETHER_DEFAULT_RETRY_BACKOFF",
		"defaults.retry_backoff_max": "TETHER_DEFAULT_RETRY_BACKOFF_MAX",
		"defaults.pending_timeout":   "TETHER_DEFAULT_PENDING_TIMEOUT",
		"defaults.active_timeout":    "TETHER_DEFAULT_ACTIVE_TIMEOUT",
		"defaults.ttl_succeeded":     "TETHER_DEFAULT_TTL_SUCCEEDED",
		"defaults.ttl_failed":        "TETHER_DEFAULT_TTL_FAILED",
	}
	assert.Equal(t, want, got)
}

// Every environment variable is documented.
func TestEnvVarsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, e := range EnvVars() {
		assert.Contains(t, string(doc), "`"+e.Env+"`", "docs/configuration.md does not mention %s", e.Env)
		assert.Contains(t, string(doc), "`"+e.Key+"`", "docs/configuration.md does not mention %s", e.Key)
	}
}

func TestBadEnvValuesNamed(t *testing.T) {
	_, err := Load("", envMap(map[string]string{
		"TETHER_AGENT_CAPACITY":  "ten",
		"TETHER_AGENT_KEEPALIVE": "5",
		"TETHER_AGENT_STALE_JOB": "24hh",
		"TETHER_API_TOKENS":      "justatoken",
	}))
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, `TETHER_AGENT_CAPACITY (overrides agent.capacity): "ten" is not an integer`)
	assert.Contains(t, msg, `TETHER_AGENT_KEEPALIVE (overrides agent.keepalive): "5" is not a duration`)
	assert.Contains(t, msg, `TETHER_AGENT_STALE_JOB (overrides agent.stale_job): "24hh" is not a duration`)
	assert.Contains(t, msg, `TETHER_API_TOKENS: entry 1: want name:token`)
}

func TestValidationRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"capacity", "agent: {capacity: 0}", []string{"agent.capacity: must be at least 1, got 0"}},
		{"negative duration", "agent: {poll_interval: -1s}", []string{"agent.poll_interval: must be a positive duration"}},
		{"negative shutdown", "agent: {shutdown_timeout: -1s}", []string{"agent.shutdown_timeout: must not be negative"}},
		{"negative grace", "http: {shutdown_grace: -1s}", []string{"http.shutdown_grace: must not be negative"}},
		{"zero keepalive", "agent: {keepalive: 0, offline_after: 10s}", []string{"agent.keepalive: must be a positive duration"}},
		{"keepalive vs stale_job", "agent: {keepalive: 31s, offline_after: 60s}", []string{"agent.keepalive (31s) must be at most agent.stale_job/4 (30s)"}},
		{"offline_after vs stale_job", "agent: {offline_after: 120s}", []string{"agent.offline_after (2m0s) must be less than agent.stale_job (2m0s)"}},
		{"awol vs stale_job", "agent: {awol_timeout: 119s}", []string{"agent.awol_timeout (1m59s) must be at least agent.stale_job (2m0s)"}},
		{"clean_interval vs stale_job", "agent: {clean_interval: 121s}", []string{"agent.clean_interval (2m1s) must be at most agent.stale_job (2m0s)"}},
		{"shutdown vs stop_timeout", "agent: {shutdown_timeout: 120s}", []string{"agent.shutdown_timeout (2m0s) must be less than drain.stop_timeout (2m0s): the container runtime kills the agent 2m0s after SIGTERM"}},
		{"zero stop_timeout", "drain: {stop_timeout: 0}", []string{`drain.stop_timeout: must be a positive duration such as "5s", got 0s`}},
		{"listen", `http: {listen: ""}`, []string{"http.listen: must not be empty"}},
		{"body", "http: {max_body_bytes: 0}", []string{"http.max_body_bytes: must be at least 1"}},
		{"log cap", "logs: {max_bytes_per_stream: -5}", []string{"logs.max_bytes_per_stream: must be at least 1"}},
		{"short token", "http: {tokens: [{name: a, token: short}]}", []string{"http.tokens[0].token: must be at least 16 characters"}},
		{"duplicate token name", "http: {tokens: [{name: a, token: aaaaaaaaaaaaaaaa1}, {name: a, token: aaaaaaaaaaaaaaaa2}]}", []string{`http.tokens[1].name: "a" is used by another token`}},
		{"bad command name", "commands: {Bad/Name: {plugin: shell}}", []string{"commands.Bad/Name: command names must match"}},
		{"command without plugin", "commands: {x: {context: {a: 1}}}", []string{"commands.x.plugin: required"}},
		{"bad plugin reference", "commands: {x: {plugin: ../evil}}", []string{`commands.x.plugin: "../evil" is not a valid plugin name`}},
		{"bad plugin key", "plugins: {Sh.ell: {}}", []string{"plugins.Sh.ell: plugin names must match"}},
		{"bad sha", "plugins: {shell: {sha256: xyz}}", []string{"plugins.shell.sha256: must be 64 hex digits"}},
		{"secret pass_env", "plugins: {shell: {pass_env: [DATABASE_URL]}}", []string{"plugins.shell.pass_env[0]: DATABASE_URL is never passed to plugins"}},
		{"PG pass_env", "plugins: {shell: {pass_env: [PATH, PGSSLPASSWORD, PGPASSFILE]}}", []string{
			"plugins.shell.pass_env[1]: PGSSLPASSWORD is never passed to plugins: DATABASE_URL, PG* and TETHER_* are the agent's own database settings and secrets",
			"plugins.shell.pass_env[2]: PGPASSFILE is never passed to plugins"}},
		{"PG prefix pass_env", "plugins: {shell: {pass_env: [PG*, PGSSL*, TETHER_*]}}", []string{
			"plugins.shell.pass_env[0]: PG* is never passed to plugins: it selects only the agent's own settings",
			"plugins.shell.pass_env[1]: PGSSL* is never passed to plugins",
			"plugins.shell.pass_env[2]: TETHER_* is never passed to plugins"}},
		{"bad pass_env", "plugins: {shell: {pass_env: [A-B]}}", []string{`plugins.shell.pass_env[0]: "A-B" is not a variable name`}},
		{"non-string context keys", "commands: {x: {plugin: shell, context: {a: {1: b}}}}", []string{"commands.x.context: cannot be stored as JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tc.yaml), noEnv)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestValidationCollectsAllErrors(t *testing.T) {
	_, err := Load(writeConfig(t, "agent: {capacity: 0, keepalive: 40s, shutdown_timeout: 5m}\ncommands: {x: {}}"), noEnv)
	require.Error(t, err)
	for _, w := range []string{"agent.capacity", "agent.keepalive (40s)", "agent.shutdown_timeout", "commands.x.plugin"} {
		assert.Contains(t, err.Error(), w)
	}
}

func TestTestTimingsAreValid(t *testing.T) {
	// The fast timings tests use must pass validation.
	_, err := Load("", envMap(map[string]string{
		"TETHER_AGENT_KEEPALIVE": "1s", "TETHER_AGENT_STALE_JOB": "4s",
		"TETHER_AGENT_CLEAN_INTERVAL": "1s", "TETHER_AGENT_AWOL_TIMEOUT": "30s",
	}))
	require.NoError(t, err)
}

func TestRedacted(t *testing.T) {
	cfg, err := Load(writeConfig(t, fullYAML), envMap(map[string]string{"TETHER_API_TOKENS": "ci:supersecrettoken123"}))
	require.NoError(t, err)
	r := cfg.Redacted()
	assert.Equal(t, "postgres://tether:REDACTED@db:5432/tether", r.DatabaseURL)
	assert.Equal(t, "supersecrettoken123", cfg.HTTP.Tokens[0].Token, "the original is untouched")
	assert.Equal(t, "REDACTED", r.HTTP.Tokens[0].Token)
	assert.Equal(t, "REDACTED", r.Plugins["shell"].Env["LANG"])
	assert.Equal(t, "C.UTF-8", cfg.Plugins["shell"].Env["LANG"])

	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", cfg)
	out := buf.String()
	assert.NotContains(t, out, "secret")
	assert.Contains(t, out, `"database_url":"postgres://tether:REDACTED@db:5432/tether"`)
	assert.Contains(t, out, `"http.tokens":["ci"]`)
	assert.NotContains(t, fmt.Sprintf("%v", r), "supersecrettoken123")
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h/db":                        "postgres://u:REDACTED@h/db",
		"postgres://u@h/db":                          "postgres://u@h/db",
		"postgres://h/db?password=p&sslmode=disable": "postgres://h/db?password=REDACTED&sslmode=disable",
		"host=h user=u password=secret dbname=d":     "host=h user=u password=REDACTED dbname=d",
		"host=h password='se cret' dbname=d":         "host=h password=REDACTED dbname=d",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
}

func TestSecretEnv(t *testing.T) {
	for _, name := range []string{"DATABASE_URL", "PGPASSWORD", "PGSSLPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSERVICE",
		"PGSSLKEY", "PGSSLCERT", "PGHOST", "PGUSER", "PGDATABASE", "PGOPTIONS",
		"TETHER_API_TOKENS", "TETHER_TOKEN", "TETHER_AGENT_NAME"} {
		assert.True(t, SecretEnv(name), name)
	}
	for _, name := range []string{"PATH", "HOME", "AWS_REGION", "AWS_SECRET_ACCESS_KEY", "KUBECONFIG", "GPG_TTY", "DATABASE", "TETHER"} {
		assert.False(t, SecretEnv(name), name)
	}
}

// TestCheckPassEnv checks what pass_env may name. It is never a secret, nor
// a prefix that selects only secrets. A wider pattern is fine (the host
// scrubs the secrets it covers).
func TestCheckPassEnv(t *testing.T) {
	for _, ok := range []string{"*", "PATH", "AWS_*", "P*", "DATABASE*", "TETHER*", "KUBECONFIG", "_X"} {
		assert.NoError(t, CheckPassEnv(ok), ok)
	}
	for pattern, want := range map[string]string{
		"DATABASE_URL":  "DATABASE_URL is never passed to plugins",
		"PGPASSWORD":    "PGPASSWORD is never passed to plugins",
		"PGSSLPASSWORD": "PGSSLPASSWORD is never passed to plugins",
		"PGSERVICEFILE": "PGSERVICEFILE is never passed to plugins",
		"PG*":           "PG* is never passed to plugins: it selects only the agent's own settings",
		"PGSSL*":        "PGSSL* is never passed to plugins: it selects only",
		"TETHER_*":      "TETHER_* is never passed to plugins: it selects only",
		"TETHER_TOKEN":  "TETHER_TOKEN is never passed to plugins",
		"A-B":           `"A-B" is not a variable name, NAME* prefix or *`,
		"A*B":           `"A*B" is not a variable name`,
		"":              `"" is not a variable name`,
		"**":            `"**" is not a variable name`,
	} {
		err := CheckPassEnv(pattern)
		if assert.Error(t, err, pattern) {
			assert.Contains(t, err.Error(), want, pattern)
		}
	}
}

// The command's default context, as JSON, under the one merge rule the
// runner and the janitor share.
func TestCommandContextMerge(t *testing.T) {
	c := Command{Plugin: "shell", Context: map[string]any{"script": "echo a", "env": map[string]any{"X": "1"}}}
	defaults, err := c.ContextJSON()
	require.NoError(t, err)
	got, err := jobctx.Merge(defaults, json.RawMessage(`{"script":"echo b","extra":true}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"script":"echo b","env":{"X":"1"},"extra":true}`, string(got))
	got, err = jobctx.Merge(defaults, nil)
	require.NoError(t, err)
	assert.JSONEq(t, `{"script":"echo a","env":{"X":"1"}}`, string(got))
	assert.Equal(t, "echo a", c.Context["script"], "defaults are not modified")
	empty, err := Command{Plugin: "shell"}.ContextJSON()
	require.NoError(t, err)
	assert.JSONEq(t, `{}`, string(empty))
}

func TestDrainHandoff(t *testing.T) {
	cfg, err := Load("", func(k string) string { return map[string]string{"TETHER_DRAIN_HANDOFF": "deadline"}[k] })
	require.NoError(t, err)
	assert.Equal(t, HandoffDeadline, cfg.Drain.Handoff)
	assert.Equal(t, HandoffImmediate, Default().Drain.Handoff)
	_, err = Load("", func(k string) string { return map[string]string{"TETHER_DRAIN_HANDOFF": "later"}[k] })
	assert.ErrorContains(t, err, `drain.handoff: must be "immediate", "deadline" or "never", got "later"`)
}

func TestDrainMustFitStopTimeout(t *testing.T) {
	_, err := Parse([]byte("agent: {shutdown_timeout: 110s}\n"))
	assert.ErrorContains(t, err, "agent.shutdown_timeout (1m50s) + 12s to stop the last jobs (the longest kill_grace, 0s, + 2s, at least 12s) + http.shutdown_grace (5s) = 2m7s must be less than drain.stop_timeout (2m0s, the container's stopTimeout)")
	// A longer kill_grace lengthens the stop bound.
	_, err = Parse([]byte("agent: {shutdown_timeout: 80s}\nplugins: {shell: {config: {max_kill_grace: 40s}}}\n"))
	assert.ErrorContains(t, err, "agent.shutdown_timeout (1m20s) + 42s to stop the last jobs (the longest kill_grace, 40s, + 2s, at least 12s) + http.shutdown_grace (5s) = 2m7s must be less than")
	_, err = Parse([]byte("agent: {shutdown_timeout: 70s}\nplugins: {shell: {config: {max_kill_grace: 40s}}}\n"))
	assert.NoError(t, err, "70s + 42s + 5s = 117s")
	cfg, err := Parse([]byte("agent: {shutdown_timeout: 100s}\n"))
	require.NoError(t, err, "the defaults fit: 100s + 12s + 5s = 117s")
	assert.Equal(t, 117*time.Second, cfg.DrainTotal(nil))
	assert.Equal(t, Duration(120*time.Second), cfg.Drain.StopTimeout, "the default is the shipped task definition's stopTimeout")
}

// ECS waits 30s when a container sets no stopTimeout: a config that says so
// must shorten the drain to fit, and the error says which keys to change.
func TestDrainStopTimeoutSetting(t *testing.T) {
	_, err := Load("", func(k string) string { return map[string]string{"TETHER_DRAIN_STOP_TIMEOUT": "30s"}[k] })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "agent.shutdown_timeout (1m40s) must be less than drain.stop_timeout (30s)")

	_, err = Parse([]byte("drain: {stop_timeout: 30s}\nagent: {shutdown_timeout: 15s}\n"))
	assert.ErrorContains(t, err, "= 32s must be less than drain.stop_timeout (30s, the container's stopTimeout)", "15 + 12 + 5 = 32 ≥ 30")
	cfg, err := Parse([]byte("drain: {stop_timeout: 30s}\nagent: {shutdown_timeout: 12s}\n"))
	require.NoError(t, err, "12 + 12 + 5 = 29 < 30")
	assert.Equal(t, 29*time.Second, cfg.DrainTotal(nil))

	// An EC2 container may stop later than Fargate's 120s: no cap of its own.
	_, err = Parse([]byte("drain: {stop_timeout: 10m}\nagent: {shutdown_timeout: 9m}\n"))
	assert.NoError(t, err)

	// The kill graces the plugins report at start enter the same sum.
	cfg, err = Parse([]byte("drain: {stop_timeout: 60s}\nagent: {shutdown_timeout: 40s}\ncommands: {sh: {plugin: shell}}\n"))
	require.NoError(t, err, "40 + 12 + 5 = 57 < 60")
	err = cfg.CheckKillGraces(KillGraces{"shell": 15 * time.Second})
	assert.ErrorContains(t, err, "agent.shutdown_timeout (40s) + 17s to stop the last jobs (the longest kill_grace, 15s, + 2s, at least 12s) + http.shutdown_grace (5s) = 1m2s must be less than drain.stop_timeout (1m0s")
}

func TestLifecycleLimitsConfig(t *testing.T) {
	cfg, err := Load("", func(k string) string {
		return map[string]string{"TETHER_DEFAULT_MAX_RETRY": "4", "TETHER_DEFAULT_TTL_SUCCEEDED": "2d"}[k]
	})
	require.NoError(t, err)
	assert.Equal(t, 4, cfg.Defaults.MaxRetry)
	assert.Equal(t, Duration(48*time.Hour), cfg.Defaults.TTLSucceeded)
	assert.Equal(t, Duration(30*24*time.Hour), cfg.Defaults.TTLFailed)

	cfg, err = Parse([]byte("defaults: {max_retry: 1}\ncommands:\n  c:\n    plugin: shell\n    limits: {active_timeout: 1h, max: {active_timeout: 2h, max_retry: 3}}\n"))
	require.NoError(t, err)
	set, errs := cfg.Commands["c"].ResolveLimits(cfg.Defaults, limits.Partial{})
	require.Empty(t, errs)
	assert.Equal(t, 1, set.MaxRetry)
	assert.Equal(t, time.Hour, set.ActiveTimeout)

	for yaml, want := range map[string]string{
		"defaults: {retry_backoff: 24hh}\n":                                              `defaults.retry_backoff: "24hh" is not a duration`,
		"defaults: {max_retry: -1}\n":                                                    "defaults.max_retry (env TETHER_DEFAULT_MAX_RETRY): must not be negative",
		"defaults: {ttl_failed: -1d}\n":                                                  "defaults.ttl_failed (env TETHER_DEFAULT_TTL_FAILED): must not be negative",
		"defaults: {retry_backoff_max: 1s}\n":                                            "defaults.retry_backoff_max (env TETHER_DEFAULT_RETRY_BACKOFF_MAX): (1s) must be at least retry_backoff",
		"commands:\n  c: {plugin: shell, limits: {pending_timeout: 5}}\n":                "commands.c.limits.pending_timeout: use a duration string",
		"commands:\n  c: {plugin: shell, limits: {bogus: 1s}}\n":                         "commands.c.limits.bogus: unknown key",
		"commands:\n  c: {plugin: shell, limits: {max: {max: {}}}}\n":                    "commands.c.limits.max.max: a maximum has no maximum",
		"commands:\n  c: {plugin: shell, limits: {max_retry: 6, max: {max_retry: 5}}}\n": "commands.c.limits.max_retry: the command's own value",
		"commands:\n  c: {plugin: shell, limits: {max: {active_timeout: 1h}}}\n":         "commands.c.limits.active_timeout: the command's own value (from the command or defaults) must be within limits.max: 0 (no limit) exceeds",
	} {
		_, err := Parse([]byte(yaml))
		require.Error(t, err, yaml)
		assert.Contains(t, err.Error(), want, yaml)
	}
}

// Every relation between the timing keys, each violation naming the keys
// and showing the arithmetic, and the values just inside each bound.
func TestTimingRelations(t *testing.T) {
	const shellCommand = "commands: {sh: {plugin: shell}}\n"
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		// reported is what the plugins report at the agent's start
		// (nil: the case holds for the config alone).
		reported KillGraces
		want     string // "" = valid
	}{
		{name: "defaults", yaml: ""},
		{name: "defaults with a shell command", yaml: shellCommand, reported: shellDefault},
		{name: "fast test timings", env: map[string]string{"TETHER_AGENT_KEEPALIVE": "1s", "TETHER_AGENT_STALE_JOB": "4s", "TETHER_AGENT_CLEAN_INTERVAL": "1s", "TETHER_AGENT_AWOL_TIMEOUT": "30s"}},
		{name: "fast test timings with shell", yaml: "agent: {keepalive: 1s, stale_job: 5s, clean_interval: 1s, awol_timeout: 30s}\nplugins: {shell: {config: {kill_grace: 1s, max_kill_grace: 1s}}}\n", reported: KillGraces{"shell": time.Second}},
		{name: "e2e harness timings with shell", yaml: "agent: {keepalive: 250ms, stale_job: 2s, offline_after: 1s, clean_interval: 500ms, awol_timeout: 60s}\nplugins: {shell: {config: {kill_grace: 1s, max_kill_grace: 1s}}}\n", reported: KillGraces{"shell": time.Second}},

		{name: "offline_after below 2×keepalive", yaml: "agent: {offline_after: 9s}",
			want: "agent.offline_after (9s) must be at least 2×agent.keepalive (2×5s = 10s): one late heartbeat must not requeue an agent's accepted jobs"},
		{name: "offline_after at 2×keepalive", yaml: "agent: {offline_after: 10s}"},
		{name: "offline_after derived from keepalive", env: map[string]string{"TETHER_AGENT_KEEPALIVE": "2s"}},

		{name: "cleanup_timeout negative", yaml: "agent: {cleanup_timeout: -1s}", want: "agent.cleanup_timeout: must be a positive duration"},
		{name: "cleanup_timeout at stale_job", yaml: "agent: {cleanup_timeout: 120s}",
			want: "agent.cleanup_timeout (120s) must be less than agent.stale_job (120s): a Cleanup call started at an agent's last heartbeat must end before the janitor may act on its jobs; lower cleanup_timeout (unset: the smaller of 120s and stale_job/2 = 60s) or raise stale_job"},
		{name: "cleanup_timeout from env at stale_job", env: map[string]string{"TETHER_AGENT_CLEANUP_TIMEOUT": "2m"},
			want: "agent.cleanup_timeout (120s) must be less than agent.stale_job (120s)"},
		{name: "cleanup_timeout just below stale_job", yaml: "agent: {cleanup_timeout: 119s}"},

		{name: "shell max_kill_grace leaves too little", yaml: shellCommand + "plugins: {shell: {config: {max_kill_grace: 101s}}}\n",
			want: "agent.stale_job (120s) − 2×agent.keepalive (10s) − longest kill_grace (plugins.shell.config.max_kill_grace 101s) = 9s must be at least 2×keepalive (10s): an agent without a successful heartbeat stops its own jobs at that point"},
		{name: "shell max_kill_grace at the bound", yaml: "agent: {shutdown_timeout: 10s}\nplugins: {shell: {config: {max_kill_grace: 100s}}}\n"},
		{name: "shell default grace with short stale_job", yaml: shellCommand + "agent: {keepalive: 1s, stale_job: 12s, clean_interval: 1s, awol_timeout: 30s}\n", reported: shellDefault,
			want: "agent.stale_job (12s) − 2×agent.keepalive (2s) − longest kill_grace (plugins.shell.config.max_kill_grace 10s, the default) = 0s must be at least 2×keepalive (2s): an agent without a successful heartbeat stops its own jobs at that point, so that every plugin has its kill_grace and one more keepalive to stop local work before the janitor may act at stale_job, and one missed heartbeat must never fence it; raise agent.stale_job to at least 4×keepalive + kill_grace = 14s"},
		{name: "other plugin's max_kill_grace", yaml: "plugins: {ecs: {config: {max_kill_grace: 2m}}}\n",
			want: "longest kill_grace (plugins.ecs.config.max_kill_grace 120s) = -10s must be at least 2×keepalive (10s)"},
		{name: "agent-side max_kill_grace of a plugin", yaml: "plugins: {mine: {max_kill_grace: 2m}}\n",
			want: "longest kill_grace (plugins.mine.max_kill_grace 120s) = -10s must be at least 2×keepalive (10s)"},
		{name: "agent-side max_kill_grace longer than the config's", yaml: "plugins: {mine: {max_kill_grace: 105s, config: {max_kill_grace: 40s}}}\n",
			want: "longest kill_grace (plugins.mine.max_kill_grace 105s) = 5s"},
		{name: "agent-side max_kill_grace negative", yaml: "plugins: {mine: {max_kill_grace: -1s}}\n",
			want: "plugins.mine.max_kill_grace: must not be negative, got -1s"},
		{name: "longest of several plugins", yaml: shellCommand + "plugins: {ecs: {config: {max_kill_grace: 40s}}, spark: {config: {max_kill_grace: 105s}}}\n",
			want: "longest kill_grace (plugins.spark.config.max_kill_grace 105s) = 5s"},
		{name: "max_kill_grace not a duration", yaml: "plugins: {ecs: {config: {max_kill_grace: soon}}}\n",
			want: `plugins.ecs.config.max_kill_grace: "soon" is not a duration`},
		{name: "max_kill_grace a number", yaml: "plugins: {shell: {config: {max_kill_grace: 30}}}\n",
			want: `plugins.shell.config.max_kill_grace: use a duration string like "30s", got 30`},
		{name: "max_kill_grace negative", yaml: "plugins: {ecs: {config: {max_kill_grace: -1s}}}\n",
			want: "plugins.ecs.config.max_kill_grace: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(writeConfig(t, tc.yaml), envMap(tc.env))
			if err == nil && tc.reported != nil {
				err = cfg.CheckKillGraces(tc.reported)
			}
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// shellDefault is what the shell plugin reports with its default config.
var shellDefault = KillGraces{"shell": 10 * time.Second}

func TestSelfFenceArithmetic(t *testing.T) {
	cfg, err := Parse([]byte("commands: {sh: {plugin: shell}}\n"))
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, cfg.LongestKillGrace(shellDefault), "the shell plugin's default max_kill_grace")
	assert.Equal(t, 100*time.Second, cfg.SelfFenceAfter(shellDefault), "120s − 2×5s − 10s")
	// What the janitor waits beyond the self-fence point covers the grace
	// and one more keepalive.
	assert.GreaterOrEqual(t, cfg.Agent.StaleJob.Std()-cfg.SelfFenceAfter(shellDefault), cfg.LongestKillGrace(shellDefault)+cfg.Agent.Keepalive.Std())

	cfg, err = Parse([]byte("plugins: {shell: {config: {kill_grace: 2s, max_kill_grace: 5s}}, ecs: {config: {max_kill_grace: 7s}}, spark: {}}\n"))
	require.NoError(t, err)
	reported := KillGraces{"shell": 5 * time.Second}
	assert.Equal(t, 7*time.Second, cfg.LongestKillGrace(reported))
	assert.Equal(t, 103*time.Second, cfg.SelfFenceAfter(reported))

	// A plugin only found in plugin_dir, used by no command, runs no job.
	cfg, err = Parse([]byte("commands: {report: {plugin: ecs}}\n"))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), cfg.LongestKillGrace(shellDefault))
	assert.Equal(t, 110*time.Second, cfg.SelfFenceAfter(shellDefault))
}

// What the plugins report at start enters the self-fence point and the
// drain's stop bound, and CheckKillGraces names the key and the fix.
func TestKillGracesReported(t *testing.T) {
	cfg, err := Parse([]byte("commands: {sh: {plugin: shell}}\n"))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), cfg.LongestKillGrace(nil), "before the plugins report, only the config's keys count")
	assert.Equal(t, 12*time.Second, cfg.DrainStopBound(shellDefault), "10s + 2s, at least 12s")
	require.NoError(t, cfg.CheckKillGraces(shellDefault))

	err = cfg.CheckKillGraces(KillGraces{"shell": 101 * time.Second})
	assert.ErrorContains(t, err, "agent.stale_job (120s) − 2×agent.keepalive (10s) − longest kill_grace (plugins.shell.config.max_kill_grace 101s, the default) = 9s must be at least 2×keepalive (10s)")
	assert.ErrorContains(t, err, "raise agent.stale_job to at least 4×keepalive + kill_grace = 121s, or lower keepalive or the kill_grace")

	// A plugin that reports more than its config's key counts what it reports.
	cfg, err = Parse([]byte("plugins: {slow: {config: {max_kill_grace: 5s}}}\n"))
	require.NoError(t, err)
	reported := KillGraces{"slow": 40 * time.Second}
	assert.Equal(t, 40*time.Second, cfg.LongestKillGrace(reported))
	assert.Equal(t, 42*time.Second, cfg.DrainStopBound(reported))
	assert.Equal(t, 5*time.Second, cfg.LongestKillGrace(KillGraces{"slow": time.Second}), "nor less than its config's key")

	cfg, err = Parse([]byte("agent: {shutdown_timeout: 80s}\ncommands: {sh: {plugin: shell}}\n"))
	require.NoError(t, err)
	err = cfg.CheckKillGraces(KillGraces{"shell": 40 * time.Second})
	assert.ErrorContains(t, err, "agent.shutdown_timeout (1m20s) + 42s to stop the last jobs (the longest kill_grace, 40s, + 2s, at least 12s) + http.shutdown_grace (5s) = 2m7s must be less than")

	cfg, err = Parse([]byte("plugins: {slow: {config: {max_kill_grace: 5s}}}\n"))
	require.NoError(t, err)
	err = cfg.CheckKillGraces(KillGraces{"slow": 105 * time.Second})
	assert.ErrorContains(t, err, "longest kill_grace (plugins.slow.config.max_kill_grace 105s, as the plugin reports) = 5s must be at least 2×keepalive (10s)")
}

func TestCleanupTimeout(t *testing.T) {
	cfg, err := Parse([]byte("agent: {stale_job: 10m, awol_timeout: 1h}\n"))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, cfg.Agent.CleanupTimeout.Std(), "at most 2m by default")
	cfg, err = Parse([]byte("agent: {keepalive: 1s, stale_job: 4s, clean_interval: 1s}\n"))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, cfg.Agent.CleanupTimeout.Std(), "stale_job/2 when that is shorter")
	cfg, err = Parse([]byte("agent: {cleanup_timeout: 90s}\n"))
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, cfg.Agent.CleanupTimeout.Std())
	cfg, err = Load("", envMap(map[string]string{"TETHER_AGENT_CLEANUP_TIMEOUT": "45s"}))
	require.NoError(t, err)
	assert.Equal(t, 45*time.Second, cfg.Agent.CleanupTimeout.Std())
}

// Every value that does not fit its key's type is reported with the key's
// full path and line, never with only yaml.v3's Go-typed message.
func TestTypeErrorsNamed(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"agent:\n  capacity: ten\n", `agent.capacity: must be a whole number such as 4, got "ten" (line 2)`},
		{"agent:\n  capacity: [1]\n", "agent.capacity: must be a whole number such as 4, got a list (line 2)"},
		{"agent: 5\n", `agent: expected a mapping of keys (name, capacity,`},
		{"agent:\n  name: {a: 1}\n", "agent.name: expected a string, got a mapping (line 2)"},
		{"agent:\n  name: \"a\\0b\"\n", "agent.name: must not contain a NUL character (line 2)"},
		{"http:\n  max_body_bytes: 1.5\n", `http.max_body_bytes: "1.5" is not an integer: must be a whole number`},
		{"http:\n  allowed_hosts: example.com\n", `http.allowed_hosts: expected a list, got "example.com" (line 2)`},
		{"http:\n  allowed_hosts: [[a]]\n", "http.allowed_hosts[0]: expected a string, got a list"},
		{"logs:\n  max_bytes_per_stream: yes\n", `logs.max_bytes_per_stream: must be a whole number such as 4, got "yes"`},
		{"plugins: [shell]\n", "plugins: expected a mapping, got a list (line 1)"},
		{"plugins:\n  shell:\n    pass_env: PATH\n", `plugins.shell.pass_env: expected a list, got "PATH" (line 3)`},
		{"plugins:\n  shell:\n    sha256: [ab]\n", "plugins.shell.sha256: expected a string, got a list (line 3)"},
		{"commands:\n  x: shell\n", `commands.x: expected a mapping of keys (plugin, context, limits), got "shell" (line 2)`},
		{"commands:\n  x:\n    plugin: shell\n    limits:\n      max:\n        max_retry: 1.0\n", `commands.x.limits.max.max_retry: "1.0" is not an integer`},
		{"commands:\n  x:\n    plugin: shell\n    limits: {max_retry: '3'}\n", `commands.x.limits.max_retry: must be a whole number such as 4, got "3"`},
		{"defaults:\n  max_retry: 2147483648\n", "defaults.max_retry: 2147483648 is out of range: must be at most 2147483647 (line 2)"},
		{"defaults:\n  max_retry: 9223372036854775808\n", "defaults.max_retry: 9223372036854775808 is out of range: must be at most 2147483647"},
		{"http:\n  max_body_bytes: 9223372036854775808\n", "http.max_body_bytes: 9223372036854775808 is out of range: must be at most 9223372036854775807"},
		{"http:\n  max_body_bytes: -9223372036854775809\n", "http.max_body_bytes: -9223372036854775809 is out of range: must be at least -9223372036854775808"},
		{"http:\n  tokens:\n    - name: a\n      tokn: x\n", "http.tokens[0].tokn: unknown key (line 4); known keys here: name, token"},
		{"commands:\n  x:\n    plugin: shell\n    context: [a]\n", "commands.x.context: expected a mapping, got a list (line 4)"},
		{"plugins:\n  shell:\n    config: 5\n", `plugins.shell.config: expected a mapping, got "5" (line 3)`},
	} {
		_, err := Load(writeConfig(t, tc.yaml), noEnv)
		if assert.Error(t, err, tc.yaml) {
			assert.Contains(t, err.Error(), tc.want, tc.yaml)
			assert.NotContains(t, err.Error(), "cannot unmarshal", tc.yaml)
		}
	}
}

// Integers are whole numbers in decimal digits, in the file and the
// environment alike. YAML's 2.0, 1e3 and 0x10 and strconv's " 3" are
// refused, not truncated or guessed.
func TestWholeNumbers(t *testing.T) {
	for _, v := range []string{"2.5", "2.0", "1e3", "0x10", "0o17", "1_000", "+3", "012", ".5"} {
		_, err := Load(writeConfig(t, "agent:\n  capacity: "+v+"\n"), noEnv)
		assert.ErrorContains(t, err, "agent.capacity: ", v)
		assert.ErrorContains(t, err, "must be a whole number", v)
	}
	for _, v := range []string{"2.5", " 3", "3 ", "0x10", "1e3", "+3", "ten", "9223372036854775808"} {
		_, err := Load("", envMap(map[string]string{"TETHER_AGENT_CAPACITY": v}))
		assert.ErrorContains(t, err, "TETHER_AGENT_CAPACITY (overrides agent.capacity): ", v)
	}
	_, err := Load("", envMap(map[string]string{"TETHER_AGENT_CAPACITY": "9223372036854775808"}))
	assert.ErrorContains(t, err, "is out of range: must be at most 9223372036854775807")
	_, err = Load("", envMap(map[string]string{"TETHER_DEFAULT_MAX_RETRY": "3000000000"}))
	assert.ErrorContains(t, err, "TETHER_DEFAULT_MAX_RETRY (overrides defaults.max_retry): 3000000000 is out of range: must be at most 2147483647")
	_, err = Load("", envMap(map[string]string{"TETHER_AGENT_KEEPALIVE": " 1s"}))
	assert.ErrorContains(t, err, `TETHER_AGENT_KEEPALIVE (overrides agent.keepalive): " 1s" has leading or trailing spaces`)

	cfg, err := Load(writeConfig(t, "agent: {capacity: 3}\ndefaults: {max_retry: 2147483647}\nhttp: {max_body_bytes: 9223372036854775807}\n"), noEnv)
	require.NoError(t, err, "the largest values of each range")
	assert.Equal(t, 3, cfg.Agent.Capacity)
	assert.Equal(t, math.MaxInt32, cfg.Defaults.MaxRetry)
	assert.Equal(t, int64(math.MaxInt64), cfg.HTTP.MaxBodyBytes)
	cfg, err = Load("", envMap(map[string]string{"TETHER_AGENT_CAPACITY": "7", "TETHER_AGENT_NAME": " a \n"}))
	require.NoError(t, err)
	assert.Equal(t, 7, cfg.Agent.Capacity)
	assert.Equal(t, "a", cfg.Agent.Name, "strings are trimmed")
}

// No error quotes the value of a secret key, whatever is wrong with it.
func TestSecretsNeverInErrors(t *testing.T) {
	const pw, tok = "s3cr3t-PW-xyz", "tok-SECRET-123456789"
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		want string
	}{
		{name: "tokens as a string", yaml: "http:\n  tokens: " + tok + "\n", want: "http.tokens: expected a list, got a scalar (value not shown"},
		{name: "token as a mapping", yaml: "http:\n  tokens: [" + tok + "]\n", want: "http.tokens[0]: expected a mapping of keys (name, token), got a scalar (value not shown"},
		{name: "token a list", yaml: "http:\n  tokens: [{name: a, token: [" + tok + "]}]\n", want: "http.tokens[0].token: expected a string, got a list"},
		{name: "short token", yaml: "http:\n  tokens: [{name: a, token: tok-S}]\n", want: "http.tokens[0].token: must be at least 16 characters"},
		{name: "duplicate token", yaml: "http:\n  tokens: [{name: a, token: " + tok + "}, {name: b, token: " + tok + "}]\n", want: "http.tokens[1].token: the same token is listed twice"},
		{name: "unknown key under a token", yaml: "http:\n  tokens: [{name: a, secret: " + tok + "}]\n", want: "http.tokens[0].secret: unknown key"},
		{name: "database_url a list", yaml: "database_url: [postgres://u:" + pw + "@h/db]\n", want: "database_url: expected a string, got a list"},
		{name: "database_url a mapping", yaml: "database_url: {password: " + pw + "}\n", want: "database_url: expected a string, got a mapping"},
		{name: "plugin env value a list", yaml: "plugins:\n  shell:\n    env: {KEY: [" + pw + "]}\n", want: "plugins.shell.env.KEY: expected a string, got a list"},
		{name: "plugin env a string", yaml: "plugins:\n  shell:\n    env: " + pw + "\n", want: "plugins.shell.env: expected a mapping, got a scalar (value not shown"},
		{name: "unparsable URL", env: map[string]string{"DATABASE_URL": "postgres://u:" + pw + "@[::1"}, want: "database_url (env DATABASE_URL): <unparsable database_url: postgres://, host [::1, 31 bytes>: it does not parse as a URL"},
		{name: "bad port", env: map[string]string{"DATABASE_URL": "host=x password=" + pw + " port=abc"}, want: "database_url (env DATABASE_URL): host=x password=REDACTED port=abc: a port must be a number from 1 to 65535"},
		{name: "unclosed quote", env: map[string]string{"DATABASE_URL": "host=x password='" + pw}, want: "database_url (env DATABASE_URL): <unparsable database_url: 30 bytes>: the quoted value of password is not closed"},
		{name: "bad URL query", env: map[string]string{"DATABASE_URL": "postgres://h/db?password=" + pw + "%zz"}, want: "its query string (after ?) does not parse"},
		{name: "foreign scheme", env: map[string]string{"DATABASE_URL": "mysql://u:" + pw + "@h/db"}, want: "the scheme must be postgres:// or postgresql://, got mysql://"},
		{name: "env tokens without a colon", env: map[string]string{"TETHER_API_TOKENS": tok}, want: "TETHER_API_TOKENS: entry 1: want name:token"},
		{name: "env token short", env: map[string]string{"TETHER_API_TOKENS": "a:tok-S"}, want: "http.tokens[0].token: must be at least 16 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = writeConfig(t, tc.yaml)
			}
			_, err := Load(path, envMap(tc.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			for _, s := range []string{pw, tok, "tok-S"} {
				assert.NotContains(t, err.Error(), s)
			}
		})
	}
}

func TestRedactURLNeverPrintsWhatItCannotParse(t *testing.T) {
	const pw = "s3cr3t-PW-xyz"
	for in, want := range map[string]string{
		"postgres://u:" + pw + "@[::1":           "<unparsable database_url: postgres://, host [::1, 31 bytes>",
		"postgres://u:" + pw + "@[::1/db":        "<unparsable database_url: postgres://, host [::1, 34 bytes>",
		"postgres://u:a/" + pw + "@h:x/db":       "<unparsable database_url: postgres://, 35 bytes>",
		"postgres://u:a@" + pw + "@[h/db":        "<unparsable database_url: postgres://, 34 bytes>",
		"postgres://h/db?password=" + pw + "%zz": "<unparsable database_url: postgres://, host h, 41 bytes>",
		"host=x password='" + pw:                 "<unparsable database_url: 30 bytes>",
		"just-" + pw:                             "<unparsable database_url: 18 bytes>",
		"host=x password=" + pw + " port=abc":    "host=x password=REDACTED port=abc",
		"host=x password = " + pw + " user=u":    "host=x password=REDACTED user=u",
		"host=x sslpassword='a \\' " + pw + "'":  "host=x sslpassword=REDACTED",
		"postgres://u@h/db?sslpassword=" + pw:    "postgres://u@h/db?sslpassword=REDACTED",
		"postgresql://u:" + pw + "@h1:5432,h2/d": "postgresql://u:REDACTED@h1:5432,h2/d",
		"":                                       "",
	} {
		got := RedactURL(in)
		assert.Equal(t, want, got, in)
		assert.NotContains(t, got, pw, in)
	}
}

func TestDatabaseURLChecked(t *testing.T) {
	for _, ok := range []string{
		"postgres://u:p@h:5432/db?sslmode=disable", "postgresql://h1:5432,h2:5433/db", "postgres://u:p@h1:5432,h2/db", "postgres://[::1]:5432,h2/db", "postgres:///db?host=/tmp",
		"host=h port=5432 user=u password='a b' dbname=d", "host=h1,h2 port=5432,5433", "dbname=x",
	} {
		_, err := Load("", envMap(map[string]string{"DATABASE_URL": ok}))
		assert.NoError(t, err, ok)
	}
	for in, want := range map[string]string{
		"postgres://u:p@h:0/db":       "a port must be a number from 1 to 65535",
		"postgres://h/db?port=70000":  "a port must be a number from 1 to 65535",
		"host=h port=5432,x":          "a port must be a number from 1 to 65535",
		"host h":                      "keyword 1 has no =",
		"postgres://u:p@h:99999999/d": "a port must be a number",
	} {
		_, err := Load("", envMap(map[string]string{"DATABASE_URL": in}))
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), "database_url (env DATABASE_URL): ", in)
			assert.Contains(t, err.Error(), want, in)
		}
	}
}

func TestListenAndAllowedHosts(t *testing.T) {
	cfg, err := Load(writeConfig(t, "http:\n  listen: 127.0.0.1:0\n  allowed_hosts: [tether.example.com, 'tether.example.com:9090', '*', '[::1]:80', '::1', 10.0.0.1, localhost]\n"), noEnv)
	require.NoError(t, err)
	assert.Len(t, cfg.HTTP.AllowedHosts, 7)
	cfg, err = Load("", envMap(map[string]string{"TETHER_HTTP_ALLOWED_HOSTS": " a.example.com, b.example.com:8080,,"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"a.example.com", "b.example.com:8080"}, cfg.HTTP.AllowedHosts)

	for _, tc := range []struct{ listen, want string }{
		{"localhost", `http.listen (env TETHER_HTTP_LISTEN): "localhost" is not host:port`},
		{"http://0.0.0.0:9090", `"http://0.0.0.0:9090" is not host:port`},
		{":99999", `":99999": the port must be a number from 0 to 65535`},
		{":http", `the port must be a number`},
	} {
		_, err := Load("", envMap(map[string]string{"TETHER_HTTP_LISTEN": tc.listen}))
		assert.ErrorContains(t, err, tc.want, tc.listen)
	}
	for _, tc := range []struct{ host, want string }{
		{"https://tether.example.com", "has a scheme"},
		{"tether.example.com/api", "has a path"},
		{"tether example.com", "contains a space"},
		{"*.example.com", "* matches any host only alone"},
		{"**", "* matches any host only alone"},
		{"tether.example.com:x", "the port must be a number from 1 to 65535"},
		{"tether.example.com:0", "the port must be a number from 1 to 65535"},
		{"[nope]:80", "in brackets is not an IPv6 address"},
		{"u@tether.example.com", "has user info"},
		{"bad_%name", "is not a host name"},
	} {
		_, err := Load(writeConfig(t, "http:\n  allowed_hosts: [ok.example.com, '"+tc.host+"']\n"), noEnv)
		if assert.Error(t, err, tc.host) {
			assert.Contains(t, err.Error(), "http.allowed_hosts[1] (env TETHER_HTTP_ALLOWED_HOSTS): ", tc.host)
			assert.Contains(t, err.Error(), tc.want, tc.host)
		}
	}
	_, err = Load("", envMap(map[string]string{"TETHER_HTTP_ALLOWED_HOSTS": "a.example.com,https://b"}))
	assert.ErrorContains(t, err, `http.allowed_hosts[1] (env TETHER_HTTP_ALLOWED_HOSTS): "https://b" has a scheme`)
}

// The max tags of the max_retry keys are the database column's range.
func TestMaxRetryTagsMatchColumn(t *testing.T) {
	for _, f := range []reflect.StructField{
		must(reflect.TypeFor[Defaults]().FieldByName("MaxRetry")),
		must(reflect.TypeFor[Limits]().FieldByName("MaxRetry")),
	} {
		assert.Equal(t, strconv.Itoa(limits.MaxRetryLimit), f.Tag.Get("max"), f.Name)
	}
}

func must(f reflect.StructField, ok bool) reflect.StructField {
	if !ok {
		panic("no such field")
	}
	return f
}

// This is the backstop behind checkNode. yaml.v3's type errors lose the
// value they quote, which may be a secret.
func TestYAMLTypeErrorsLoseTheirValues(t *testing.T) {
	var v struct{ Tokens []Token }
	err := yaml.Unmarshal([]byte("tokens: sekrit\n"), &v)
	require.Error(t, err)
	require.Contains(t, err.Error(), "`sekrit`", "yaml.v3 quotes the value (its first characters, if long)")
	got := withoutValues(err).Error()
	assert.Equal(t, "line 1: cannot unmarshal !!str (value not shown) into []config.Token", got)
}

// plugins.<name>.max_kill_grace is the agent's key: it enters the
// self-fence arithmetic and never reaches the plugin, whose strict decoding
// of its config would refuse it.
func TestAgentSideMaxKillGraceStaysWithTheAgent(t *testing.T) {
	cfg, err := Parse([]byte("agent: {shutdown_timeout: 60s}\nplugins: {mine: {max_kill_grace: 30s, config: {region: eu-west-1}}}\n"))
	require.NoError(t, err)
	pc, err := cfg.Plugins["mine"].ConfigJSON()
	require.NoError(t, err)
	assert.JSONEq(t, `{"region":"eu-west-1"}`, string(pc))
	assert.Equal(t, 30*time.Second, cfg.LongestKillGrace(nil))
}

func TestValidPort(t *testing.T) {
	for _, tc := range []struct {
		port   string
		lowest int
		want   bool
	}{
		{"0", 0, true}, {"0", 1, false}, {"1", 1, true}, {"65535", 1, true}, {"65536", 0, false},
		{"01", 0, false}, {"+1", 0, false}, {"-1", 0, false}, {"", 0, false}, {"1e3", 0, false}, {" 1", 0, false},
	} {
		assert.Equal(t, tc.want, validPort(tc.port, tc.lowest), "validPort(%q, %d)", tc.port, tc.lowest)
	}
}

func TestUpToAndCutScheme(t *testing.T) {
	assert.Equal(t, "h:5", upTo("h:5/db?x", "/?"))
	assert.Equal(t, "h", upTo("h", "/?"))
	assert.Equal(t, "", upTo("/x", "/?"))

	for _, tc := range []struct {
		in, scheme, rest string
		ok               bool
	}{
		{"postgres://h/db", "postgres", "h/db", true},
		{"host=h sslrootcert=file://x", "host=h sslrootcert=file", "x", false},
		{"host=h", "host=h", "", false},
	} {
		scheme, rest, ok := cutScheme(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.scheme, scheme, tc.in)
		assert.Equal(t, tc.rest, rest, tc.in)
	}
}
