// Package config loads tether's configuration: a YAML file, then TETHER_*
// environment overrides (and DATABASE_URL), on top of defaults; Validate
// checks every value and every relation between values at start, naming the
// key and the fix.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// ECSStopTimeout is how long ECS waits after SIGTERM before it kills a task
// (the task definition's stopTimeout, at most 120s on Fargate). The drain
// must finish inside it.
const ECSStopTimeout = 120 * time.Second

// DrainStopBound is how long a drain may take, after shutdown_timeout, to stop
// the jobs still running: the plugins' own grace (the shell plugin's
// kill_grace, 10s by default) plus the final writes.
const DrainStopBound = 12 * time.Second

// Config is the whole configuration of an agent.
type Config struct {
	// DatabaseURL is a libpq URL or keyword/value string. Env: DATABASE_URL.
	DatabaseURL string `yaml:"database_url" env:"DATABASE_URL"`
	Agent       Agent  `yaml:"agent"`
	HTTP        HTTP   `yaml:"http"`
	Logs        Logs   `yaml:"logs"`
	Drain       Drain  `yaml:"drain"`
	// PluginDir is where tether-plugin-<name> binaries are found; "" means
	// the directory of the running tether executable.
	PluginDir string `yaml:"plugin_dir"`
	// Plugins holds per-plugin settings by plugin name. A plugin found in
	// PluginDir needs no entry.
	Plugins map[string]Plugin `yaml:"plugins"`
	// Commands are what submitters ask for, by name.
	Commands map[string]Command `yaml:"commands"`
}

// Agent holds the agent's identity, capacity and timing.
type Agent struct {
	// Name is the agent's stable identity; "" means the ECS task ID when
	// running on ECS, else the hostname. Unique per live process.
	Name            string   `yaml:"name"`
	Capacity        int      `yaml:"capacity"`         // jobs run at once
	PollInterval    Duration `yaml:"poll_interval"`    // claim poll when no notification arrives
	Keepalive       Duration `yaml:"keepalive"`        // heartbeat period
	StaleJob        Duration `yaml:"stale_job"`        // silence after which running jobs are released or failed
	OfflineAfter    Duration `yaml:"offline_after"`    // silence after which accepted jobs are requeued; 0 = 3 × keepalive
	CleanInterval   Duration `yaml:"clean_interval"`   // janitor period
	AWOLTimeout     Duration `yaml:"awol_timeout"`     // how long a released job may wait to be resumed
	ShutdownTimeout Duration `yaml:"shutdown_timeout"` // drain: wait for non-resumable jobs
}

// HTTP configures the API server.
type HTTP struct {
	Listen       string `yaml:"listen"`
	MaxBodyBytes int64  `yaml:"max_body_bytes"`
	// Tokens enable bearer-token auth when non-empty. Env: TETHER_API_TOKENS
	// ("name:token,name2:token2") replaces the list.
	Tokens        []Token  `yaml:"tokens" env:"-"`
	ShutdownGrace Duration `yaml:"shutdown_grace"`
}

// Token is one API bearer token; Name is recorded as the submitter of the
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
}

// Plugin holds the settings of one plugin binary.
type Plugin struct {
	// SHA256 pins the binary (hex); "" means not pinned.
	SHA256 string `yaml:"sha256"`
	// Env is set in the plugin's environment.
	Env map[string]string `yaml:"env"`
	// PassEnv names variables passed through from the agent's environment;
	// a trailing * matches a prefix ("AWS_*"). DATABASE_URL and
	// TETHER_API_TOKENS never pass.
	PassEnv []string `yaml:"pass_env"`
	// Config is free-form and given to the plugin as JSON.
	Config map[string]any `yaml:"config"`
}

// Command is a named kind of job: the plugin that runs it and its default
// context.
type Command struct {
	Plugin  string         `yaml:"plugin"`
	Context map[string]any `yaml:"context"`
}

// Default returns the configuration with every default filled in.
func Default() *Config {
	return &Config{
		Agent: Agent{
			Capacity:        10,
			PollInterval:    Duration(time.Second),
			Keepalive:       Duration(5 * time.Second),
			StaleJob:        Duration(120 * time.Second),
			CleanInterval:   Duration(10 * time.Second),
			AWOLTimeout:     Duration(time.Hour),
			ShutdownTimeout: Duration(100 * time.Second),
		},
		HTTP: HTTP{
			Listen:        ":9090",
			MaxBodyBytes:  1 << 20,
			ShutdownGrace: Duration(5 * time.Second),
		},
		Drain: Drain{Handoff: HandoffImmediate},
		Logs: Logs{
			MaxBytesPerStream: 10 << 20,
			FlushInterval:     Duration(200 * time.Millisecond),
		},
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
	cfg.fillDerived()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Parse decodes YAML onto the defaults without environment overrides and
// validates the result.
func Parse(b []byte) (*Config, error) {
	cfg := Default()
	if err := parseYAML(b, cfg); err != nil {
		return nil, err
	}
	cfg.fillDerived()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
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
	checkNode(root.Content[0], configType, "", &errs)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("parsing YAML: %w", err)
	}
	return nil
}

// fillDerived sets defaults that depend on other values.
func (c *Config) fillDerived() {
	if c.Agent.OfflineAfter == 0 {
		c.Agent.OfflineAfter = 3 * c.Agent.Keepalive
	}
}

// CommandNames returns the configured command names, sorted.
func (c *Config) CommandNames() []string {
	return sortedKeys(c.Commands)
}

// ContextJSON returns the command's default context as a JSON object.
func (c Command) ContextJSON() (json.RawMessage, error) {
	if len(c.Context) == 0 {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(c.Context)
	if err != nil {
		return nil, fmt.Errorf("encoding default context: %w", err)
	}
	return b, nil
}

// ConfigJSON returns the plugin's free-form config as a JSON object.
func (p Plugin) ConfigJSON() (json.RawMessage, error) {
	if len(p.Config) == 0 {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(p.Config)
	if err != nil {
		return nil, fmt.Errorf("encoding plugin config: %w", err)
	}
	return b, nil
}
