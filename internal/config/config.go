// Package config loads tether's configuration. It reads a YAML file, then
// TETHER_* environment overrides (and DATABASE_URL), on top of defaults.
// Validate checks every value and every relation between values at start,
// naming the key and the fix.
package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/limits"
)

// DefaultStopTimeout is drain.stop_timeout's default: the stopTimeout
// deploy/ecs-task-definition.json sets, the most Fargate allows. ECS waits
// only 30s when a container sets none.
const DefaultStopTimeout = 120 * time.Second

// drainWriteBound is what a drain allows, past the longest kill_grace, for
// the final writes of the jobs it stopped.
const drainWriteBound = 2 * time.Second

// Config is the whole configuration of an agent.
type Config struct {
	// DatabaseURL is a libpq URL or keyword/value string. Env: DATABASE_URL.
	// It holds the database password: never printed unredacted.
	DatabaseURL string `yaml:"database_url" env:"DATABASE_URL" secret:"true"`
	// DatabaseSecret names an AWS Secrets Manager secret (name or ARN)
	// holding the database password, the user name and password as JSON
	// (an RDS-managed secret), or the whole URL. The agent reads it at start
	// and applies it to DatabaseURL (internal/dbsecret).
	DatabaseSecret string `yaml:"database_secret"`
	// DatabaseDirectURL is where the session-bound connections go (the
	// agent name lock, whose release is a liveness signal, and LISTEN):
	// PostgreSQL itself, not a transaction pooler. "" means DatabaseURL.
	DatabaseDirectURL string `yaml:"database_direct_url" env:"TETHER_DATABASE_DIRECT_URL" secret:"true"`
	// DatabaseConnectTimeout bounds each connection attempt to the
	// database (TCP, TLS and the start-up exchange), so a database that
	// accepts and never answers fails the start with a message instead of
	// hanging it. A connect_timeout in the URL takes precedence.
	DatabaseConnectTimeout Duration `yaml:"database_connect_timeout" env:"TETHER_DATABASE_CONNECT_TIMEOUT"`
	// DatabaseMaxConns is the work pool. It serves claiming, the janitor and
	// the jobs' writes (running and final writes are batched, so it does not
	// grow with agent.capacity). The API has its own (http.database_max_conns).
	DatabaseMaxConns int   `yaml:"database_max_conns" env:"TETHER_DATABASE_MAX_CONNS"`
	Agent            Agent `yaml:"agent"`
	HTTP             HTTP  `yaml:"http"`
	Logs             Logs  `yaml:"logs"`
	Drain            Drain `yaml:"drain"`
	// PluginDir is where tether-plugin-<name> binaries are found. "" means
	// the directory of the running tether executable.
	PluginDir string `yaml:"plugin_dir"`
	// Plugins holds per-plugin settings by plugin name. A plugin found in
	// PluginDir needs no entry.
	Plugins map[string]Plugin `yaml:"plugins"`
	// Commands are what submitters ask for, by name.
	Commands map[string]Command `yaml:"commands"`
	// Defaults are the global defaults of the job lifecycle levers. A
	// command's limits override them. Env: TETHER_DEFAULT_<LEVER>.
	Defaults Defaults `yaml:"defaults"`
}

// Defaults are the global defaults of the job lifecycle levers.
type Defaults struct {
	MaxRetry        int      `yaml:"max_retry" env:"TETHER_DEFAULT_MAX_RETRY" max:"2147483647"` // automatic retries of a retriable failure; stored in an int4 column
	RetryBackoff    Duration `yaml:"retry_backoff" env:"TETHER_DEFAULT_RETRY_BACKOFF"`          // first wait between attempts
	RetryBackoffMax Duration `yaml:"retry_backoff_max" env:"TETHER_DEFAULT_RETRY_BACKOFF_MAX"`  // cap of the doubling wait
	PendingTimeout  Duration `yaml:"pending_timeout" env:"TETHER_DEFAULT_PENDING_TIMEOUT"`      // 0 = off
	ActiveTimeout   Duration `yaml:"active_timeout" env:"TETHER_DEFAULT_ACTIVE_TIMEOUT"`        // 0 = off
	TTLSucceeded    Duration `yaml:"ttl_succeeded" env:"TETHER_DEFAULT_TTL_SUCCEEDED"`          // 0 = keep forever
	TTLFailed       Duration `yaml:"ttl_failed" env:"TETHER_DEFAULT_TTL_FAILED"`                // failed and canceled; 0 = keep forever
}

