package ecs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Defaults for settings neither the plugin config nor the job sets.
const (
	DefaultCluster      = "default"
	DefaultPollInterval = 6 * time.Second
	DefaultTimeout      = time.Hour
	DefaultMaxFailCount = 1
	DefaultTaskCount    = 1
)

// Keys accepted in plugins.ecs.config and in a job's context; the context wins.
var configKeys = []string{
	"cluster", "container_overrides", "cpu", "endpoint", "execution_role_arn",
	"launch_type", "max_fail_count", "memory", "network_configuration",
	"poll_interval", "region", "tags", "task_count", "task_definition",
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

func validationError(format string, args ...any) error {
	return plugin.Errorf(plugin.Permanent, "ecs: "+format, args...)
}

// parseConfig merges the plugin config (cluster-level defaults) with the
// job's context (the command's default context merged with the job's own)
// and validates the result. Context keys replace config keys, except tags,
// which are merged (context wins per tag); a context that names a task
// definition in either form replaces the config's in both forms. A null
// value unsets a key.
func parseConfig(rawConfig, rawContext json.RawMessage) (Config, error) {
	cfgFields, err := objectFields("config", rawConfig, configKeys)
	if err != nil {
		return Config{}, err
	}
	ctxFields, err := objectFields("context", rawContext, configKeys)
	if err != nil {
		return Config{}, err
	}
	merged := map[string]json.RawMessage{}
	for k, v := range cfgFields {
		merged[k] = v
	}
	_, ctxTD := ctxFields["task_definition"]
	_, ctxTpl := ctxFields["task_definition_template"]
	if ctxTD || ctxTpl {
		delete(merged, "task_definition")
		delete(merged, "task_definition_template")
	}
	tags := map[string]string{}
	for _, src := range []struct {
		what   string
		fields map[string]json.RawMessage
	}{{"config", cfgFields}, {"context", ctxFields}} {
		if v, ok := src.fields["tags"]; ok && !isNull(v) {
			m, err := stringMap(src.what+".tags", v)
			if err != nil {
				return Config{}, err
			}
			for k, val := range m {
				tags[k] = val
			}
		}
	}
	for k, v := range ctxFields {
		merged[k] = v
	}
	for k, v := range merged {
		if isNull(v) {
			delete(merged, k)
		}
	}
	delete(merged, "tags")

	c := Config{
		Cluster:      DefaultCluster,
		TaskCount:    DefaultTaskCount,
		PollInterval: DefaultPollInterval,
		Timeout:      DefaultTimeout,
		MaxFailCount: DefaultMaxFailCount,
		Tags:         tags,
	}
	for _, key := range sortedKeys(merged) {
		v := merged[key]
		switch key {
		case "cluster":
			c.Cluster, err = nonEmptyString(key, v)
		case "launch_type":
			c.LaunchType, err = nonEmptyString(key, v)
			if err == nil && !slices.Contains([]string{"EC2", "FARGATE", "EXTERNAL", "MANAGED_INSTANCES"}, c.LaunchType) {
				err = validationError("launch_type: must be EC2, FARGATE, EXTERNAL or MANAGED_INSTANCES, got %q", c.LaunchType)
			}
		case "network_configuration":
			c.Network, err = parseNetwork(v)
		case "execution_role_arn":
			c.ExecutionRoleARN, err = nonEmptyString(key, v)
		case "task_role_arn":
			c.TaskRoleARN, err = nonEmptyString(key, v)
		case "task_definition":
			c.TaskDefinition, err = nonEmptyString(key, v)
		case "task_definition_template":
			c.Template, err = parseTemplate(v)
		case "container_overrides":
			c.ContainerOverrides, err = parseOverrides(v)
		case "task_count":
			c.TaskCount, err = intIn(key, v, 1, MaxTaskCount)
		case "cpu":
			c.CPU, err = numberOrString(key, v)
		case "memory":
			c.Memory, err = numberOrString(key, v)
		case "poll_interval":
			c.PollInterval, err = duration(key, v)
			if err == nil && c.PollInterval <= 0 {
				err = validationError("poll_interval: must be positive, got %s", v)
			}
		case "timeout":
			c.Timeout, err = duration(key, v)
		case "max_fail_count":
			c.MaxFailCount, err = intIn(key, v, 1, 100)
		case "region":
			c.Region, err = nonEmptyString(key, v)
		case "endpoint":
			c.Endpoint, err = nonEmptyString(key, v)
			if err == nil && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
				err = validationError("endpoint: must be an http:// or https:// URL, got %q", c.Endpoint)
			}
		}
		if err != nil {
			return Config{}, err
		}
	}
	switch {
	case c.TaskDefinition != "" && c.Template != nil:
		return Config{}, validationError("both task_definition and task_definition_template are set; set exactly one")
	case c.TaskDefinition == "" && c.Template == nil:
		return Config{}, validationError(`neither task_definition ("family[:revision]" or an ARN) nor task_definition_template is set`)
	}
	if c.Template != nil {
		if _, err := decodeTemplate(c.Template); err != nil {
			return Config{}, err
		}
	}
	if len(c.Tags)+len(tetherTagKeys) > 50 {
		return Config{}, validationError("tags: %d tags plus tether's %d exceed ECS's limit of 50", len(c.Tags), len(tetherTagKeys))
	}
	for k := range c.Tags {
		if strings.HasPrefix(strings.ToLower(k), "aws:") || strings.HasPrefix(k, "tether:") {
			return Config{}, validationError("tags: key %q uses a reserved prefix (aws: or tether:)", k)
		}
	}
	return c, nil
}

