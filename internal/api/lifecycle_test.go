package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

func TestSubmitStampsLimitsAndRequeueRecordsWho(t *testing.T) {
	const token = "0123456789abcdef0123"
	e := newEnv(t, func(o *api.Options) {
		o.Tokens = []config.Token{{Name: "ops", Token: token}}
		d := config.Default().Defaults
		d.MaxRetry = 0
		o.Defaults = &d
	})
	auth := []string{"Authorization", "Bearer " + token}
	r := e.do(t, "POST", "/api/v1/jobs", `{"command": "hello", "limits": {"active_timeout": "1d", "max_retry": 1}}`, auth...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	j := decode[store.Job](t, r)
	assert.Equal(t, 24*time.Hour, j.Limits.ActiveTimeout)
	assert.Equal(t, 1, j.Limits.MaxRetry)
	plain := e.do(t, "POST", "/api/v1/jobs", `{"command": "hello"}`, auth...)
	assert.Equal(t, 0, decode[store.Job](t, plain).Limits.MaxRetry, "the configured default")

	// A queued job cannot be requeued. A failed one can, once per key.
	r = e.do(t, "POST", "/api/v1/jobs/"+j.ID+"/requeue", `{"reason": "x", "key": "k"}`, auth...)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	assert.Equal(t, store.StatusQueued, r.errBody(t).Status)

	h, lease := e.claim(t, j.ID)
	require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease,
		store.Outcome{Status: store.StatusFailed, Error: "lost", ErrorClass: "outcome_unknown"}))
	r = e.do(t, "POST", "/api/v1/jobs/"+j.ID+"/requeue", `{"reason": "checked by hand", "key": "k", "submitter": "ignored with auth"}`, auth...)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	res := decode[wire.RequeueResponse](t, r)
	assert.False(t, res.Replayed)
	assert.Equal(t, 2, res.Job.Attempt)
	assert.Equal(t, jobstate.OutcomeUnknown, res.Job.ErrorClass, "kept for the record")
	evs, err := e.st.Events(context.Background(), j.ID, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, "requeued", evs[len(evs)-1].Kind)
	assert.Equal(t, "requeued by ops (key k): checked by hand", evs[len(evs)-1].Message)

	r = e.do(t, "POST", "/api/v1/jobs/"+j.ID+"/requeue", `{"reason": "checked by hand", "key": "k", "submitter": "ignored with auth"}`, auth...)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.True(t, decode[wire.RequeueResponse](t, r).Replayed)
	r = e.do(t, "POST", "/api/v1/jobs/"+j.ID+"/requeue", `{"reason": "another", "key": "k"}`, auth...)
	assert.Equal(t, http.StatusConflict, r.status)
	assert.Equal(t, wire.CodeIdempotencyConflict, r.errBody(t).Code)
	r = e.do(t, "POST", "/api/v1/jobs/"+j.ID+"/requeue", `{"key": "k2"}`, auth...)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "reason", r.errBody(t).Field)
}
