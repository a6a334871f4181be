package ecs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

// Defaults for settings neither the plugin config nor the job sets.
const (
	DefaultCluster      = "default"
	DefaultPollInterval = 6 * time.Second
	DefaultTimeout      = time.Hour
	DefaultMaxFailCount = 1
	DefaultTaskCount    = 1
	// DefaultMaxInfraRelaunches is how many times a task the infrastructure
	// stopped (Spot reclaim, instance termination, unhealthy host) is
	// launched again, apart from max_fail_count, as AWS Batch's
	// evaluateOnExit lets one retry only infrastructure causes.
	DefaultMaxInfraRelaunches = 3
	// DefaultConsistencyWindow is how long a task RunTask started may be
	// MISSING from DescribeTasks before the job gives up on it. The RunTask
	// API reference advises retrying DescribeTasks with a backoff growing
	// to five minutes.
	DefaultConsistencyWindow = 5 * time.Minute
	// DefaultLaunchRetryTimeout bounds retrying one launch that RunTask
	// refuses for capacity or throttling.
	DefaultLaunchRetryTimeout = 15 * time.Minute
	// DefaultLogSettle is how long after a task is seen STOPPED its log
	// streams are read to the end one last time. It must exceed
	// CloudWatch's delivery lag (the awslogs driver sends every 5 s by
	// default) for the last lines to be in.
	DefaultLogSettle = 10 * time.Second
	// DefaultLogDrainTimeout bounds waiting for a stopped task's logs
	// (read errors, a budget shared by many jobs). The job then ends with a
	// line saying its log may be incomplete.
	DefaultLogDrainTimeout = 5 * time.Minute
	// DefaultLogStreamWait is how long a stopped task's log stream that
	// does not exist yet is looked for. awslogs creates a stream with its
	// first event, and CloudWatch may show it later than log_settle under
	// load. A container that never wrote a line costs this much.
	DefaultLogStreamWait = 10 * time.Second
	// DefaultStoppedTaskRetention is how long ECS is taken to keep a
	// stopped task describable. A launch older than this whose task is not
	// found is never reissued.
	DefaultStoppedTaskRetention = time.Hour
)

// Keys accepted in plugins.ecs.config and in a job's context. The context wins.
var configKeys = []string{
	"api_rates", "cluster", "consistency_window", "container_overrides", "cpu",
	"endpoint", "execution_role_arn", "launch_retry_timeout", "launch_type",
	"live_tail", "live_tail_sessions", "log_drain_timeout", "log_settle", "log_stream_wait", "max_fail_count", "max_infra_relaunches",
	"memory", "network_configuration", "poll_interval", "region",
	"stopped_task_retention", "tags", "task_count", "task_definition",
	"task_definition_template", "task_role_arn", "timeout",
}

var networkKeys = []string{"assign_public_ip", "security_groups", "subnets"}

var overrideKeys = []string{"command", "cpu", "environment", "memory", "name"}

// Config is a job's validated, merged settings.
type Config struct {
	Cluster          string
	LaunchType       string // "" leaves it to the cluster's default capacity provider
	Network          *Network
	ExecutionRoleARN string
	TaskRoleARN      string
	// Exactly one of TaskDefinition and Template is set.
	TaskDefinition     string          // family, family:revision or ARN
	Template           json.RawMessage // a RegisterTaskDefinition input, JSON object
	ContainerOverrides []ContainerOverride
	TaskCount          int
	CPU                string // task-level override
	Memory             string // task-level override
	Tags               map[string]string
	PollInterval       time.Duration
	Timeout            time.Duration // 0 disables
	MaxFailCount       int
	Region             string
	Endpoint           string

	MaxInfraRelaunches   int
	ConsistencyWindow    time.Duration
	LaunchRetryTimeout   time.Duration
	LogSettle            time.Duration
	LogDrainTimeout      time.Duration
	LogStreamWait        time.Duration
	StoppedTaskRetention time.Duration
	// LiveTail follows running tasks' output with StartLiveTail
	// (livetail.go); false polls it with GetLogEvents.
	LiveTail bool
	// LiveTailSessions is how many sessions per log group (each a share
	// of the task IDs) the process holds.
	LiveTailSessions int
	// APIRates are the process's calls per second per API (api_rates).
	// Missing entries take DefaultAPIRates.
	APIRates map[string]float64
}

// Network is the awsvpc network configuration.
type Network struct {
	Subnets        []string
	SecurityGroups []string
	AssignPublicIP bool
}

// ContainerOverride overrides one container of the task definition.
type ContainerOverride struct {
	Name        string
	Command     []string
	Environment map[string]string
	CPU         *int32
	Memory      *int32
}

// dec decodes the plugin's settings. Its errors start "ecs: ".
var dec = settings.Decoder{Prefix: "ecs: "}

