package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

func TestDrainAgentRequest(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	h := store.Holder{Name: "a1", Generation: "g1"}
	_, err := e.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"hello"}})
	require.NoError(t, err)
	beat, err := e.st.Heartbeat(ctx, h, nil)
	require.NoError(t, err)
	assert.False(t, beat.DrainRequested)

	r := e.do(t, "POST", "/api/v1/agents/a1/drain", `{"reason":"kernel upgrade","by":"ops"}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	res := decode[wire.DrainAgentResponse](t, r)
	assert.True(t, res.Requested)
	require.NotNil(t, res.Agent.DrainRequest)
	assert.Equal(t, "ops", res.Agent.DrainRequest.By)
	assert.Equal(t, "kernel upgrade", res.Agent.DrainRequest.Reason)
	assert.Equal(t, "running", res.Agent.State, "the agent drains at its next heartbeat")

	beat, err = e.st.Heartbeat(ctx, h, nil)
	require.NoError(t, err)
	assert.True(t, beat.DrainRequested, "the heartbeat reads it back")

	// A second request keeps the first; an empty body is fine.
	r = e.do(t, "POST", "/api/v1/agents/a1/drain", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	res = decode[wire.DrainAgentResponse](t, r)
	assert.False(t, res.Requested)
	assert.Equal(t, "ops", res.Agent.DrainRequest.By)

	list := decode[wire.AgentList](t, e.do(t, "GET", "/api/v1/agents", ""))
	require.Len(t, list.Agents, 1)
	require.NotNil(t, list.Agents[0].DrainRequest)
	assert.Equal(t, "kernel upgrade", list.Agents[0].DrainRequest.Reason)

	// A new process under the name starts without it.
	_, err = e.st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "a1", Generation: "g2"}, Capacity: 1})
	require.NoError(t, err)
	list = decode[wire.AgentList](t, e.do(t, "GET", "/api/v1/agents", ""))
	assert.Nil(t, list.Agents[0].DrainRequest)

	r = e.do(t, "POST", "/api/v1/agents/nobody/drain", `{}`)
	require.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, wire.CodeNotFound, r.errBody(t).Code)
	require.NoError(t, e.st.SetAgentState(ctx, store.Holder{Name: "a1", Generation: "g2"}, "stopped"))
	r = e.do(t, "POST", "/api/v1/agents/a1/drain", `{}`)
	require.Equal(t, http.StatusConflict, r.status)
	assert.Contains(t, r.errBody(t).Error, "nothing to drain")
	r = e.do(t, "POST", "/api/v1/agents/a1/drain", `{"reason":5}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "reason", r.errBody(t).Field)
}
