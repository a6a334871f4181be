package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Distinctive secrets every bad-config case carries. None may appear in any
// output line of the binary. Every token in the table starts with
// secretToken, so a short or mangled one is caught too.
const (
	secretPassword = "s3cr3t-PW-xyz"
	secretToken    = "tok-SECRET"
	secretEnvValue = "envval-S3CRET"
)

// The database the cases point at (with the secret password) when they do
// not set DATABASE_URL themselves. Nothing listens on port 1, but every
// case must fail on its configuration before connecting.
const secretDatabaseURL = "postgres://tether:" + secretPassword + "@127.0.0.1:1/tether"

type badConfig struct {
	name string
	yaml string            // the --config file; "" = none
	env  map[string]string // on top of the secret defaults; "" unsets one
	want []string          // in stderr: the key (and the fix)
}

// badConfigs are configurations `tether run` and `tether migrate` must
// refuse: exit 1, an error naming the key, no secret printed.
var badConfigs = []badConfig{
	// Type errors, at every level.
	{name: "document is a list", yaml: "- agent\n- http\n", want: []string{"config: expected a mapping of keys (database_url,"}},
	{name: "section is a number", yaml: "agent: 5\n", want: []string{"agent: expected a mapping of keys (name, capacity,", "(line 1)"}},
	{name: "capacity word", yaml: "agent:\n  capacity: ten\n", want: []string{`agent.capacity: must be a whole number such as 4, got "ten" (line 2)`}},
	{name: "capacity fraction", yaml: "agent:\n  capacity: 2.5\n", want: []string{`agent.capacity: "2.5" is not an integer: must be a whole number`}},
	{name: "capacity 2.0", yaml: "agent:\n  capacity: 2.0\n", want: []string{`agent.capacity: "2.0" is not an integer`}},
	{name: "capacity hex", yaml: "agent:\n  capacity: 0x10\n", want: []string{`agent.capacity: "0x10" is not an integer`}},
	{name: "capacity quoted", yaml: "agent:\n  capacity: \"3\"\n", want: []string{`agent.capacity: must be a whole number such as 4, got "3"`}},
	{name: "capacity negative", yaml: "agent:\n  capacity: -1\n", want: []string{"agent.capacity: must be at least 1, got -1"}},
	{name: "capacity zero", yaml: "agent:\n  capacity: 0\n", want: []string{"agent.capacity: must be at least 1, got 0"}},
	{name: "capacity huge", yaml: "agent:\n  capacity: 99999999999999999999\n", want: []string{"agent.capacity: 99999999999999999999 is out of range: must be at most 9223372036854775807"}},
	{name: "name a mapping", yaml: "agent:\n  name: {a: 1}\n", want: []string{"agent.name: expected a string, got a mapping (line 2)"}},
	{name: "name with NUL", yaml: "agent:\n  name: \"a\\0b\"\n", want: []string{"agent.name: must not contain a NUL character"}},
	{name: "body size exponent", yaml: "http:\n  max_body_bytes: 1e6\n", want: []string{`http.max_body_bytes: "1e6" is not an integer`}},
	{name: "log cap a list", yaml: "logs:\n  max_bytes_per_stream: [1]\n", want: []string{"logs.max_bytes_per_stream: must be a whole number such as 4, got a list"}},
	{name: "handoff a list", yaml: "drain:\n  handoff: [never]\n", want: []string{"drain.handoff: expected a string, got a list"}},
	{name: "handoff unknown", yaml: "drain:\n  handoff: later\n", want: []string{`drain.handoff: must be "immediate", "deadline" or "never", got "later"`}},
	{name: "plugin_dir a mapping", yaml: "plugin_dir: {a: b}\n", want: []string{"plugin_dir: expected a string, got a mapping"}},
	{name: "plugins a list", yaml: "plugins: [shell]\n", want: []string{"plugins: expected a mapping, got a list"}},
	{name: "commands a string", yaml: "commands: etl\n", want: []string{`commands: expected a mapping, got "etl"`}},
	{name: "command a string", yaml: "commands:\n  etl: shell\n", want: []string{`commands.etl: expected a mapping of keys (plugin, context, limits), got "shell"`}},
	{name: "context a list", yaml: "commands:\n  etl:\n    plugin: shell\n    context: [a]\n", want: []string{"commands.etl.context: expected a mapping, got a list (line 4)"}},
	{name: "plugin config a number", yaml: "plugins:\n  shell:\n    config: 5\n", want: []string{`plugins.shell.config: expected a mapping, got "5"`}},
	{name: "YAML syntax", yaml: "agent: [\n", want: []string{"parsing YAML", "line"}},

	// Unknown keys.
	{name: "unknown section", yaml: "agnt:\n  capacity: 2\n", want: []string{"agnt: unknown key (line 1); known keys here: database_url,"}},
	{name: "unknown agent key", yaml: "agent:\n  capacty: 2\n", want: []string{"agent.capacty: unknown key (line 2)", "capacity"}},
	{name: "unknown token key", yaml: "http:\n  tokens:\n    - name: ci\n      tokn: " + secretToken + "-123456789\n", want: []string{"http.tokens[0].tokn: unknown key (line 4); known keys here: name, token"}},
	{name: "unknown limits key", yaml: "commands:\n  etl:\n    plugin: shell\n    limits: {bogus: 1s}\n", want: []string{"commands.etl.limits.bogus: unknown key"}},
	{name: "unknown plugin key", yaml: "plugins:\n  shell:\n    sha: abc\n", want: []string{"plugins.shell.sha: unknown key", "sha256"}},

	// Durations.
	{name: "duration bare int", yaml: "logs:\n  flush_interval: 200\n", want: []string{`logs.flush_interval: use a duration string like "5s" (a bare number 200 has no unit)`}},
	{name: "duration garbage", yaml: "agent:\n  poll_interval: 1x\n", want: []string{`agent.poll_interval: "1x" is not a duration`}},
	{name: "duration negative", yaml: "agent:\n  keepalive: -5s\n", want: []string{"agent.keepalive: must be a positive duration"}},
	{name: "duration overflow", yaml: "agent:\n  stale_job: 300000d\n", want: []string{`agent.stale_job: "300000d" is too long`}},
	{name: "duration overflow days and hours", yaml: "defaults:\n  active_timeout: \"-100000d2000000h\"\n", want: []string{`defaults.active_timeout: "-100000d2000000h" is too long`}},
	{name: "duration a list", yaml: "http:\n  idle_timeout: [1s]\n", want: []string{"http.idle_timeout: use a duration string"}},
	{name: "server timeout zero", yaml: "http:\n  read_timeout: 0\n", want: []string{"http.read_timeout: must be a positive duration"}},
	{name: "connect timeout garbage", yaml: "database_connect_timeout: forever\n", want: []string{`database_connect_timeout: "forever" is not a duration`}},
	{name: "work pool too small", yaml: "database_max_conns: 2\n", want: []string{"database_max_conns (env TETHER_DATABASE_MAX_CONNS): must be from 3 to 1000, got 2"}},
	{name: "work pool not a number", yaml: "database_max_conns: many\n", want: []string{"database_max_conns"}},
	{name: "api pool zero", yaml: "http:\n  database_max_conns: 0\n", want: []string{"http.database_max_conns (env TETHER_HTTP_DATABASE_MAX_CONNS): must be from 1 to 1000, got 0"}},
	{name: "shutdown negative", yaml: "agent:\n  shutdown_timeout: -1s\n", want: []string{"agent.shutdown_timeout: must not be negative"}},
	{name: "ttl negative", yaml: "defaults:\n  ttl_failed: -1d\n", want: []string{"defaults.ttl_failed (env TETHER_DEFAULT_TTL_FAILED): must not be negative"}},

	// Relations between values.
	{name: "keepalive vs stale_job", yaml: "agent:\n  keepalive: 31s\n  offline_after: 62s\n", want: []string{"agent.keepalive (31s) must be at most agent.stale_job/4 (30s)"}},
	{name: "offline_after vs stale_job", yaml: "agent:\n  offline_after: 120s\n", want: []string{"agent.offline_after (2m0s) must be less than agent.stale_job (2m0s)"}},
	{name: "offline_after vs keepalive", yaml: "agent:\n  offline_after: 9s\n", want: []string{"agent.offline_after (9s) must be at least 2×agent.keepalive"}},
	{name: "awol vs stale_job", yaml: "agent:\n  awol_timeout: 119s\n", want: []string{"agent.awol_timeout (1m59s) must be at least agent.stale_job (2m0s)"}},
	{name: "clean_interval vs stale_job", yaml: "agent:\n  clean_interval: 121s\n", want: []string{"agent.clean_interval (2m1s) must be at most agent.stale_job (2m0s)"}},
	{name: "cleanup vs stale_job", yaml: "agent:\n  cleanup_timeout: 120s\n", want: []string{"agent.cleanup_timeout (120s) must be less than agent.stale_job (120s)"}},
	{name: "shutdown vs ECS", yaml: "agent:\n  shutdown_timeout: 120s\n", want: []string{"agent.shutdown_timeout (2m0s) must be less than drain.stop_timeout (2m0s)"}},
	{name: "kill grace vs self-fence", yaml: "plugins:\n  shell:\n    config: {max_kill_grace: 101s}\n", want: []string{"agent.stale_job (120s) − 2×agent.keepalive (10s) − longest kill_grace (plugins.shell.config.max_kill_grace 101s)"}},
	{name: "kill grace not a duration", yaml: "plugins:\n  shell:\n    config: {max_kill_grace: soon}\n", want: []string{`plugins.shell.config.max_kill_grace: "soon" is not a duration`}},
	{name: "backoff max below backoff", yaml: "defaults:\n  retry_backoff_max: 1s\n", want: []string{"defaults.retry_backoff_max (env TETHER_DEFAULT_RETRY_BACKOFF_MAX): (1s) must be at least retry_backoff"}},
	{name: "command over its max", yaml: "commands:\n  etl:\n    plugin: shell\n    limits: {max_retry: 6, max: {max_retry: 5}}\n", want: []string{"commands.etl.limits.max_retry: the command's own value"}},
	{name: "max inside max", yaml: "commands:\n  etl:\n    plugin: shell\n    limits: {max: {max: {}}}\n", want: []string{"commands.etl.limits.max.max: a maximum has no maximum"}},
	{name: "max retry fraction", yaml: "commands:\n  etl:\n    plugin: shell\n    limits:\n      max: {max_retry: 2.5}\n", want: []string{`commands.etl.limits.max.max_retry: "2.5" is not an integer`}},
	{name: "max retry over int4", yaml: "commands:\n  etl:\n    plugin: shell\n    limits: {max_retry: 2147483648}\n", want: []string{"commands.etl.limits.max_retry: 2147483648 is out of range: must be at most 2147483647"}},
	{name: "default max retry over int4", yaml: "defaults:\n  max_retry: 3000000000\n", want: []string{"defaults.max_retry: 3000000000 is out of range: must be at most 2147483647"}},

	// API tokens.
	{name: "tokens a string", yaml: "http:\n  tokens: " + secretToken + "-123456789\n", want: []string{"http.tokens: expected a list, got a scalar (value not shown: the key holds a secret)"}},
	{name: "tokens a mapping", yaml: "http:\n  tokens: {ci: " + secretToken + "-123456789}\n", want: []string{"http.tokens: expected a list, got a mapping"}},
	{name: "token a string", yaml: "http:\n  tokens: [" + secretToken + "-123456789]\n", want: []string{"http.tokens[0]: expected a mapping of keys (name, token), got a scalar (value not shown"}},
	{name: "token a list", yaml: "http:\n  tokens: [{name: ci, token: [" + secretToken + "-123456789]}]\n", want: []string{"http.tokens[0].token: expected a string, got a list"}},
	{name: "token too short", yaml: "http:\n  tokens: [{name: ci, token: " + secretToken + "}]\n", want: []string{"http.tokens[0].token: must be at least 16 characters"}},
	{name: "token names duplicated", yaml: "http:\n  tokens: [{name: ci, token: " + secretToken + "-123456789}, {name: ci, token: " + secretToken + "-987654321}]\n", want: []string{`http.tokens[1].name: "ci" is used by another token`}},
	{name: "token listed twice", yaml: "http:\n  tokens: [{name: a, token: " + secretToken + "-123456789}, {name: b, token: " + secretToken + "-123456789}]\n", want: []string{"http.tokens[1].token: the same token is listed twice"}},
	{name: "token name bad", yaml: "http:\n  tokens: [{name: 'c i', token: " + secretToken + "-123456789}]\n", want: []string{`http.tokens[0].name: "c i" must be 1-100 letters`}},
	{name: "env tokens without a name", env: map[string]string{"TETHER_API_TOKENS": secretToken + "-123456789"}, want: []string{"TETHER_API_TOKENS: entry 1: want name:token"}},
	{name: "env token too short", env: map[string]string{"TETHER_API_TOKENS": "ci:" + secretToken}, want: []string{"http.tokens[0].token: must be at least 16 characters"}},
	{name: "env token names duplicated", env: map[string]string{"TETHER_API_TOKENS": "ci:" + secretToken + "-123456789,ci:" + secretToken + "-987654321"}, want: []string{`http.tokens[1].name: "ci" is used by another token`}},

	// The database URL.
	{name: "URL unparsable", env: map[string]string{"DATABASE_URL": "postgres://u:" + secretPassword + "@[::1"}, want: []string{"database_url (env DATABASE_URL): <unparsable database_url: postgres://, host [::1, 31 bytes>: it does not parse as a URL"}},
	{name: "keyword/value bad port", env: map[string]string{"DATABASE_URL": "host=x password=" + secretPassword + " port=abc"}, want: []string{"database_url (env DATABASE_URL): host=x password=REDACTED port=abc: a port must be a number from 1 to 65535"}},
	{name: "keyword/value unclosed quote", env: map[string]string{"DATABASE_URL": "host=x password='" + secretPassword}, want: []string{"database_url (env DATABASE_URL): <unparsable database_url: 30 bytes>: the quoted value of password is not closed"}},
	{name: "URL port zero", env: map[string]string{"DATABASE_URL": "postgres://u:" + secretPassword + "@h:0/db"}, want: []string{"database_url (env DATABASE_URL): postgres://u:REDACTED@h:0/db: a port must be a number from 1 to 65535"}},
	{name: "URL bad query", env: map[string]string{"DATABASE_URL": "postgres://h/db?password=" + secretPassword + "%zz"}, want: []string{"database_url (env DATABASE_URL): <unparsable database_url: postgres://, host h,", "its query string"}},
	{name: "URL foreign scheme", env: map[string]string{"DATABASE_URL": "mysql://u:" + secretPassword + "@h/db"}, want: []string{"database_url (env DATABASE_URL): <unparsable database_url: mysql://, host h,", "the scheme must be postgres:// or postgresql://"}},
	{name: "URL just a password", env: map[string]string{"DATABASE_URL": secretPassword}, want: []string{"database_url (env DATABASE_URL): <unparsable database_url: 13 bytes>: it is neither a postgres:// URL nor keyword=value pairs"}},
	{name: "URL in the file unparsable", yaml: "database_url: \"postgres://u:" + secretPassword + "@[::1\"\n", env: map[string]string{"DATABASE_URL": ""}, want: []string{"database_url (env DATABASE_URL): <unparsable database_url: postgres://"}},
	{name: "URL a list", yaml: "database_url: [\"postgres://u:" + secretPassword + "@h/db\"]\n", want: []string{"database_url: expected a string, got a list"}},
	{name: "URL a mapping", yaml: "database_url: {password: " + secretPassword + "}\n", want: []string{"database_url: expected a string, got a mapping"}},

	// The listen address and allowed hosts.
	{name: "listen without port", yaml: "http:\n  listen: localhost\n", want: []string{`http.listen (env TETHER_HTTP_LISTEN): "localhost" is not host:port`}},
	{name: "listen with scheme", yaml: "http:\n  listen: http://0.0.0.0:9090\n", want: []string{`http.listen (env TETHER_HTTP_LISTEN): "http://0.0.0.0:9090" is not host:port`}},
	{name: "listen port too big", env: map[string]string{"TETHER_HTTP_LISTEN": ":99999"}, want: []string{`http.listen (env TETHER_HTTP_LISTEN): ":99999": the port must be a number from 0 to 65535`}},
	{name: "listen empty", yaml: "http:\n  listen: \"\"\n", want: []string{"http.listen: must not be empty"}},
	{name: "allowed hosts a string", yaml: "http:\n  allowed_hosts: tether.example.com\n", want: []string{`http.allowed_hosts: expected a list, got "tether.example.com"`}},
	{name: "allowed host with scheme", yaml: "http:\n  allowed_hosts: [\"https://tether.example.com\"]\n", want: []string{`http.allowed_hosts[0] (env TETHER_HTTP_ALLOWED_HOSTS): "https://tether.example.com" has a scheme`}},
	{name: "allowed host wildcard", yaml: "http:\n  allowed_hosts: [ok.example.com, \"*.example.com\"]\n", want: []string{"http.allowed_hosts[1] (env TETHER_HTTP_ALLOWED_HOSTS): \"*.example.com\": * matches any host only alone"}},
	{name: "allowed host with space", yaml: "http:\n  allowed_hosts: [\"a b\"]\n", want: []string{`http.allowed_hosts[0] (env TETHER_HTTP_ALLOWED_HOSTS): "a b" contains a space`}},
	{name: "allowed host from env with path", env: map[string]string{"TETHER_HTTP_ALLOWED_HOSTS": "ok.example.com,x.example.com/api"}, want: []string{`http.allowed_hosts[1] (env TETHER_HTTP_ALLOWED_HOSTS): "x.example.com/api" has a path`}},
	{name: "allowed host bad port", env: map[string]string{"TETHER_HTTP_ALLOWED_HOSTS": "x.example.com:http"}, want: []string{"http.allowed_hosts[0] (env TETHER_HTTP_ALLOWED_HOSTS): \"x.example.com:http\": the port must be a number from 1 to 65535"}},

	// Environment overrides, for each kind of key.
	{name: "env capacity fraction", env: map[string]string{"TETHER_AGENT_CAPACITY": "2.5"}, want: []string{`TETHER_AGENT_CAPACITY (overrides agent.capacity): "2.5" is not an integer: must be a whole number`}},
	{name: "env capacity space", env: map[string]string{"TETHER_AGENT_CAPACITY": " 3"}, want: []string{`TETHER_AGENT_CAPACITY (overrides agent.capacity): " 3" is not an integer`}},
	{name: "env capacity hex", env: map[string]string{"TETHER_AGENT_CAPACITY": "0x10"}, want: []string{`TETHER_AGENT_CAPACITY (overrides agent.capacity): "0x10" is not an integer`}},
	{name: "env capacity exponent", env: map[string]string{"TETHER_AGENT_CAPACITY": "1e3"}, want: []string{`TETHER_AGENT_CAPACITY (overrides agent.capacity): "1e3" is not an integer`}},
	{name: "env capacity word", env: map[string]string{"TETHER_AGENT_CAPACITY": "ten"}, want: []string{`TETHER_AGENT_CAPACITY (overrides agent.capacity): "ten" is not an integer`}},
	{name: "env capacity zero", env: map[string]string{"TETHER_AGENT_CAPACITY": "0"}, want: []string{"agent.capacity: must be at least 1, got 0"}},
	{name: "env body size overflow", env: map[string]string{"TETHER_HTTP_MAX_BODY_BYTES": "9223372036854775808"}, want: []string{"TETHER_HTTP_MAX_BODY_BYTES (overrides http.max_body_bytes): 9223372036854775808 is out of range: must be at most 9223372036854775807"}},
	{name: "env max retry over int4", env: map[string]string{"TETHER_DEFAULT_MAX_RETRY": "3000000000"}, want: []string{"TETHER_DEFAULT_MAX_RETRY (overrides defaults.max_retry): 3000000000 is out of range: must be at most 2147483647"}},
	{name: "env duration bare int", env: map[string]string{"TETHER_AGENT_KEEPALIVE": "5"}, want: []string{`TETHER_AGENT_KEEPALIVE (overrides agent.keepalive): "5" is not a duration`}},
	{name: "env duration negative", env: map[string]string{"TETHER_AGENT_STALE_JOB": "-1s"}, want: []string{"agent.stale_job: must be a positive duration"}},
	{name: "env duration overflow", env: map[string]string{"TETHER_DEFAULT_TTL_FAILED": "999999999d"}, want: []string{`TETHER_DEFAULT_TTL_FAILED (overrides defaults.ttl_failed): "999999999d" is too long`}},
	{name: "env duration space", env: map[string]string{"TETHER_LOGS_FLUSH_INTERVAL": " 1s"}, want: []string{`TETHER_LOGS_FLUSH_INTERVAL (overrides logs.flush_interval): " 1s" has leading or trailing spaces`}},
	{name: "env string", env: map[string]string{"TETHER_DRAIN_HANDOFF": "later"}, want: []string{`drain.handoff: must be "immediate", "deadline" or "never", got "later"`}},
	{name: "env connect timeout", env: map[string]string{"TETHER_DATABASE_CONNECT_TIMEOUT": "0"}, want: []string{"database_connect_timeout: must be a positive duration"}},
	{name: "env work pool", env: map[string]string{"TETHER_DATABASE_MAX_CONNS": "5000"}, want: []string{"database_max_conns (env TETHER_DATABASE_MAX_CONNS): must be from 3 to 1000, got 5000"}},

	// Plugins and commands.
	{name: "sha256 not hex", yaml: "plugins:\n  shell:\n    sha256: xyz\n", want: []string{"plugins.shell.sha256: must be 64 hex digits"}},
	{name: "sha256 too short", yaml: "plugins:\n  shell:\n    sha256: \"" + strings.Repeat("a", 63) + "\"\n", want: []string{"plugins.shell.sha256: must be 64 hex digits"}},
	{name: "sha256 a list", yaml: "plugins:\n  shell:\n    sha256: [ab]\n", want: []string{"plugins.shell.sha256: expected a string, got a list"}},
	{name: "plugin env value a list", yaml: "plugins:\n  shell:\n    env: {API_KEY: [" + secretEnvValue + "]}\n", want: []string{"plugins.shell.env.API_KEY: expected a string, got a list"}},
	{name: "plugin env a string", yaml: "plugins:\n  shell:\n    env: " + secretEnvValue + "\n", want: []string{"plugins.shell.env: expected a mapping, got a scalar (value not shown"}},
	{name: "plugin env bad name", yaml: "plugins:\n  shell:\n    env: {\"A=B\": " + secretEnvValue + "}\n", want: []string{`plugins.shell.env: "A=B" is not a valid variable name`}},
	{name: "pass_env a secret", yaml: "plugins:\n  shell:\n    pass_env: [DATABASE_URL]\n", want: []string{"plugins.shell.pass_env[0]: DATABASE_URL is never passed to plugins"}},
	{name: "pass_env a string", yaml: "plugins:\n  shell:\n    pass_env: PATH\n", want: []string{`plugins.shell.pass_env: expected a list, got "PATH"`}},
	{name: "plugin name bad", yaml: "plugins:\n  Sh.ell: {}\n", want: []string{"plugins.Sh.ell: plugin names must match"}},
	{name: "command without plugin", yaml: "commands:\n  etl:\n    context: {a: 1}\n", want: []string{"commands.etl.plugin: required"}},
	{name: "command with a path for a plugin", yaml: "commands:\n  etl:\n    plugin: ../evil\n", want: []string{`commands.etl.plugin: "../evil" is not a valid plugin name`}},
	{name: "command name bad", yaml: "commands:\n  Bad/Name:\n    plugin: shell\n", want: []string{"commands.Bad/Name: command names must match"}},
	{name: "context with number keys", yaml: "commands:\n  etl:\n    plugin: shell\n    context: {a: {1: b}}\n", want: []string{"commands.etl.context: cannot be stored as JSON"}},
}

