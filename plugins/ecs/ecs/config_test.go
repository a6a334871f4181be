package ecs

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func mustConfig(t *testing.T, config, context string) Config {
	t.Helper()
	c, err := parseConfig(json.RawMessage(config), json.RawMessage(context))
	require.NoError(t, err)
	return c
}

func configError(t *testing.T, config, context string) string {
	t.Helper()
	_, err := parseConfig(json.RawMessage(config), json.RawMessage(context))
	require.Error(t, err)
	require.Equal(t, plugin.Permanent, plugin.ClassOf(err))
	return err.Error()
}

func TestConfigDefaults(t *testing.T) {
	c := mustConfig(t, ``, `{"task_definition": "fam"}`)
	require.Equal(t, DefaultCluster, c.Cluster)
	require.Equal(t, 1, c.TaskCount)
	require.Equal(t, 6*time.Second, c.PollInterval)
	require.Equal(t, time.Hour, c.Timeout)
	require.Equal(t, 1, c.MaxFailCount)
	require.Equal(t, "fam", c.TaskDefinition)
	require.Empty(t, c.Tags)
	require.Nil(t, c.Network)
}

func TestConfigMerge(t *testing.T) {
	config := `{
		"cluster": "prod", "region": "eu-west-1", "launch_type": "FARGATE",
		"network_configuration": {"subnets": ["s-1"], "security_groups": ["sg-1"], "assign_public_ip": true},
		"execution_role_arn": "arn:exec", "task_definition": "default-family",
		"tags": {"team": "data", "env": "prod"}, "poll_interval": "10s", "max_fail_count": 2
	}`
	context := `{
		"task_definition": "job-family:3", "tags": {"env": "staging", "owner": "ann"},
		"poll_interval": "1s", "timeout": "0", "task_count": 3, "cpu": 512, "memory": "1024",
		"container_overrides": [{"name": "app", "command": ["sh", "-c", "true"], "environment": {"A": "1"}, "cpu": 128}]
	}`
	c := mustConfig(t, config, context)
	require.Equal(t, "prod", c.Cluster)
	require.Equal(t, "eu-west-1", c.Region)
	require.Equal(t, "FARGATE", c.LaunchType)
	require.Equal(t, &Network{Subnets: []string{"s-1"}, SecurityGroups: []string{"sg-1"}, AssignPublicIP: true}, c.Network)
	require.Equal(t, "arn:exec", c.ExecutionRoleARN)
	require.Equal(t, "job-family:3", c.TaskDefinition)
	require.Equal(t, map[string]string{"team": "data", "env": "staging", "owner": "ann"}, c.Tags)
	require.Equal(t, time.Second, c.PollInterval)
	require.Equal(t, time.Duration(0), c.Timeout)
	require.Equal(t, 2, c.MaxFailCount)
	require.Equal(t, 3, c.TaskCount)
	require.Equal(t, "512", c.CPU)
	require.Equal(t, "1024", c.Memory)
	require.Len(t, c.ContainerOverrides, 1)
	o := c.ContainerOverrides[0]
	require.Equal(t, "app", o.Name)
	require.Equal(t, []string{"sh", "-c", "true"}, o.Command)
	require.Equal(t, map[string]string{"A": "1"}, o.Environment)
	require.Equal(t, int32(128), *o.CPU)
	require.Nil(t, o.Memory)
}

func TestConfigContextTemplateReplacesConfigTaskDefinition(t *testing.T) {
	c := mustConfig(t, `{"task_definition": "fam"}`,
		`{"task_definition_template": {"family": "f", "containerDefinitions": [{"name": "app", "image": "busybox"}]}}`)
	require.Empty(t, c.TaskDefinition)
	require.NotNil(t, c.Template)

	// null clears a key set by the config.
	c = mustConfig(t, `{"cluster": "prod", "task_definition": "fam"}`, `{"cluster": null}`)
	require.Equal(t, DefaultCluster, c.Cluster)
}

