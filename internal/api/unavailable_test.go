package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// A database that is down is a 503 database_unavailable with Retry-After,
// not a 500 internal error (nor, for a job, a 404): the request may be
// retried, here later or on another agent. Real PostgreSQL, stopped.
func TestDatabaseOutageIs503(t *testing.T) {
	ctx := context.Background()
	cluster, url := pgtest.StartCluster(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e := newEnvOn(t, store.New(pool), nil)
	j := e.submit(t, `{"command":"hello","context":{"script":"true"}}`)

	require.NoError(t, cluster.StopServer(ctx))
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/jobs", ""}, // the pool's connections were cut
		{"GET", "/api/v1/jobs", ""}, // no connection can be made
		{"GET", "/api/v1/jobs/" + j.ID, ""},
		{"GET", "/api/v1/jobs/" + j.ID + "/logs", ""},
		{"GET", "/api/v1/agents", ""},
		{"POST", "/api/v1/jobs/" + j.ID + "/cancel", `{}`},
	} {
		r := e.do(t, c.method, c.path, c.body)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s %s: %s", c.method, c.path, r.body)
		body := r.errBody(t)
		assert.Equal(t, wire.CodeDatabaseUnavailable, body.Code)
		assert.Contains(t, body.Error, "database unavailable")
		assert.Equal(t, "5", r.header.Get("Retry-After"))
	}

	require.NoError(t, cluster.StartServer(ctx))
	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID, "")
	assert.Equal(t, http.StatusOK, r.status, "back once the database is: %s", r.body)
}
