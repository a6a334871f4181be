package ecs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHandleRoundTrip(t *testing.T) {
	h := newHandle("job-1", 2, "prod", 2)
	h.TaskDefinitionARN = "arn:aws:ecs:us-east-1:000000000000:task-definition/x:3"
	h.StartedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.Tasks[0] = TaskState{
		Index: 0, StartedBy: StartedBy("job-1", 0), Attempts: 2, ClientToken: ClientToken("job-1", 2, 0, 2),
		TaskARN: "arn:task/prod/abc", PreviousARNs: []string{"arn:task/prod/old"}, LastStatus: "STOPPED",
		ExitCodes: map[string]int32{"app": 0}, StopCode: "EssentialContainerExited", StoppedReason: "done",
		Logs:    []LogCursor{{Container: "app", Group: "/g", Stream: "p/app/abc", Token: "f/123"}},
		Outcome: outcomeSucceeded,
	}
	b, err := h.encode()
	require.NoError(t, err)
	got, err := decodeHandle(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
	require.Equal(t, StartedBy("job-1", 1), got.Tasks[1].StartedBy)
}

func TestDecodeHandleRejects(t *testing.T) {
	_, err := decodeHandle([]byte(`{"v": 99, "tasks": []}`))
	require.ErrorContains(t, err, "version 99")
	_, err = decodeHandle([]byte(`{"v": 1, "tasks": [{"index": 1}]}`))
	require.ErrorContains(t, err, "task 0 has index 1")
	_, err = decodeHandle([]byte(`not json`))
	require.Error(t, err)
}