// parseClusterConfig reads only what HealthCheck and Cleanup need from the
// plugin config; the task definition may be left to jobs.
func parseClusterConfig(raw json.RawMessage) (cluster, region, endpoint string, err error) {
	fields, err := objectFields("config", raw, configKeys)
	if err != nil {
		return "", "", "", err
	}
	cluster = DefaultCluster
	for key, dst := range map[string]*string{"cluster": &cluster, "region": &region, "endpoint": &endpoint} {
		if v, ok := fields[key]; ok && !isNull(v) {
			if *dst, err = nonEmptyString(key, v); err != nil {
				return "", "", "", err
			}
		}
	}
	return cluster, region, endpoint, nil
}

func parseNetwork(v json.RawMessage) (*Network, error) {
	fields, err := objectFields("network_configuration", v, networkKeys)
	if err != nil {
		return nil, err
	}
	n := &Network{}
	if f, ok := fields["subnets"]; ok {
		if n.Subnets, err = stringList("network_configuration.subnets", f); err != nil {
			return nil, err
		}
	}
	if f, ok := fields["security_groups"]; ok {
		if n.SecurityGroups, err = stringList("network_configuration.security_groups", f); err != nil {
			return nil, err
		}
	}
	if f, ok := fields["assign_public_ip"]; ok {
		if err := json.Unmarshal(f, &n.AssignPublicIP); err != nil {
			return nil, validationError("network_configuration.assign_public_ip: must be true or false, got %s", jsonKind(f))
		}
	}
	if len(n.Subnets) == 0 {
		return nil, validationError("network_configuration.subnets: at least one subnet is required")
	}
	return n, nil
}

// parseTemplate accepts a JSON object, or a string holding a YAML or JSON
// document, and returns it as a JSON object.
func parseTemplate(v json.RawMessage) (json.RawMessage, error) {
	switch jsonKind(v) {
	case "object":
		return v, nil
	case "string":
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, validationError("task_definition_template: %v", err)
		}
		var doc any
		if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
			return nil, validationError("task_definition_template: not valid YAML or JSON: %v", err)
		}
		if _, ok := doc.(map[string]any); !ok {
			return nil, validationError("task_definition_template: must be a mapping")
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, validationError("task_definition_template: %v", err)
		}
		return b, nil
	default:
		return nil, validationError("task_definition_template: must be a RegisterTaskDefinition input (a mapping), got %s", jsonKind(v))
	}
}