// parseConfig merges the plugin config (cluster-level defaults) with the
// job's context (the command's default context merged with the job's own)
// and validates the result. Context keys replace config keys, except tags,
// which are merged (context wins per tag, a null tag removes it). A context
// that names a task definition in either form replaces the config's in both
// forms. A null value unsets a key.
func parseConfig(rawConfig, rawContext json.RawMessage) (Config, error) {
	c, err := decodeConfig(rawConfig, rawContext)
	if err != nil {
		return Config{}, err
	}
	if c.TaskDefinition == "" && c.Template == nil {
		return Config{}, dec.Errorf(`neither task_definition ("family[:revision]" or an ARN) nor task_definition_template is set`)
	}
	return c, nil
}

// decodeConfig is parseConfig without the check that a task definition is
// set, which a command's default context may leave to its jobs. Validate
// uses it on the plugin config alone and on each command's default context.
func decodeConfig(rawConfig, rawContext json.RawMessage) (Config, error) {
	merged, err := mergeSettings(rawConfig, rawContext)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		Cluster:      DefaultCluster,
		TaskCount:    DefaultTaskCount,
		PollInterval: DefaultPollInterval,
		Timeout:      DefaultTimeout,
		MaxFailCount: DefaultMaxFailCount,
		Tags:         map[string]string{},

		MaxInfraRelaunches:   DefaultMaxInfraRelaunches,
		ConsistencyWindow:    DefaultConsistencyWindow,
		LaunchRetryTimeout:   DefaultLaunchRetryTimeout,
		LogSettle:            DefaultLogSettle,
		LogDrainTimeout:      DefaultLogDrainTimeout,
		LogStreamWait:        DefaultLogStreamWait,
		StoppedTaskRetention: DefaultStoppedTaskRetention,
		LiveTail:             true,
		LiveTailSessions:     1,
	}
	if err := decodeFields("", merged, c.fields()); err != nil {
		return Config{}, err
	}
	if err := c.check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// mergeSettings decodes the plugin config and the job's context and merges
// them. A context that names a task definition in either form replaces the
// config's in both forms, and tags are merged tag by tag.
func mergeSettings(rawConfig, rawContext json.RawMessage) (settings.Fields, error) {
	cfgFields, err := dec.Object("config", rawConfig, configKeys)
	if err != nil {
		return nil, err
	}
	ctxFields, err := dec.Object("context", rawContext, configKeys)
	if err != nil {
		return nil, err
	}
	// api_rates is a setting of the plugin process, not of one job.
	if _, ok := ctxFields["api_rates"]; ok {
		return nil, dec.Errorf("api_rates: a setting of the plugin process; set it in plugins.ecs.config, not in a job's context")
	}
	_, ctxTD := ctxFields["task_definition"]
	_, ctxTpl := ctxFields["task_definition_template"]
	if ctxTD || ctxTpl {
		delete(cfgFields, "task_definition")
		delete(cfgFields, "task_definition_template")
	}
	return dec.Merge(cfgFields, ctxFields, "tags")
}

// fieldDecoder decodes the value of one key into its field of a Config.
type fieldDecoder func(key string, v json.RawMessage) error

// field is one key of a mapping and the decoder of its value.
type field struct {
	key    string
	decode fieldDecoder
}

