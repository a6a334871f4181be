package ecs

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestParseTaskARN(t *testing.T) {
	for _, tc := range []struct {
		arn  string
		want taskARN
		ok   bool
	}{
		{"arn:aws:ecs:eu-west-1:123456789012:task/prod/0123abcd", taskARN{"aws", "eu-west-1", "123456789012", "prod", "0123abcd"}, true},
		{"arn:aws:ecs:us-east-1:123456789012:task/0123abcd", taskARN{"aws", "us-east-1", "123456789012", "", "0123abcd"}, true},
		{"arn:aws-cn:ecs:cn-north-1:123456789012:task/c/x", taskARN{"aws-cn", "cn-north-1", "123456789012", "c", "x"}, true},
		{"arn:aws:ecs:eu-west-1:123456789012:task-definition/f:3", taskARN{}, false},
		{"arn:aws:lambda:eu-west-1:123456789012:task/c/x", taskARN{}, false},
		{"arn:aws:ecs::123456789012:task/c/x", taskARN{}, false},
		{"arn:aws:ecs:eu-west-1:123456789012:task/c/", taskARN{}, false},
		{"arn:aws:ecs:eu-west-1:123456789012:task/a/b/c", taskARN{}, false},
		{"not-an-arn", taskARN{}, false},
	} {
		got, ok := parseTaskARN(tc.arn)
		assert.Equal(t, tc.ok, ok, tc.arn)
		assert.Equal(t, tc.want, got, tc.arn)
	}
}

func TestDescribe(t *testing.T) {
	const arn = "arn:aws:ecs:eu-west-1:123456789012:task/prod/0123abcd"
	template := `{"task_definition_template": {"family": "f", "containerDefinitions": [
		{"name": "main", "image": "x", "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "/ecs/app", "awslogs-stream-prefix": "tether"}}},
		{"name": "sidecar", "image": "y"},
		{"name": "far", "image": "z", "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "o'dd group", "awslogs-stream-prefix": "p", "awslogs-region": "us-west-2"}}}
	]}}`
	handle := func(cluster string, arns ...string) []byte {
		h := newHandle("job-1", 1, cluster, len(arns)+1) // the last index never launched
		for i, a := range arns {
			if a != "" {
				h.setARN(&h.Tasks[i], a)
			}
		}
		b, err := h.encode()
		require.NoError(t, err)
		return b
	}
	task0 := plugin.Resource{
		Kind: "ecs_task", Name: arn, Label: "ECS task 0",
		URL:     "https://eu-west-1.console.aws.amazon.com/ecs/v2/clusters/prod/tasks/0123abcd/configuration?region=eu-west-1",
		Command: "aws ecs describe-tasks --region eu-west-1 --cluster prod --tasks " + arn,
	}

	for _, tc := range []struct {
		name    string
		context string
		handle  []byte
		want    []plugin.Resource
	}{
		{"task, no template", `{"task_definition": "f"}`, handle("prod", arn), []plugin.Resource{task0}},
		{"task with its log streams", template, handle("prod", arn), []plugin.Resource{task0,
			{
				Kind: "cloudwatch_log_stream", Name: "arn:aws:logs:eu-west-1:123456789012:log-group:/ecs/app:log-stream:tether/main/0123abcd",
				Label:   "Logs of task 0, container main",
				URL:     "https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1#logsV2:log-groups/log-group/$252Fecs$252Fapp/log-events/tether$252Fmain$252F0123abcd",
				Command: "aws logs tail /ecs/app --log-stream-names tether/main/0123abcd --region eu-west-1 --follow",
			},
			{
				Kind: "cloudwatch_log_stream", Name: "arn:aws:logs:us-west-2:123456789012:log-group:o'dd group:log-stream:p/far/0123abcd",
				Label:   "Logs of task 0, container far",
				URL:     "https://us-west-2.console.aws.amazon.com/cloudwatch/home?region=us-west-2#logsV2:log-groups/log-group/o'dd$2520group/log-events/p$252Ffar$252F0123abcd",
				Command: `aws logs tail 'o'\''dd group' --log-stream-names p/far/0123abcd --region us-west-2 --follow`,
			},
		}},
		{"old short ARN takes the handle's cluster", `{"task_definition": "f"}`, handle("batch", "arn:aws:ecs:us-east-1:123456789012:task/ffee"), []plugin.Resource{{
			Kind: "ecs_task", Name: "arn:aws:ecs:us-east-1:123456789012:task/ffee", Label: "ECS task 0",
			URL:     "https://us-east-1.console.aws.amazon.com/ecs/v2/clusters/batch/tasks/ffee/configuration?region=us-east-1",
			Command: "aws ecs describe-tasks --region us-east-1 --cluster batch --tasks arn:aws:ecs:us-east-1:123456789012:task/ffee",
		}}},
		{"other partitions get no URL", `{"task_definition": "f"}`, handle("c", "arn:aws-us-gov:ecs:us-gov-west-1:123456789012:task/c/x"), []plugin.Resource{{
			Kind: "ecs_task", Name: "arn:aws-us-gov:ecs:us-gov-west-1:123456789012:task/c/x", Label: "ECS task 0",
			Command: "aws ecs describe-tasks --region us-gov-west-1 --cluster c --tasks arn:aws-us-gov:ecs:us-gov-west-1:123456789012:task/c/x",
		}}},
		{"malformed ARN: still the resource, no URL, no streams", template, handle("prod", "arn:weird"), []plugin.Resource{{
			Kind: "ecs_task", Name: "arn:weird", Label: "ECS task 0",
			Command: "aws ecs describe-tasks --cluster prod --tasks arn:weird",
		}}},
		{"tasks not launched yet are left out", `{"task_definition": "f"}`, handle("prod", "", arn), []plugin.Resource{{
			Kind: "ecs_task", Name: arn, Label: "ECS task 1", URL: task0.URL, Command: task0.Command,
		}}},
		{"unreadable handle", `{}`, []byte("{not json"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := New().Describe(&plugin.Job{ID: "job-1", Attempt: 1, Context: json.RawMessage(tc.context)}, tc.handle)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDescribeLabelsRelaunches(t *testing.T) {
	h := newHandle("job-1", 1, "prod", 1)
	h.setARN(&h.Tasks[0], "arn:aws:ecs:eu-west-1:1:task/prod/new")
	h.Tasks[0].Prev = []string{"old1", "old2"}
	b, err := h.encode()
	require.NoError(t, err)
	got := New().Describe(&plugin.Job{ID: "job-1", Context: json.RawMessage(`{"task_definition": "f"}`)}, b)
	require.Len(t, got, 1)
	assert.Equal(t, "ECS task 0 (previous: 2)", got[0].Label)
	assert.Equal(t, "arn:aws:ecs:eu-west-1:1:task/prod/new", got[0].Name, "the current launch's task")
}
