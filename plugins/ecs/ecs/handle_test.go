package ecs

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func TestHandleRoundTrip(t *testing.T) {
	h := newHandle("job-1", 2, "prod", 2)
	h.TaskDefinitionARN = "arn:aws:ecs:us-east-1:000000000000:task-definition/x:3"
	h.StartedAt = 1767323045
	h.setARN(&h.Tasks[0], "arn:aws:ecs:us-east-1:000000000000:task/prod/abc")
	h.Tasks[0].Attempts, h.Tasks[0].Infra, h.Tasks[0].Try = 2, 1, 3
	h.Tasks[0].Prev = []string{h.shorten("arn:aws:ecs:us-east-1:000000000000:task/prod/old")}
	h.Tasks[0].Logs = []LogCursor{{Token: "f/123", Last: 42}}
	b, err := h.encode()
	require.NoError(t, err)
	got, err := decodeHandle(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
	require.Equal(t, "arn:aws:ecs:us-east-1:000000000000:task/prod/abc", got.arn(0))
	require.Equal(t, []string{"arn:aws:ecs:us-east-1:000000000000:task/prod/old"}, got.prevARNs(&got.Tasks[0]))
	require.Equal(t, jobStem("job-1"), got.Job)
}

// A handle plugin 0.1 wrote is still resumed (a rollout meets them).
func TestDecodeHandleV1(t *testing.T) {
	v1 := fmt.Sprintf(`{"v":1,"job_attempt":2,"cluster":"prod","task_definition_arn":"arn:td:1","started_at":"2026-01-02T03:04:05Z",
	  "tasks":[{"index":0,"started_by":%q,"attempts":2,"client_token":"tok","task_arn":"arn:aws:ecs:r:a:task/prod/abc",
	            "previous_arns":["arn:aws:ecs:r:a:task/prod/old"],"last_status":"RUNNING","logs":[{"container":"app","group":"/g","stream":"p/app/abc","token":"f/9"}]},
	           {"index":1,"started_by":%q,"attempts":1,"task_arn":"arn:aws:ecs:r:a:task/prod/def","outcome":"succeeded","exit_codes":{"app":0}}]}`,
		StartedBy("job-1", 0), StartedBy("job-1", 1))
	h, err := decodeHandle([]byte(v1))
	require.NoError(t, err)
	require.Equal(t, handleVersion, h.Version)
	require.Equal(t, jobStem("job-1"), h.Job)
	require.Equal(t, 2, h.JobAttempt)
	require.Equal(t, "prod", h.Cluster)
	require.EqualValues(t, 1767323045, h.StartedAt)
	require.Equal(t, "arn:aws:ecs:r:a:task/prod/abc", h.arn(0))
	require.Equal(t, []string{"arn:aws:ecs:r:a:task/prod/old"}, h.prevARNs(&h.Tasks[0]))
	require.Equal(t, 2, h.Tasks[0].Attempts)
	require.True(t, h.Tasks[0].Seen)
	require.Equal(t, []LogCursor{{Token: "f/9"}}, h.Tasks[0].Logs)
	require.Equal(t, outcomeSucceeded, h.Tasks[1].Outcome)
	require.Equal(t, map[string]int32{"app": 0}, h.Tasks[1].Exit)
	// Launch 2 of task 0 keeps the token plugin 0.1 derived for it.
	require.Equal(t, ClientToken("job-1", 2, 0, 2, 0), ClientToken("job-1", 2, 0, h.Tasks[0].Attempts+h.Tasks[0].Infra, h.Tasks[0].Try))
}

func TestDecodeHandleRejects(t *testing.T) {
	_, err := decodeHandle([]byte(`{"v": 99, "t": []}`))
	require.ErrorContains(t, err, "version 99")
	_, err = decodeHandle([]byte(`{"v": 1, "tasks": [{"index": 1}]}`))
	require.ErrorContains(t, err, "task 0 has index 1")
	_, err = decodeHandle([]byte(`not json`))
	require.Error(t, err)
}

// TestHandleSize states what a 1,000-task job checkpoints: the handle's size
// while every task runs with a log position, and once all settled.
func TestHandleSize(t *testing.T) {
	h := newHandle("0190f3c5-6b7e-7c3a-9d2e-1f2a3b4c5d6e", 1, "batch", 1000)
	h.TaskDefinitionARN = "arn:aws:ecs:eu-west-1:123456789012:task-definition/etl:42"
	h.StartedAt = 1767323045
	for i := range h.Tasks {
		tk := &h.Tasks[i]
		tk.Attempts = 1
		h.setARN(tk, fmt.Sprintf("arn:aws:ecs:eu-west-1:123456789012:task/batch/%032x", i))
		tk.LaunchedAt, tk.Seen = 1767323045123+int64(i*200), true
		// A real CloudWatch token is ~60 characters.
		tk.Logs = []LogCursor{{Token: fmt.Sprintf("f/%056d/s", i*1000), Last: 1767323045123}}
	}
	running, err := h.encode()
	require.NoError(t, err)
	for i := range h.Tasks {
		tk := &h.Tasks[i]
		tk.Logs, tk.Outcome, tk.Exit = nil, outcomeSucceeded, map[string]int32{"app": 0}
	}
	settled, err := h.encode()
	require.NoError(t, err)
	t.Logf("1,000-task handle: %d bytes while running, %d bytes settled (checkpointed at most every %s while logs move)", len(running), len(settled), checkpointEvery)
	// Plugin 0.1 wrote 438 KB for the same job. The bound keeps it compact.
	require.Less(t, len(running), 200_000)
	require.Less(t, len(settled), 120_000)
	var back Handle
	require.NoError(t, json.Unmarshal(settled, &back))
}

// TestThousandTaskJobCheckpointVolume runs a 1,000-task job (synthetic
// tasks: no processes) and states what it checkpointed. The first launches
// are recorded in one checkpoint, RunTask answers and log positions are
// coalesced, so the volume follows the job's duration, not its task count
// times its log moves.
func TestThousandTaskJobCheckpointVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("true", map[string]any{
		"task_count": 1000, "poll_interval": "500ms",
		"task_definition_template": map[string]any{
			"family": "synthetic-1000",
			"containerDefinitions": []any{map[string]any{
				"name": "app", "image": "tether.local/synthetic",
				"environment": []any{
					map[string]any{"name": "SYNTH_LINES", "value": "3"},
					map[string]any{"name": "SYNTH_INTERVAL", "value": "300ms"},
				},
				"logConfiguration": map[string]any{"logDriver": "awslogs", "options": map[string]string{
					"awslogs-group": "/tether/test", "awslogs-stream-prefix": "job",
				}},
			}},
		},
	})
	rt := plugintest.NewGatedRuntime(nil)
	start := time.Now()
	res, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err, "stderr tail: %s", tail(rt.StderrString(), 2000))
	require.Equal(t, "1000 ECS task(s) succeeded", res.Message)
	require.Len(t, lines(rt.StdoutString()), 3000, "every line of every task once")
	cps := rt.Checkpoints()
	total, largest := 0, 0
	for _, cp := range cps {
		total += len(cp)
		largest = max(largest, len(cp))
	}
	t.Logf("1,000-task job in %s: %d checkpoints, %.1f MB in all, largest %d bytes", time.Since(start).Round(time.Millisecond), len(cps), float64(total)/1e6, largest)
	// Plugin 0.1 wrote two per launch (2,000) plus one per log move. One per
	// 2 s of the job's life is the design.
	require.Less(t, len(cps), 2+int(time.Since(start)/checkpointEvery)+5)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