// decodeFields decodes the keys of fields that are set, in the table's
// order, so the first error is the same every time. Errors name a key
// prefix+key.
func decodeFields(prefix string, fields settings.Fields, table []field) error {
	for _, f := range table {
		if v, ok := fields.Get(f.key); ok {
			if err := f.decode(prefix+f.key, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// fields are the decoders of every key, each setting its field of c: tags
// first, then the others in sorted order, as the keys were always decoded.
func (c *Config) fields() []field {
	return []field{
		{"tags", set(&c.Tags, dec.StringMap)},
		{"api_rates", set(&c.APIRates, unkeyed(parseRates))},
		{"cluster", set(&c.Cluster, dec.String)},
		{"consistency_window", set(&c.ConsistencyWindow, duration(false))},
		{"container_overrides", set(&c.ContainerOverrides, unkeyed(parseOverrides))},
		{"cpu", set(&c.CPU, numberOrString)},
		{"endpoint", set(&c.Endpoint, parseEndpoint)},
		{"execution_role_arn", set(&c.ExecutionRoleARN, dec.String)},
		{"launch_retry_timeout", set(&c.LaunchRetryTimeout, duration(true))},
		{"launch_type", set(&c.LaunchType, oneOf("EC2", "FARGATE", "EXTERNAL", "MANAGED_INSTANCES"))},
		{"live_tail", set(&c.LiveTail, dec.Bool)},
		{"live_tail_sessions", set(&c.LiveTailSessions, intIn(1, MaxLiveTailSessions))},
		{"log_drain_timeout", set(&c.LogDrainTimeout, duration(false))},
		{"log_settle", set(&c.LogSettle, duration(true))},
		{"log_stream_wait", set(&c.LogStreamWait, duration(false))},
		{"max_fail_count", set(&c.MaxFailCount, intIn(1, 100))},
		{"max_infra_relaunches", set(&c.MaxInfraRelaunches, intIn(0, 100))},
		{"memory", set(&c.Memory, numberOrString)},
		{"network_configuration", set(&c.Network, unkeyed(parseNetwork))},
		{"poll_interval", set(&c.PollInterval, duration(false))},
		{"region", set(&c.Region, dec.String)},
		{"stopped_task_retention", set(&c.StoppedTaskRetention, duration(false))},
		{"task_count", set(&c.TaskCount, intIn(1, MaxTaskCount))},
		{"task_definition", set(&c.TaskDefinition, dec.String)},
		{"task_definition_template", set(&c.Template, unkeyed(parseTemplate))},
		{"task_role_arn", set(&c.TaskRoleARN, dec.String)},
		{"timeout", set(&c.Timeout, duration(true))},
	}
}

// set returns a decoder that stores what parse makes of a value in *dst.
func set[T any](dst *T, parse func(key string, v json.RawMessage) (T, error)) fieldDecoder {
	return func(key string, v json.RawMessage) (err error) {
		*dst, err = parse(key, v)
		return err
	}
}

// unkeyed adapts a parser that names its key in its errors itself.
func unkeyed[T any](parse func(v json.RawMessage) (T, error)) func(string, json.RawMessage) (T, error) {
	return func(_ string, v json.RawMessage) (T, error) { return parse(v) }
}

func oneOf(allowed ...string) func(string, json.RawMessage) (string, error) {
	return func(key string, v json.RawMessage) (string, error) { return dec.OneOf(key, v, allowed...) }
}

func intIn(lo, hi int) func(string, json.RawMessage) (int, error) {
	return func(key string, v json.RawMessage) (int, error) { return dec.Int(key, v, lo, hi) }
}

// nonBlank reads a list of strings none of which is empty.
func nonBlank(what string, v json.RawMessage) ([]string, error) { return dec.Strings(what, v, false) }

func duration(zeroOK bool) func(string, json.RawMessage) (time.Duration, error) {
	return func(key string, v json.RawMessage) (time.Duration, error) { return dec.Duration(key, v, zeroOK) }
}

// parseEndpoint reads endpoint, an http:// or https:// URL.
func parseEndpoint(key string, v json.RawMessage) (string, error) {
	s, err := dec.String(key, v)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return "", dec.Errorf("endpoint: must be an http:// or https:// URL, got %q", s)
	}
	return s, nil
}

// check validates what no single key decides: the task definition's two
// forms, the log timings and the tags.
func (c *Config) check() error {
	if c.TaskDefinition != "" && c.Template != nil {
		return dec.Errorf("both task_definition and task_definition_template are set; set exactly one")
	}
	if c.Template != nil {
		if _, err := decodeTemplate(c.Template); err != nil {
			return err
		}
	}
	if c.LogDrainTimeout <= c.LogSettle {
		return dec.Errorf("log_drain_timeout (%s) must be longer than log_settle (%s)", c.LogDrainTimeout, c.LogSettle)
	}
	if c.LogStreamWait > c.LogDrainTimeout {
		return dec.Errorf("log_stream_wait (%s) must not be longer than log_drain_timeout (%s)", c.LogStreamWait, c.LogDrainTimeout)
	}
	return checkTags(c.Tags)
}

// checkTags keeps the job's tags within ECS's limit beside tether's own and
// out of the reserved prefixes.
func checkTags(tags map[string]string) error {
	if len(tags)+len(tetherTagKeys) > 50 {
		return dec.Errorf("tags: %d tags plus tether's %d exceed ECS's limit of 50", len(tags), len(tetherTagKeys))
	}
	for k := range tags {
		if strings.HasPrefix(strings.ToLower(k), "aws:") || strings.HasPrefix(k, "tether:") {
			return dec.Errorf("tags: key %q uses a reserved prefix (aws: or tether:)", k)
		}
	}
	return nil
}

// parseClusterConfig reads only what HealthCheck and Cleanup need from the
// plugin config. The task definition may be left to jobs.
func parseClusterConfig(raw json.RawMessage) (cluster, region, endpoint string, err error) {
	fields, err := dec.Object("config", raw, configKeys)
	if err != nil {
		return "", "", "", err
	}
	cluster = DefaultCluster
	err = decodeFields("", fields, []field{
		{"cluster", set(&cluster, dec.String)},
		{"region", set(&region, dec.String)},
		{"endpoint", set(&endpoint, dec.String)},
	})
	if err != nil {
		return "", "", "", err
	}
	return cluster, region, endpoint, nil
}

func parseNetwork(v json.RawMessage) (*Network, error) {
	fields, err := dec.Object("network_configuration", v, networkKeys)
	if err != nil {
		return nil, err
	}
	n := &Network{}
	err = decodeFields("network_configuration.", fields, []field{
		{"subnets", set(&n.Subnets, nonBlank)},
		{"security_groups", set(&n.SecurityGroups, nonBlank)},
		{"assign_public_ip", set(&n.AssignPublicIP, dec.Bool)},
	})
	if err != nil {
		return nil, err
	}
	if len(n.Subnets) == 0 {
		return nil, dec.Errorf("network_configuration.subnets: at least one subnet is required")
	}
	return n, nil
}

// parseTemplate accepts a JSON object, or a string holding a YAML or JSON
// document, and returns it as a JSON object.
func parseTemplate(v json.RawMessage) (json.RawMessage, error) {
	switch settings.Kind(v) {
	case "object":
		return v, nil
	case "string":
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, dec.Errorf("task_definition_template: %v", err)
		}
		var doc any
		if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
			return nil, dec.Errorf("task_definition_template: not valid YAML or JSON: %v", err)
		}
		if _, ok := doc.(map[string]any); !ok {
			return nil, dec.Errorf("task_definition_template: must be a mapping")
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, dec.Errorf("task_definition_template: %v", err)
		}
		return b, nil
	default:
		return nil, dec.Errorf("task_definition_template: must be a RegisterTaskDefinition input (a mapping), got %s", settings.Kind(v))
	}
}

func parseOverrides(v json.RawMessage) ([]ContainerOverride, error) {
	if settings.Kind(v) != "array" {
		return nil, dec.Errorf("container_overrides: must be a list, got %s", settings.Kind(v))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, dec.Errorf("container_overrides: %v", err)
	}
	out := make([]ContainerOverride, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		o, err := parseOverride(fmt.Sprintf("container_overrides[%d]", i), item, seen)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// parseOverride reads one entry of container_overrides. seen holds the
// container names of the entries before it.
func parseOverride(what string, item json.RawMessage, seen map[string]bool) (ContainerOverride, error) {
	fields, err := dec.Object(what, item, overrideKeys)
	if err != nil {
		return ContainerOverride{}, err
	}
	var o ContainerOverride
	if o.Name, err = overrideName(what, fields, seen); err != nil {
		return ContainerOverride{}, err
	}
	err = decodeFields(what+".", fields, []field{
		{"command", set(&o.Command, nonBlank)},
		{"environment", set(&o.Environment, dec.StringMap)},
		{"cpu", set(&o.CPU, containerUnits)},
		{"memory", set(&o.Memory, containerUnits)},
	})
	if err != nil {
		return ContainerOverride{}, err
	}
	return o, nil
}

// overrideName reads an override's required name, which no other override
// may have.
func overrideName(what string, fields settings.Fields, seen map[string]bool) (string, error) {
	f, ok := fields.Get("name")
	if !ok {
		return "", dec.Errorf("%s.name: required", what)
	}
	name, err := dec.String(what+".name", f)
	if err != nil {
		return "", err
	}
	if seen[name] {
		return "", dec.Errorf("%s.name: container %q is overridden twice", what, name)
	}
	seen[name] = true
	return name, nil
}

// containerUnits reads a container's cpu or memory.
func containerUnits(what string, v json.RawMessage) (*int32, error) {
	n, err := dec.Int(what, v, 0, 1<<30)
	if err != nil {
		return nil, err
	}
	x := int32(n)
	return &x, nil
}

// numberOrString accepts 256 or "256" or "0.25 vCPU", as ECS's cpu and memory do.
func numberOrString(what string, v json.RawMessage) (string, error) {
	if settings.Kind(v) == "number" {
		n, err := dec.Int(what, v, 1, 1<<30)
		return strconv.Itoa(n), err
	}
	return dec.String(what, v)
}

// parseRates reads api_rates. They are calls per second per API, each a
// positive number, keyed by the names in DefaultAPIRates.
func parseRates(v json.RawMessage) (map[string]float64, error) {
	fields, err := dec.Object("api_rates", v, slices.Sorted(maps.Keys(DefaultAPIRates)))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for k, f := range fields {
		var r float64
		// Only a number decodes, or null, which leaves r at 0.
		if json.Unmarshal(f, &r) != nil || r <= 0 || r > 1000 {
			return nil, dec.Errorf("api_rates.%s: must be a number of calls per second above 0 and at most 1000, got %s", k, string(f))
		}
		out[k] = r
	}
	return out, nil
}