// Set returns the defaults as a complete set of levers.
func (d Defaults) Set() limits.Set {
	return limits.Set{
		MaxRetry: d.MaxRetry, RetryBackoff: d.RetryBackoff.Std(), RetryBackoffMax: d.RetryBackoffMax.Std(),
		PendingTimeout: d.PendingTimeout.Std(), ActiveTimeout: d.ActiveTimeout.Std(),
		TTLSucceeded: d.TTLSucceeded.Std(), TTLFailed: d.TTLFailed.Std(),
	}
}

// Limits are a command's levers. An unset one takes the global default.
// Max bounds what a submit request may ask for per job.
type Limits struct {
	MaxRetry        *int      `yaml:"max_retry" max:"2147483647"` // stored in an int4 column
	RetryBackoff    *Duration `yaml:"retry_backoff"`
	RetryBackoffMax *Duration `yaml:"retry_backoff_max"`
	PendingTimeout  *Duration `yaml:"pending_timeout"`
	ActiveTimeout   *Duration `yaml:"active_timeout"`
	TTLSucceeded    *Duration `yaml:"ttl_succeeded"`
	TTLFailed       *Duration `yaml:"ttl_failed"`
	// Max holds the largest value a submit request may set for each lever
	// it names. A lever it does not name may be set to anything.
	Max *Limits `yaml:"max"`
}

// Partial returns the levers the command sets.
func (l Limits) Partial() limits.Partial {
	d := func(v *Duration) *time.Duration {
		if v == nil {
			return nil
		}
		s := v.Std()
		return &s
	}
	return limits.Partial{
		MaxRetry: l.MaxRetry, RetryBackoff: d(l.RetryBackoff), RetryBackoffMax: d(l.RetryBackoffMax),
		PendingTimeout: d(l.PendingTimeout), ActiveTimeout: d(l.ActiveTimeout),
		TTLSucceeded: d(l.TTLSucceeded), TTLFailed: d(l.TTLFailed),
	}
}

// MaxPartial returns the command's per-job maxima.
func (l Limits) MaxPartial() limits.Partial {
	if l.Max == nil {
		return limits.Partial{}
	}
	return l.Max.Partial()
}

// ResolveLimits returns what a job of this command runs under: defaults,
// then the command's limits, then the request's override (each lever of
// which must be within the command's maximum). Errors name the override's
// fields.
func (c Command) ResolveLimits(defaults Defaults, override limits.Partial) (limits.Set, []*limits.FieldError) {
	return limits.Resolve(defaults.Set(), c.Limits.Partial(), c.Limits.MaxPartial(), override)
}