func TestConfigTagsNull(t *testing.T) {
	config := `{"task_definition": "fam", "tags": {"team": "data", "env": "prod"}}`
	// A null tag removes the config's tag. The others are still merged.
	c := mustConfig(t, config, `{"tags": {"env": null, "owner": "ann"}}`)
	require.Equal(t, map[string]string{"team": "data", "owner": "ann"}, c.Tags)
	// A null tags unsets the config's tags, as null unsets any key.
	c = mustConfig(t, config, `{"tags": null}`)
	require.Empty(t, c.Tags)
	require.Contains(t, configError(t, config, `{"tags": ["x"]}`), "ecs: tags: must be a mapping, got array")
}

func TestConfigTemplateAsYAMLString(t *testing.T) {
	c := mustConfig(t, ``, `{"task_definition_template": "family: f\ncontainerDefinitions:\n  - name: app\n    image: busybox\n"}`)
	in, err := decodeTemplate(c.Template)
	require.NoError(t, err)
	require.Equal(t, "f", *in.Family)
	require.Equal(t, "app", *in.ContainerDefinitions[0].Name)
}

func TestConfigRejects(t *testing.T) {
	cases := []struct {
		name, config, context, want string
	}{
		{"unknown config key", `{"clustre": "x"}`, `{"task_definition": "f"}`, `config: unknown key "clustre"`},
		{"unknown context key", ``, `{"task_definition": "f", "cmd": []}`, `context: unknown key "cmd"`},
		{"unknown network key", ``, `{"task_definition": "f", "network_configuration": {"subnets": ["s"], "vpc": "v"}}`, `network_configuration: unknown key "vpc"`},
		{"unknown override key", ``, `{"task_definition": "f", "container_overrides": [{"name": "a", "image": "x"}]}`, `container_overrides[0]: unknown key "image"`},
		{"override without name", ``, `{"task_definition": "f", "container_overrides": [{"command": ["x"]}]}`, `container_overrides[0].name: required`},
		{"no task definition", ``, `{}`, "neither task_definition"},
		{"both task definitions", ``, `{"task_definition": "f", "task_definition_template": {"family": "f", "containerDefinitions": [{"name": "a"}]}}`, "both task_definition and task_definition_template"},
		{"template unknown field", ``, `{"task_definition_template": {"family": "f", "containerDefinitions": [{"name": "a"}], "famliy": "x"}}`, `unknown field "famliy"`},
		{"template without family", ``, `{"task_definition_template": {"containerDefinitions": [{"name": "a"}]}}`, "family is required"},
		{"bad duration", ``, `{"task_definition": "f", "poll_interval": "soon"}`, "poll_interval"},
		{"numeric duration", ``, `{"task_definition": "f", "timeout": 30}`, "timeout"},
		{"zero poll interval", ``, `{"task_definition": "f", "poll_interval": "0"}`, "poll_interval: must be positive"},
		{"task_count too big", ``, `{"task_definition": "f", "task_count": 1001}`, "task_count: must be between 1 and 1000"},
		{"task_count zero", ``, `{"task_definition": "f", "task_count": 0}`, "task_count"},
		{"max_fail_count zero", ``, `{"task_definition": "f", "max_fail_count": 0}`, "max_fail_count"},
		{"bad launch type", ``, `{"task_definition": "f", "launch_type": "LAMBDA"}`, "launch_type"},
		{"subnets required", ``, `{"task_definition": "f", "network_configuration": {}}`, "at least one subnet"},
		{"tag not string", ``, `{"task_definition": "f", "tags": {"a": 1}}`, "tags.a: must be a string"},
		{"reserved tag", ``, `{"task_definition": "f", "tags": {"tether:job-id": "x"}}`, "reserved prefix"},
		{"bad endpoint", `{"endpoint": "localhost:4566"}`, `{"task_definition": "f"}`, "endpoint"},
		{"context not an object", ``, `[1]`, "context: must be a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Contains(t, configError(t, c.config, c.context), c.want)
		})
	}
}

