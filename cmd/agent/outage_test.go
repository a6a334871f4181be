package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// During a database outage the CLI says the database is unavailable (the
// API's 503), not "internal error". Real PostgreSQL, stopped.
func TestJobsDuringDatabaseOutage(t *testing.T) {
	ctx := context.Background()
	cluster, url := pgtest.StartCluster(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv := httptest.NewServer(api.New(api.Options{Store: store.New(pool), Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	c := &cli{url: srv.URL, env: map[string]string{"TETHER_SERVER": srv.URL}}
	c.ok(t, "jobs")

	require.NoError(t, cluster.StopServer(ctx))
	for _, args := range [][]string{{"jobs"}, {"jobs"}, {"agents"}, {"get", "01a250de-a8a6-7c8e-b032-218dfe892606"}} {
		r := c.run(t, args...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stderr, "database unavailable", args)
		assert.Contains(t, r.stderr, "(HTTP 503)", args)
		assert.NotContains(t, r.stderr, "internal error", args)
	}
}