// Agent holds the agent's identity, capacity and timing.
type Agent struct {
	// Name is the agent's stable identity. "" means the ECS task ID when
	// running on ECS, else the hostname. Unique per live process.
	Name         string   `yaml:"name"`
	Capacity     int      `yaml:"capacity"`      // jobs run at once
	PollInterval Duration `yaml:"poll_interval"` // claim poll when no notification arrives
	Keepalive    Duration `yaml:"keepalive"`     // heartbeat period
	StaleJob     Duration `yaml:"stale_job"`     // silence after which running jobs are released or failed
	OfflineAfter Duration `yaml:"offline_after"` // silence after which accepted jobs are requeued; 0 = 3 × keepalive
	// DeadAfter sets when an agent is dead. An agent whose name lock has
	// been seen free and that has not heartbeat for this long is dead. Its
	// accepted jobs are requeued and its resumable running jobs released at
	// once, without waiting for stale_job. 0 = 2 × keepalive. Agents
	// announce it (and keepalive, stale_job) in their agents row, and each
	// judges another by the larger of its own and the other's.
	DeadAfter Duration `yaml:"dead_after"`
	// NameLockLiveness turns that early detection on (default true). Off,
	// only stale_job and offline_after apply.
	NameLockLiveness *bool    `yaml:"name_lock_liveness"`
	CleanInterval    Duration `yaml:"clean_interval"`   // janitor period
	AWOLTimeout      Duration `yaml:"awol_timeout"`     // how long a released job may wait to be resumed
	ShutdownTimeout  Duration `yaml:"shutdown_timeout"` // drain: wait for non-resumable jobs
	// CleanupTimeout bounds one plugin Cleanup call. 0 = the smaller of
	// DefaultCleanupTimeout and stale_job/2 (filled in by Load and Parse).
	// Must be less than stale_job.
	CleanupTimeout Duration `yaml:"cleanup_timeout"`
	// AgentRetention is how long the row of an agent that stopped or went
	// silent, and holds no job, stays listed before the janitor prunes it.
	AgentRetention Duration `yaml:"agent_retention"`
	// HealthInterval is the period of the plugins' health checks (those
	// that declare HealthCheck). A failing plugin makes /readyz answer 503.
	HealthInterval Duration `yaml:"health_interval"`
}

// DefaultCleanupTimeout bounds one plugin Cleanup call unless
// agent.cleanup_timeout says otherwise or stale_job/2 is shorter.
const DefaultCleanupTimeout = defaults.CleanupTimeout

// HTTP configures the API server.
type HTTP struct {
	Listen       string `yaml:"listen"`
	MaxBodyBytes int64  `yaml:"max_body_bytes"`
	// Tokens enable bearer-token auth when non-empty. Env: TETHER_API_TOKENS
	// ("name:token,name2:token2") replaces the list.
	Tokens        []Token  `yaml:"tokens" env:"-" secret:"true"`
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// AllowedHosts are the Host header values the API answers (a name, a
	// name:port, or "*" for any). IP literals, localhost and the listen
	// address's host are always allowed. Empty with tokens configured
	// means any host. A page rebinding a name to an agent cannot send a
	// token. Env: TETHER_HTTP_ALLOWED_HOSTS (comma-separated).
	AllowedHosts []string `yaml:"allowed_hosts" env:"TETHER_HTTP_ALLOWED_HOSTS"`
	// Server timeouts. Followed log streams are exempt from WriteTimeout
	// (they last as long as the job).
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	ReadTimeout       Duration `yaml:"read_timeout"`
	WriteTimeout      Duration `yaml:"write_timeout"`
	IdleTimeout       Duration `yaml:"idle_timeout"`
	// DatabaseMaxConns is the API's own pool, so clients cannot take the
	// connections the jobs' writes need, nor the other way round.
	DatabaseMaxConns int `yaml:"database_max_conns" env:"TETHER_HTTP_DATABASE_MAX_CONNS"`
	// Console serves the web console at / (default true). It is static
	// files. Its data comes from the API under the same auth.
	Console *bool `yaml:"console"`
}

// Token is one API bearer token. Name is recorded as the submitter of the
// jobs submitted with it.
type Token struct {
	Name  string `yaml:"name"`
	Token string `yaml:"token"`
}

// Drain configures what an agent does with its jobs on SIGTERM/SIGINT.
type Drain struct {
	// Handoff is when resumable jobs are released to other agents:
	// "immediate" (at once, the default), "deadline" (keep watching them
	// until shutdown_timeout, then release) or "never" (only stop watching;
	// the janitor releases them).
	Handoff string `yaml:"handoff"`
	// StopTimeout is how long the container runtime waits after SIGTERM
	// before it kills the agent: the ECS container's stopTimeout (30s when
	// the task definition sets none, at most 120s on Fargate), Kubernetes'
	// terminationGracePeriodSeconds, `docker stop --time`. The whole drain
	// must end inside it; Validate checks the sum and the agent logs it at
	// start. Env: TETHER_DRAIN_STOP_TIMEOUT.
	StopTimeout Duration `yaml:"stop_timeout"`
}

