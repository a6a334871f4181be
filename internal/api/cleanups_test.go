package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
)

func TestListCleanups(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)

	r := e.do(t, "GET", "/api/v1/cleanups", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.JSONEq(t, `{"cleanups":[],"next":""}`, string(r.body))

	var ids []string
	for range 3 {
		j := e.submit(t, `{"command":"hello"}`)
		h, lease := e.claim(t, j.ID)
		require.NoError(t, e.st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusFailed, Error: "boom", ErrorClass: "retriable"}))
		require.NoError(t, e.st.EnqueueCleanup(ctx, j.ID, "boom"))
		ids = append(ids, j.ID)
	}
	// A Cleanup that keeps failing shows its attempts and last error.
	_, err := e.st.Pool().Exec(ctx, `UPDATE cleanups SET attempts = 5, last_error = 'AccessDenied' WHERE job_id = $1`, ids[0])
	require.NoError(t, err)

	r = e.do(t, "GET", "/api/v1/cleanups?limit=2", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	page := decode[api.CleanupList](t, r)
	require.Len(t, page.Cleanups, 2)
	assert.Equal(t, ids[0], page.Cleanups[0].JobID)
	assert.Equal(t, "shell", page.Cleanups[0].Plugin)
	assert.Equal(t, 5, page.Cleanups[0].Attempts)
	assert.Equal(t, "AccessDenied", page.Cleanups[0].LastError)
	assert.Equal(t, "boom", page.Cleanups[0].Reason)
	assert.False(t, page.Cleanups[0].NextAt.IsZero())
	assert.Equal(t, ids[1], page.Next)

	r = e.do(t, "GET", "/api/v1/cleanups?limit=2&after="+page.Next, "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	page = decode[api.CleanupList](t, r)
	require.Len(t, page.Cleanups, 1)
	assert.Equal(t, ids[2], page.Cleanups[0].JobID)
	assert.Empty(t, page.Next)

	r = e.do(t, "GET", "/api/v1/cleanups?limit=0", "")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "limit", r.errBody(t).Field)
}
