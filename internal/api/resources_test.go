package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
)

func TestGetJobShowsRemoteResources(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)

	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID, "")
	require.Equal(t, http.StatusOK, r.status)
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.body, &raw))
	assert.NotContains(t, raw, "resources", "absent while the plugin reported none")

	h, lease := e.claim(t, j.ID)
	task := store.Resource{Kind: "ecs_task", Name: "arn:aws:ecs:eu-west-1:123456789012:task/c/abc", Label: "ECS task 0",
		URL:     "https://eu-west-1.console.aws.amazon.com/ecs/v2/clusters/c/tasks/abc/configuration?region=eu-west-1",
		Command: "aws ecs describe-tasks --region eu-west-1 --cluster c --tasks arn:aws:ecs:eu-west-1:123456789012:task/c/abc"}
	stream := store.Resource{Kind: "cloudwatch_log_stream", Name: "/ecs/x:app/main/abc"}
	require.NoError(t, e.st.CheckpointDescribed(context.Background(), store.LogBatch{JobID: j.ID, Lease: lease}, 0, []byte("h"),
		&store.Described{Holder: h, Attempt: 1, Resources: []store.Resource{task, stream}}))

	got := decode[struct {
		ID        string           `json:"id"`
		Resources []store.Resource `json:"resources"`
	}](t, e.do(t, "GET", "/api/v1/jobs/"+j.ID, ""))
	task.Attempt, stream.Attempt = 1, 1
	assert.Equal(t, j.ID, got.ID)
	assert.Equal(t, []store.Resource{task, stream}, got.Resources)

	list := e.do(t, "GET", "/api/v1/jobs", "")
	require.Equal(t, http.StatusOK, list.status)
	assert.NotContains(t, string(list.body), `"resources"`, "the list does not carry resources")

	evs := decode[struct {
		Events []store.Event `json:"events"`
	}](t, e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/events", ""))
	var remote []string
	for _, ev := range evs.Events {
		if ev.Kind == "remote" {
			remote = append(remote, ev.Message)
		}
	}
	require.Len(t, remote, 1, "the timeline shows the remote event")
	assert.JSONEq(t, `{"attempt":1,"resources":[
		{"kind":"ecs_task","name":"arn:aws:ecs:eu-west-1:123456789012:task/c/abc","label":"ECS task 0","url":"`+task.URL+`","command":"`+task.Command+`"},
		{"kind":"cloudwatch_log_stream","name":"/ecs/x:app/main/abc"}]}`, remote[0])
}
