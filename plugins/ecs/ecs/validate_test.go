package ecs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestValidate(t *testing.T) {
	good := `{"cluster": "prod", "region": "eu-west-1", "launch_type": "FARGATE",
		"network_configuration": {"subnets": ["s-1"], "security_groups": ["sg-1"]}}`
	for _, tc := range []struct {
		name     string
		config   string
		contexts map[string]string
		want     []plugin.Problem
	}{
		{"valid; task definitions left to a command and to jobs", good,
			map[string]string{"a": `{"task_definition": "fam:3", "cpu": 256}`, "b": `{}`}, nil},
		{"unused plugin with no config", ``, nil, nil},
		{"bad config field is the config's, once", `{"launch_type": "SPOT"}`,
			map[string]string{"a": `{}`, "b": `{"task_definition": "x"}`},
			[]plugin.Problem{{Field: "launch_type", Message: `must be one of EC2, FARGATE, EXTERNAL, MANAGED_INSTANCES, got "SPOT"`}}},
		{"bad config with no commands", `{"network_configuration": {"subnets": []}}`, nil,
			[]plugin.Problem{{Field: "network_configuration.subnets", Message: "at least one subnet is required"}}},
		{"bad command contexts are the commands'", good, map[string]string{
			"count":  `{"task_count": 0}`,
			"subnet": `{"network_configuration": {"subnets": [""]}}`,
			"proc":   `{"api_rates": {"RunTask": 1}}`,
			"typo":   `{"task_defintion": "x"}`,
			"both":   `{"task_definition": "x", "task_definition_template": {"family": "f"}}`,
		}, []plugin.Problem{
			{Command: "both", Message: "both task_definition and task_definition_template are set; set exactly one"},
			{Command: "count", Field: "task_count", Message: "must be between 1 and 1000, got 0"},
			{Command: "proc", Field: "api_rates", Message: "a setting of the plugin process; set it in plugins.ecs.config, not in a job's context"},
			{Command: "subnet", Field: "network_configuration.subnets[0]", Message: "must not be empty"},
			{Command: "typo", Message: `unknown key "task_defintion"; known keys are ` + strings.Join(configKeys, ", ")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contexts := map[string]json.RawMessage{}
			for k, v := range tc.contexts {
				contexts[k] = json.RawMessage(v)
			}
			got, err := New().Validate(context.Background(), json.RawMessage(tc.config), contexts)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