// Handoff modes.
const (
	HandoffImmediate = "immediate"
	HandoffDeadline  = "deadline"
	HandoffNever     = "never"
)

// Logs configures job log capture.
type Logs struct {
	MaxBytesPerStream int64    `yaml:"max_bytes_per_stream"` // per job and stream; the rest is dropped with a marker
	FlushInterval     Duration `yaml:"flush_interval"`       // batching of log writes
	// BufferBudget bounds the job output the agent holds in memory, all
	// jobs together, in bytes. 0: sized from agent.capacity
	// (claim.DefaultLogBufferBudget).
	BufferBudget int64 `yaml:"buffer_budget"`
}

// Plugin holds the settings of one plugin binary.
type Plugin struct {
	// SHA256 pins the binary (hex). "" means not pinned.
	SHA256 string `yaml:"sha256"`
	// Env is set in the plugin's environment. Its values may be secrets.
	// They are never printed.
	Env map[string]string `yaml:"env" secret:"true"`
	// PassEnv names variables passed through from the agent's environment.
	// A trailing * matches a prefix ("AWS_*"). What SecretEnv reports
	// (DATABASE_URL, PG*, TETHER_*) never passes.
	PassEnv []string `yaml:"pass_env"`
	// Config is free-form and given to the plugin as JSON.
	Config map[string]any `yaml:"config"`
	// MaxKillGrace is the longest the plugin may take to stop its local
	// work after a cancel, for the self-fence arithmetic. It is the agent's
	// key, never passed to the plugin (whose strict decoding would refuse
	// it). 0: what the plugin reports, or its config's max_kill_grace.
	MaxKillGrace Duration `yaml:"max_kill_grace"`
}

// Command is a named kind of job: the plugin that runs it and its default
// context.
type Command struct {
	Plugin  string         `yaml:"plugin"`
	Context map[string]any `yaml:"context"`
	// Limits are the command's lifecycle levers. Unset ones take defaults.
	Limits Limits `yaml:"limits"`
}

// Default returns the configuration with every default filled in.
func Default() *Config {
	return &Config{
		Agent: Agent{
			Capacity:        defaults.Capacity,
			PollInterval:    Duration(defaults.PollInterval),
			Keepalive:       Duration(defaults.Keepalive),
			StaleJob:        Duration(defaults.StaleJob),
			CleanInterval:   Duration(defaults.CleanInterval),
			AWOLTimeout:     Duration(defaults.AWOLTimeout),
			ShutdownTimeout: Duration(defaults.ShutdownTimeout),
			AgentRetention:  Duration(defaults.AgentRetention),
			HealthInterval:  Duration(defaults.HealthInterval),
		},
		HTTP: HTTP{
			Listen:        defaults.Listen,
			MaxBodyBytes:  defaults.MaxBodyBytes,
			ShutdownGrace: Duration(defaults.ShutdownGrace),

			ReadHeaderTimeout: Duration(defaults.HTTPReadHeaderTimeout),
			ReadTimeout:       Duration(defaults.HTTPReadTimeout),
			WriteTimeout:      Duration(defaults.HTTPWriteTimeout),
			IdleTimeout:       Duration(defaults.HTTPIdleTimeout),
			DatabaseMaxConns:  defaults.HTTPDatabaseMaxConns,
		},
		DatabaseConnectTimeout: Duration(defaults.DatabaseConnectTimeout),
		DatabaseMaxConns:       defaults.DatabaseMaxConns,
		Drain:                  Drain{Handoff: HandoffImmediate, StopTimeout: Duration(DefaultStopTimeout)},
		Defaults:               defaultLimits(),
		Logs: Logs{
			MaxBytesPerStream: defaults.LogMaxBytesStream,
			FlushInterval:     Duration(defaults.LogFlush),
		},
	}
}

