package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// /readyz stays 200 ready but warns about each configured command no live
// agent serves. A command a live agent serves is not mentioned.
func TestReadyzWarnsAboutUnservedCommands(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/readyz", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	st := decode[wire.Status](t, r)
	assert.Equal(t, "ready", st.Status)
	assert.Equal(t, []string{
		"command hello: no live agent serves it; jobs wait queued",
		"command sleep: no live agent serves it; jobs wait queued",
	}, st.Warnings)

	h := store.Holder{Name: "a1", Generation: "g1"}
	_, err := e.st.RegisterAgent(context.Background(), store.Registration{Holder: h, Capacity: 1, Commands: []string{"hello"}})
	require.NoError(t, err)
	r = e.do(t, "GET", "/readyz", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, []string{"command sleep: no live agent serves it; jobs wait queued"}, decode[wire.Status](t, r).Warnings)

	// A job of a command this agent does not configure, queued with nobody
	// to run it, is warned about too.
	_, _, err = e.st.Submit(context.Background(), store.SubmitParams{Command: "report", Plugin: "ecs"})
	require.NoError(t, err)
	r = e.do(t, "GET", "/readyz", "")
	assert.Equal(t, []string{
		"command report: no live agent serves it; jobs wait queued",
		"command sleep: no live agent serves it; jobs wait queued",
	}, decode[wire.Status](t, r).Warnings)

	_, err = e.st.RegisterAgent(context.Background(), store.Registration{Holder: store.Holder{Name: "a2", Generation: "g1"}, Capacity: 1, Commands: []string{"sleep", "report"}})
	require.NoError(t, err)
	r = e.do(t, "GET", "/readyz", "")
	assert.JSONEq(t, `{"status":"ready"}`, string(r.body), "every command served: no warnings field")
}

// Requests are counted by the route pattern that matched, never the raw
// path. Unmatched requests share one label.
func TestHTTPMetricsByRoutePattern(t *testing.T) {
	m := metrics.New()
	e := newEnv(t, func(o *api.Options) { o.RequestMetrics = m })
	j := e.submit(t, `{"command":"hello"}`)
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/api/v1/jobs/"+j.ID, "").status)
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/api/v1/jobs/"+j.ID, "").status)
	require.Equal(t, http.StatusNotFound, e.do(t, "GET", "/api/v1/jobs/01a2330e-b874-7a46-93d3-34c17198ad7b", "").status)
	require.Equal(t, http.StatusNotFound, e.do(t, "GET", "/no/such/"+j.ID, "").status)
	require.Equal(t, http.StatusBadRequest, e.do(t, "GET", "/api/v1/jobs?limit=0", "").status)

	count := func(match map[string]string) float64 {
		t.Helper()
		v, err := m.Value("tether_http_requests_total", match)
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, 2.0, count(map[string]string{"route": "GET /api/v1/jobs/{id}", "code": "200"}))
	assert.Equal(t, 1.0, count(map[string]string{"route": "GET /api/v1/jobs/{id}", "code": "404"}))
	assert.Equal(t, 1.0, count(map[string]string{"route": "POST /api/v1/jobs", "code": "201"}))
	assert.Equal(t, 1.0, count(map[string]string{"route": "GET /api/v1/jobs", "code": "400"}))
	assert.Equal(t, 1.0, count(map[string]string{"route": metrics.UnmatchedRoute, "code": "404"}))
	assert.Equal(t, 6.0, count(nil), "every request counted once")
	assert.Equal(t, 0.0, count(map[string]string{"route": "GET /api/v1/jobs/" + j.ID}), "never the raw path")
	d, err := m.Value("tether_http_request_duration_seconds", map[string]string{"route": "GET /api/v1/jobs/{id}"})
	require.NoError(t, err)
	assert.Equal(t, 3.0, d, "a duration per request")
}

// QuietRequests (tether dev) moves answered requests' log lines to debug,
// so the job's output stays readable. Probes are debug either way and a
// server error stays an error.
func TestQuietRequestsLogAtDebug(t *testing.T) {
	levelOf := func(t *testing.T, logs, path string) string {
		t.Helper()
		for _, line := range strings.Split(logs, "\n") {
			var rec struct {
				Level, Msg, Path string
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "http request" && rec.Path == path {
				return rec.Level
			}
		}
		t.Fatalf("no request line for %s in:\n%s", path, logs)
		return ""
	}
	for _, quiet := range []bool{false, true} {
		e := newEnv(t, func(o *api.Options) { o.QuietRequests = quiet })
		require.Equal(t, http.StatusOK, e.do(t, "GET", "/api/v1/jobs", "").status)
		require.Equal(t, http.StatusOK, e.do(t, "GET", "/healthz", "").status)
		want := "INFO"
		if quiet {
			want = "DEBUG"
		}
		assert.Equal(t, want, levelOf(t, e.log.String(), "/api/v1/jobs"), "quiet=%v", quiet)
		assert.Equal(t, "DEBUG", levelOf(t, e.log.String(), "/healthz"), "quiet=%v: probes", quiet)

		e.st.Pool().Close() // every query now fails: a server error
		require.Equal(t, http.StatusInternalServerError, e.do(t, "GET", "/api/v1/agents", "").status)
		assert.Equal(t, "ERROR", levelOf(t, e.log.String(), "/api/v1/agents"), "quiet=%v: a 5xx stays an error", quiet)
	}
}