// Every bad configuration is refused by the real binary, by `run` and by
// `migrate` alike: exit 1, an error naming the key, and no secret in any
// line of its output.
func TestBadConfigRefused(t *testing.T) {
	require.GreaterOrEqual(t, len(badConfigs), 70)
	exe := buildTether(t.Context(), t, t.TempDir())

	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": secretDatabaseURL, "TETHER_API_TOKENS": "ci:" + secretToken + "-000000000"}
			if strings.Contains(tc.yaml, "tokens:") {
				delete(env, "TETHER_API_TOKENS") // it would replace the file's list
			}
			for k, v := range tc.env {
				env[k] = v
			}
			var args []string
			if tc.yaml != "" {
				path := filepath.Join(t.TempDir(), "tether.yaml")
				require.NoError(t, os.WriteFile(path, []byte(tc.yaml), 0o600))
				args = append(args, "--config", path)
			}
			for _, sub := range []string{"run", "migrate"} {
				code, out := runTether(t.Context(), t, exe, env, append([]string{sub}, args...))
				assert.Equal(t, 1, code, "%s: exit code; output:\n%s", sub, out)
				for _, w := range tc.want {
					assert.Contains(t, out, w, "%s: the error names the key", sub)
				}
				assert.NotContains(t, out, "cannot unmarshal", "%s: yaml.v3's message is never the only clue", sub)
				assert.NotContains(t, out, "connecting to the database", "%s: refused before connecting", sub)
				for i, line := range strings.Split(out, "\n") {
					for _, secret := range []string{secretPassword, secretToken, secretEnvValue} {
						assert.NotContains(t, line, secret, "%s: output line %d prints a secret", sub, i+1)
					}
				}
			}
		})
	}
}

// runTether runs the binary with exactly env (plus PATH and HOME) and
// returns its exit code and stdout followed by stderr.
func runTether(ctx context.Context, t *testing.T, exe string, env map[string]string, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err, "running tether %v", args)
	}
	return cmd.ProcessState.ExitCode(), stdout.String() + stderr.String()
}