func defaultLimits() Defaults {
	d := limits.Defaults()
	return Defaults{
		MaxRetry: d.MaxRetry, RetryBackoff: Duration(d.RetryBackoff), RetryBackoffMax: Duration(d.RetryBackoffMax),
		PendingTimeout: Duration(d.PendingTimeout), ActiveTimeout: Duration(d.ActiveTimeout),
		TTLSucceeded: Duration(d.TTLSucceeded), TTLFailed: Duration(d.TTLFailed),
	}
}

// Load reads the YAML file at path ("" = none), applies environment overrides
// read through getenv (nil = os.Getenv), fills derived defaults and validates.
// Every problem found is reported, joined.
func Load(path string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		if err := parseYAML(b, cfg); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := applyEnv(cfg, getenv); err != nil {
		return nil, err
	}
	cfg, err := cfg.completed()
	return cfg, NameEnv(err, EnvSet(getenv))
}

// Parse decodes YAML onto the defaults without environment overrides and
// validates the result.
func Parse(b []byte) (*Config, error) {
	cfg := Default()
	if err := parseYAML(b, cfg); err != nil {
		return nil, err
	}
	return cfg.completed()
}

// completed fills the derived defaults and validates: the end of Load and
// Parse.
func (c *Config) completed() (*Config, error) {
	c.fillDerived()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func parseYAML(b []byte, cfg *Config) error {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return fmt.Errorf("parsing YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return nil // empty file: defaults
	}
	// Walk the document first so every unknown key and bad duration is
	// reported with its full path, not one at a time with a Go type name.
	var errs []error
	checkNode(root.Content[0], configType, spot{}, &errs)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil { // the document is not empty, so never io.EOF
		return fmt.Errorf("parsing YAML: %w", withoutValues(err))
	}
	return nil
}

// yamlValueRe matches the value yaml.v3 quotes in a type error ("cannot
// unmarshal !!str `abc` into int"), greedily: a value may hold backticks.
var yamlValueRe = regexp.MustCompile("(?s) `.*` into ")

// withoutValues strips the values yaml.v3 quotes in its type errors, which
// may be secrets. checkNode reports every such problem first, with its key.
// This is the backstop should one slip through.
func withoutValues(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = yamlValueRe.ReplaceAllString(m, " (value not shown) into ")
	}
	return errors.New(strings.Join(msgs, "; "))
}

// fillDerived sets defaults that depend on other values.
func (c *Config) fillDerived() {
	a := &c.Agent
	a.OfflineAfter = cmp.Or(a.OfflineAfter, 3*a.Keepalive)
	a.DeadAfter = cmp.Or(a.DeadAfter, 2*a.Keepalive)
	if a.StaleJob > 0 { // else stale_job's own problem is reported alone
		a.CleanupTimeout = cmp.Or(a.CleanupTimeout, min(Duration(DefaultCleanupTimeout), a.StaleJob/2))
	}
}

// ConsoleOn reports whether http.console is on (unset means on).
func (h HTTP) ConsoleOn() bool { return h.Console == nil || *h.Console }

// LockLiveness reports whether agent.name_lock_liveness is on.
func (a Agent) LockLiveness() bool { return a.NameLockLiveness == nil || *a.NameLockLiveness }

// DirectURL is the URL of the session-bound connections. It is
// database_direct_url, or database_url when that is not set.
func (c *Config) DirectURL() string { return cmp.Or(c.DatabaseDirectURL, c.DatabaseURL) }

// CommandNames returns the configured command names, sorted.
func (c *Config) CommandNames() []string {
	return sortedKeys(c.Commands)
}

// ContextJSON returns the command's default context as a JSON object.
func (c Command) ContextJSON() (json.RawMessage, error) {
	return objectJSON(c.Context, "default context")
}

// ConfigJSON returns the plugin's free-form config as a JSON object.
func (p Plugin) ConfigJSON() (json.RawMessage, error) {
	return objectJSON(p.Config, "plugin config")
}

// objectJSON encodes a free-form mapping as a JSON object, {} when empty
// (never null). what names it in the error.
func objectJSON(m map[string]any, what string) (json.RawMessage, error) {
	if len(m) == 0 {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", what, err)
	}
	return b, nil
}