func parseOverrides(v json.RawMessage) ([]ContainerOverride, error) {
	if jsonKind(v) != "array" {
		return nil, validationError("container_overrides: must be a list, got %s", jsonKind(v))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, validationError("container_overrides: %v", err)
	}
	out := make([]ContainerOverride, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		what := fmt.Sprintf("container_overrides[%d]", i)
		fields, err := objectFields(what, item, overrideKeys)
		if err != nil {
			return nil, err
		}
		var o ContainerOverride
		f, ok := fields["name"]
		if !ok {
			return nil, validationError("%s.name: required", what)
		}
		if o.Name, err = nonEmptyString(what+".name", f); err != nil {
			return nil, err
		}
		if seen[o.Name] {
			return nil, validationError("%s.name: container %q is overridden twice", what, o.Name)
		}
		seen[o.Name] = true
		if f, ok := fields["command"]; ok && !isNull(f) {
			if o.Command, err = stringList(what+".command", f); err != nil {
				return nil, err
			}
		}
		if f, ok := fields["environment"]; ok && !isNull(f) {
			if o.Environment, err = stringMap(what+".environment", f); err != nil {
				return nil, err
			}
		}
		for key, dst := range map[string]**int32{"cpu": &o.CPU, "memory": &o.Memory} {
			if f, ok := fields[key]; ok && !isNull(f) {
				n, err := intIn(what+"."+key, f, 0, 1<<30)
				if err != nil {
					return nil, err
				}
				x := int32(n)
				*dst = &x
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// objectFields splits a JSON object into its top-level fields and rejects
// keys not in known. Empty input and null are an empty object.
func objectFields(what string, raw json.RawMessage, known []string) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || isNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	if kind := jsonKind(raw); kind != "object" {
		return nil, validationError("%s: must be a mapping, got %s", what, kind)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, validationError("%s: %v", what, err)
	}
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(known, k) {
			return nil, validationError("%s: unknown key %q; known keys are %s", what, k, strings.Join(known, ", "))
		}
	}
	return fields, nil
}

func nonEmptyString(what string, v json.RawMessage) (string, error) {
	var s string
	if jsonKind(v) != "string" || json.Unmarshal(v, &s) != nil {
		return "", validationError("%s: must be a string, got %s", what, jsonKind(v))
	}
	if strings.TrimSpace(s) == "" {
		return "", validationError("%s: must not be empty", what)
	}
	return s, nil
}

func stringList(what string, v json.RawMessage) ([]string, error) {
	var items []json.RawMessage
	if jsonKind(v) != "array" || json.Unmarshal(v, &items) != nil {
		return nil, validationError("%s: must be a list of strings, got %s", what, jsonKind(v))
	}
	out := make([]string, len(items))
	for i, item := range items {
		var err error
		if out[i], err = nonEmptyString(fmt.Sprintf("%s[%d]", what, i), item); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func stringMap(what string, v json.RawMessage) (map[string]string, error) {
	var m map[string]json.RawMessage
	if jsonKind(v) != "object" || json.Unmarshal(v, &m) != nil {
		return nil, validationError("%s: must be a mapping of strings, got %s", what, jsonKind(v))
	}
	out := make(map[string]string, len(m))
	for k, val := range m {
		var s string
		if jsonKind(val) != "string" || json.Unmarshal(val, &s) != nil {
			return nil, validationError("%s.%s: must be a string, got %s", what, k, jsonKind(val))
		}
		out[k] = s
	}
	return out, nil
}

func intIn(what string, v json.RawMessage, lo, hi int) (int, error) {
	var n int
	if jsonKind(v) != "number" || json.Unmarshal(v, &n) != nil {
		return 0, validationError("%s: must be a whole number, got %s", what, v)
	}
	if n < lo || n > hi {
		return 0, validationError("%s: must be between %d and %d, got %d", what, lo, hi, n)
	}
	return n, nil
}

// numberOrString accepts 256 or "256" or "0.25 vCPU", as ECS's cpu and memory do.
func numberOrString(what string, v json.RawMessage) (string, error) {
	if jsonKind(v) == "number" {
		n, err := intIn(what, v, 1, 1<<30)
		return strconv.Itoa(n), err
	}
	return nonEmptyString(what, v)
}

// duration reads a Go duration string ("6s", "1h"); "0" disables.
func duration(what string, v json.RawMessage) (time.Duration, error) {
	s, err := nonEmptyString(what, v)
	if err != nil {
		return 0, validationError("%s: must be a duration string like \"30s\", got %s", what, v)
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, validationError("%s: must be a non-negative duration like \"30s\", got %q", what, s)
	}
	return d, nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func jsonKind(v json.RawMessage) string {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
