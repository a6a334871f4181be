package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/plugins/ecs/ecs"
)

// A real ECS job through the emulator ends with its task, as the plugin
// described it on checkpoint, in GET /api/v1/jobs/{id}'s resources: the
// SDK, the agent's fenced write and the API together.
func TestECSJobShowsItsTaskAsResource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	em, url := startEmulator(t)
	h := newECSHarness(t, pgtest.URL(t), fast(), url)
	a := h.startAgent(ctx, "ecs-res")
	id := h.submitECS(ctx, countingScript(2, 50*time.Millisecond), nil)
	h.waitTerminal(ctx, []string{id}, 30*time.Second)
	require.Equal(t, store.StatusSucceeded, h.job(ctx, id).Status, "events: %s", h.eventSummary(ctx, id))

	var arn string
	for _, ti := range em.Tasks() {
		if ti.StartedBy == ecs.StartedBy(id, 0) {
			arn = ti.ARN
		}
	}
	require.NotEmpty(t, arn, "the emulator ran the job's task")

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.apiAddr(ctx, a)+"/api/v1/jobs/"+id, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got struct {
		Resources []store.Resource `json:"resources"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	kinds := map[string][]string{}
	for _, r := range got.Resources {
		assert.Equal(t, 1, r.Attempt)
		kinds[r.Kind] = append(kinds[r.Kind], r.Name)
	}
	assert.Equal(t, []string{arn}, kinds["ecs_task"], "the task ARN is among the job's resources: %+v", got.Resources)
	assert.Len(t, kinds["cloudwatch_log_stream"], 1, "with its container's log stream (the command's template logs to awslogs)")
}