func TestTemplateContentHash(t *testing.T) {
	tpl := `{"family": "f", "containerDefinitions": [{"name": "app", "image": "busybox", "command": ["true"]}]}`
	c := mustConfig(t, `{"task_role_arn": "arn:role"}`, `{"task_definition_template": `+tpl+`}`)
	in, h1, err := templateInput(c)
	require.NoError(t, err)
	require.Equal(t, "arn:role", *in.TaskRoleArn, "role from the config fills the template")
	require.Equal(t, contentHashTag, *in.Tags[len(in.Tags)-1].Key)
	require.Equal(t, h1, *in.Tags[len(in.Tags)-1].Value)

	_, again, err := templateInput(mustConfig(t, `{"task_role_arn": "arn:role"}`, `{"task_definition_template": `+tpl+`}`))
	require.NoError(t, err)
	require.Equal(t, h1, again, "same content, same hash")

	changed := `{"family": "f", "containerDefinitions": [{"name": "app", "image": "busybox", "command": ["false"]}]}`
	_, h2, err := templateInput(mustConfig(t, `{"task_role_arn": "arn:role"}`, `{"task_definition_template": `+changed+`}`))
	require.NoError(t, err)
	require.NotEqual(t, h1, h2)
}

func TestParseClusterConfig(t *testing.T) {
	cluster, region, endpoint, err := parseClusterConfig(json.RawMessage(`{"cluster": "c", "region": "r", "endpoint": "http://x"}`))
	require.NoError(t, err)
	require.Equal(t, []string{"c", "r", "http://x"}, []string{cluster, region, endpoint})
	cluster, _, _, err = parseClusterConfig(nil)
	require.NoError(t, err)
	require.Equal(t, DefaultCluster, cluster)
	_, _, _, err = parseClusterConfig(json.RawMessage(`{"nope": 1}`))
	require.ErrorContains(t, err, `unknown key "nope"`)
}

// The decoding table and the list of accepted keys are kept apart. Every
// key must have one decoder: tags first, then the others sorted, the order
// the first error of several is reported in.
func TestEveryConfigKeyHasADecoder(t *testing.T) {
	var c Config
	var keys []string
	for _, f := range c.fields() {
		keys = append(keys, f.key)
	}
	require.Equal(t, "tags", keys[0])
	require.True(t, slices.IsSorted(keys[1:]), "keys after tags must be sorted: %v", keys)
	require.ElementsMatch(t, configKeys, keys)
}

// The first bad key is reported: tags before the others, which go in
// sorted order. Inside network_configuration and container_overrides the
// order is the fields' own.
func TestConfigFirstErrorOrder(t *testing.T) {
	for _, tc := range []struct{ context, want string }{
		{`{"task_definition": "f", "cluster": 1, "tags": {"a": 1}}`, "ecs: tags.a: must be a string, got number"},
		{`{"task_definition": "f", "timeout": 1, "cpu": true}`, "ecs: cpu: must be a string, got boolean"},
		{`{"task_definition": "f", "network_configuration": {"assign_public_ip": 1, "subnets": 1}}`, "ecs: network_configuration.subnets: must be a list of strings, got number"},
		{`{"task_definition": "f", "network_configuration": {"assign_public_ip": 1, "security_groups": [""], "subnets": ["s"]}}`, "ecs: network_configuration.security_groups[0]: must not be empty"},
		{`{"task_definition": "f", "container_overrides": [{"name": "a", "memory": -1, "command": "x"}]}`, "ecs: container_overrides[0].command: must be a list of strings, got string"},
		{`{"task_definition": "f", "container_overrides": [{"name": "a", "memory": -1, "cpu": "x"}]}`, "ecs: container_overrides[0].cpu: must be a whole number, got \"x\""},
	} {
		require.Equal(t, tc.want, configError(t, ``, tc.context), tc.context)
	}
}
