package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var testCommands = map[string]config.Command{
	"hello": {Plugin: "shell", Context: map[string]any{"script": "echo hello"}},
	"sleep": {Plugin: "noop"},
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testEnv struct {
	st  *store.Store
	srv *httptest.Server
	log *syncBuffer
}

func newEnv(t *testing.T, mod func(*api.Options)) *testEnv {
	t.Helper()
	return newEnvOn(t, store.New(pgtest.DB(t)), mod)
}

// newEnvOn is newEnv on st's database: another agent's API beside one.
func newEnvOn(t *testing.T, st *store.Store, mod func(*api.Options)) *testEnv {
	t.Helper()
	logs := &syncBuffer{}
	opts := api.Options{
		Store:           st,
		Commands:        testCommands,
		MaxBodyBytes:    4096,
		Logger:          slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LogPollInterval: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	// Every exchange is checked against the OpenAPI description
	// (openapi_test.go). Close waits for the checks of streamed answers.
	srv := httptest.NewServer(validated(t, loadContract(t), api.New(opts)))
	t.Cleanup(srv.Close)
	return &testEnv{st: st, srv: srv, log: logs}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errBody(t *testing.T) wire.Error {
	t.Helper()
	var e wire.Error
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	require.NotEmpty(t, e.Error)
	return e
}

func (e *testEnv) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	require.NoError(t, err)
	if method == http.MethodPost {
		// State-changing routes require it. A case may replace it.
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *testEnv) submit(t *testing.T, body string) store.Job {
	t.Helper()
	r := e.do(t, "POST", "/api/v1/jobs", body)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var j store.Job
	require.NoError(t, json.Unmarshal(r.body, &j))
	return j
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	return v
}

// claim takes the job's lease as agent a1 and moves it to running.
func (e *testEnv) claim(t *testing.T, id string) (store.Holder, int64) {
	t.Helper()
	ctx := context.Background()
	h := store.Holder{Name: "a1", Generation: "g1"}
	_, err := e.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 10, Commands: []string{"hello", "sleep"}})
	require.NoError(t, err)
	claimed, err := e.st.Claim(ctx, h, 10, []string{"hello", "sleep"})
	require.NoError(t, err)
	for _, c := range claimed {
		if c.Job.ID == id {
			status, err := e.st.MarkRunning(ctx, id, c.Lease, "")
			require.NoError(t, err)
			require.Equal(t, store.StatusRunning, status)
			return h, c.Lease
		}
	}
	t.Fatalf("job %s was not claimed", id)
	return h, 0
}

func TestSubmitAndGet(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "POST", "/api/v1/jobs", `{"command":"hello","context":{"b":2,"a":"x"},"submitter":"alice"}`)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	j := decode[store.Job](t, r)
	assert.NotEmpty(t, j.ID)
	assert.Equal(t, "/api/v1/jobs/"+j.ID, r.header.Get("Location"))
	assert.Equal(t, "hello", j.Command)
	assert.Equal(t, "shell", j.Plugin, "the plugin comes from the command's config")
	assert.Equal(t, store.StatusQueued, j.Status)
	assert.Equal(t, "alice", j.Submitter)
	assert.JSONEq(t, `{"a":"x","b":2}`, string(j.Context))

	g := e.do(t, "GET", "/api/v1/jobs/"+j.ID, "")
	require.Equal(t, http.StatusOK, g.status)
	got := decode[store.Job](t, g)
	assert.Equal(t, j.ID, got.ID)
	assert.Equal(t, "alice", got.Submitter)

	// No context at all and an explicit null both mean {}.
	for _, body := range []string{`{"command":"sleep"}`, `{"command":"sleep","context":null}`} {
		j := e.submit(t, body)
		assert.JSONEq(t, `{}`, string(j.Context))
		assert.Equal(t, "noop", j.Plugin)
	}

	// The request was logged.
	assert.Contains(t, e.log.String(), `"path":"/api/v1/jobs","status":201`)
}

func TestSubmitIdempotency(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"command":"hello","context":{"n":1,"m":2},"idempotency_key":"k-1"}`
	first := e.submit(t, body)

	// The same request again (key order does not matter) replays the job.
	r := e.do(t, "POST", "/api/v1/jobs", `{"idempotency_key":"k-1","command":"hello","context":{"m":2,"n":1}}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, first.ID, decode[store.Job](t, r).ID)

	// The same key with another body is a conflict.
	r = e.do(t, "POST", "/api/v1/jobs", `{"command":"hello","context":{"n":2},"idempotency_key":"k-1"}`)
	require.Equal(t, http.StatusConflict, r.status)
	er := r.errBody(t)
	assert.Equal(t, "idempotency_key", er.Field)
	assert.Equal(t, wire.CodeIdempotencyConflict, er.Code)
	assert.Contains(t, er.Error, `"k-1"`)

	// Exactly one job exists.
	list := decode[wire.JobList](t, e.do(t, "GET", "/api/v1/jobs", ""))
	assert.Len(t, list.Jobs, 1)
}

func TestSubmitBadInput(t *testing.T) {
	e := newEnv(t, nil)
	big := `{"command":"hello","context":{"x":"` + strings.Repeat("a", 5000) + `"}}`
	for _, tc := range []struct {
		name, body string
		status     int
		field      string
		contains   string
	}{
		{"unknown command", `{"command":"nope"}`, 400, "command", `unknown command "nope": neither this agent's config nor any live agent serves it; configured on this agent: hello, sleep; no live agent announces other commands`},
		{"missing command", `{"context":{}}`, 400, "command", "command is required"},
		{"malformed JSON", `{"command":"hello",`, 400, "", "malformed JSON"},
		{"not JSON", `command=hello`, 400, "", "malformed JSON"},
		{"empty body", ``, 400, "", "request body is empty"},
		{"array body", `[1,2]`, 400, "", "request body must be a JSON object"},
		{"trailing data", `{"command":"hello"} {"command":"hello"}`, 400, "", "malformed"},
		{"context array", `{"command":"hello","context":[1]}`, 400, "context", "context must be a JSON object"},
		{"context string", `{"command":"hello","context":"x"}`, 400, "context", "context must be a JSON object"},
		{"context number", `{"command":"hello","context":3}`, 400, "context", "context must be a JSON object"},
		{"unknown field", `{"command":"hello","priority":1}`, 400, "priority", `unknown field "priority"`},
		{"wrong type", `{"command":5}`, 400, "command", "expected string"},
		{"long key", `{"command":"hello","idempotency_key":"` + strings.Repeat("k", 300) + `"}`, 400, "idempotency_key", "longer than"},
		{"oversized body", big, 413, "", "larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/api/v1/jobs", tc.body, "Content-Type", "application/json")
			require.Equal(t, tc.status, r.status, "body: %s", r.body)
			er := r.errBody(t)
			assert.Equal(t, tc.field, er.Field)
			assert.Contains(t, er.Error, tc.contains)
		})
	}
	list := decode[wire.JobList](t, e.do(t, "GET", "/api/v1/jobs", ""))
	assert.Empty(t, list.Jobs, "no bad request created a job")
	assert.Equal(t, "[]", string(mustRaw(t, e.do(t, "GET", "/api/v1/jobs", "").body, "jobs")))
}

func mustRaw(t *testing.T, body []byte, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	return m[key]
}

func TestUnknownCommandWithNoneConfigured(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.Commands = nil })
	r := e.do(t, "POST", "/api/v1/jobs", `{"command":"hello"}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.errBody(t).Error, "no commands are configured")
}

func TestGetUnknownJob(t *testing.T) {
	e := newEnv(t, nil)
	for _, path := range []string{"/api/v1/jobs/nope", "/api/v1/jobs/nope/events", "/api/v1/jobs/nope/logs"} {
		r := e.do(t, "GET", path, "")
		require.Equal(t, http.StatusNotFound, r.status, path)
		er := r.errBody(t)
		assert.Equal(t, `job "nope" not found`, er.Error)
		assert.Equal(t, wire.CodeNotFound, er.Code)
	}
	r := e.do(t, "POST", "/api/v1/jobs/nope/cancel", "")
	require.Equal(t, http.StatusNotFound, r.status)
}

func TestListJobs(t *testing.T) {
	e := newEnv(t, nil)
	var ids []string
	for i := range 5 {
		cmd := []string{"hello", "sleep"}[i%2]
		j := e.submit(t, fmt.Sprintf(`{"command":%q,"submitter":"user%d"}`, cmd, i%2))
		ids = append(ids, j.ID)
	}
	canceled := decode[store.Job](t, e.do(t, "POST", "/api/v1/jobs/"+ids[0]+"/cancel", ""))
	require.Equal(t, store.StatusCanceled, canceled.Status)

	list := func(q string) wire.JobList {
		r := e.do(t, "GET", "/api/v1/jobs"+q, "")
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		return decode[wire.JobList](t, r)
	}
	idsOf := func(l wire.JobList) []string {
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	all := list("")
	assert.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, idsOf(all), "newest first")
	assert.Empty(t, all.Next)
	assert.Equal(t, []string{ids[4], ids[2], ids[0]}, idsOf(list("?command=hello")))
	assert.Equal(t, []string{ids[3], ids[1]}, idsOf(list("?submitter=user1")))
	assert.Equal(t, []string{ids[0]}, idsOf(list("?status=canceled")))
	assert.Equal(t, []string{ids[4], ids[2]}, idsOf(list("?status=queued&command=hello")))

	// Keyset pagination visits every job once.
	var paged []string
	q := "?limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		l := list(q)
		assert.LessOrEqual(t, len(l.Jobs), 2)
		paged = append(paged, idsOf(l)...)
		if l.Next == "" {
			break
		}
		q = "?limit=2&after=" + l.Next
	}
	assert.Equal(t, idsOf(all), paged)

	for _, tc := range []struct{ q, field, contains string }{
		{"?status=done", "status", `unknown status "done"; use one of queued, accepted, running`},
		{"?limit=0", "limit", "limit must be an integer from 1 to 1000"},
		{"?limit=1001", "limit", "limit must be an integer from 1 to 1000"},
		{"?limit=ten", "limit", `got "ten"`},
	} {
		r := e.do(t, "GET", "/api/v1/jobs"+tc.q, "")
		require.Equal(t, http.StatusBadRequest, r.status, tc.q)
		er := r.errBody(t)
		assert.Equal(t, tc.field, er.Field, tc.q)
		assert.Contains(t, er.Error, tc.contains, tc.q)
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	queued := e.submit(t, `{"command":"hello"}`)
	r := e.do(t, "POST", "/api/v1/jobs/"+queued.ID+"/cancel", `{"reason":"not needed"}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	j := decode[store.Job](t, r)
	assert.Equal(t, store.StatusCanceled, j.Status, "a queued job is canceled at once")
	evs := decode[wire.EventList](t, e.do(t, "GET", "/api/v1/jobs/"+queued.ID+"/events", ""))
	require.NotEmpty(t, evs.Events)
	last := evs.Events[len(evs.Events)-1]
	assert.Equal(t, "canceled", last.Kind)
	assert.Equal(t, "not needed", last.Message)

	// A finished job cannot be canceled. The answer says its status.
	r = e.do(t, "POST", "/api/v1/jobs/"+queued.ID+"/cancel", "")
	require.Equal(t, http.StatusConflict, r.status)
	er := r.errBody(t)
	assert.Equal(t, wire.CodeInvalidTransition, er.Code)
	assert.Equal(t, store.StatusCanceled, er.Status, "the answer carries the job's status")
	assert.Contains(t, er.Error, "already canceled")

	// A running job becomes canceling. Its agent stops it.
	running := e.submit(t, `{"command":"sleep"}`)
	e.claim(t, running.ID)
	r = e.do(t, "POST", "/api/v1/jobs/"+running.ID+"/cancel", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, store.StatusCanceling, decode[store.Job](t, r).Status)

	r = e.do(t, "POST", "/api/v1/jobs/"+running.ID+"/cancel", `{"reason":`)
	require.Equal(t, http.StatusBadRequest, r.status)
	r = e.do(t, "POST", "/api/v1/jobs/"+running.ID+"/cancel", `{"why":"x"}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "why", r.errBody(t).Field)
}

func TestEvents(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"hello","submitter":"bob"}`)
	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/events", "")
	require.Equal(t, http.StatusOK, r.status)
	evs := decode[wire.EventList](t, r)
	require.Len(t, evs.Events, 1)
	assert.Equal(t, "submitted", evs.Events[0].Kind)
	assert.Equal(t, j.ID, evs.Events[0].JobID)
	assert.Equal(t, "by bob", evs.Events[0].Message)

	after := decode[wire.EventList](t, e.do(t, "GET", fmt.Sprintf("/api/v1/jobs/%s/events?after=%d", j.ID, evs.Events[0].ID), ""))
	assert.Empty(t, after.Events)
	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/events?after=-1", "")
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "after", r.errBody(t).Field)
}

func TestAgents(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/api/v1/agents", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "[]", string(mustRaw(t, r.body, "agents")))

	j := e.submit(t, `{"command":"hello"}`)
	e.claim(t, j.ID)
	agents := decode[wire.AgentList](t, e.do(t, "GET", "/api/v1/agents", ""))
	require.Len(t, agents.Agents, 1)
	assert.Equal(t, "a1", agents.Agents[0].Name)
	assert.Equal(t, 1, agents.Agents[0].ActiveJobs)
	assert.Equal(t, []string{"hello", "sleep"}, agents.Agents[0].Commands)
}

func TestHealthAndReadiness(t *testing.T) {
	var notReady error
	var mu sync.Mutex
	pool := pgtest.DB(t)
	e := newEnv(t, func(o *api.Options) {
		o.Store = store.New(pool)
		o.Ready = func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			return notReady
		}
	})
	r := e.do(t, "GET", "/healthz", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, `{"status":"ok"}`, string(r.body))
	r = e.do(t, "GET", "/readyz", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)

	mu.Lock()
	notReady = errors.New("plugin shell not started")
	mu.Unlock()
	r = e.do(t, "GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.Contains(t, string(r.body), "plugin shell not started")

	pool.Close() // the database is gone
	r = e.do(t, "GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.Contains(t, string(r.body), "database:")
	r = e.do(t, "GET", "/healthz", "")
	require.Equal(t, http.StatusOK, r.status, "liveness does not depend on the database")
}

func TestAuth(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Tokens = []config.Token{{Name: "ci-bot", Token: "tok-ci-0123456789"}, {Name: "ops", Token: "tok-ops-0123456789"}}
	})
	body := `{"command":"hello","submitter":"mallory"}`

	r := e.do(t, "POST", "/api/v1/jobs", body)
	require.Equal(t, http.StatusUnauthorized, r.status)
	assert.Equal(t, `Bearer realm="tether"`, r.header.Get("WWW-Authenticate"))
	assert.Equal(t, wire.CodeUnauthorized, r.errBody(t).Code)

	r = e.do(t, "POST", "/api/v1/jobs", body, "Authorization", "Bearer wrong-token-0123456")
	require.Equal(t, http.StatusUnauthorized, r.status)
	assert.Contains(t, r.header.Get("WWW-Authenticate"), `error="invalid_token"`)

	r = e.do(t, "POST", "/api/v1/jobs", body, "Authorization", "Basic dG9rLWNpOng=")
	require.Equal(t, http.StatusUnauthorized, r.status)

	for _, path := range []string{"/api/v1/jobs", "/api/v1/agents", "/api/v1/jobs/x", "/api/v1/jobs/x/logs", "/api/v1/jobs/x/events"} {
		r := e.do(t, "GET", path, "")
		assert.Equal(t, http.StatusUnauthorized, r.status, path)
	}

	r = e.do(t, "POST", "/api/v1/jobs", body, "Authorization", "Bearer tok-ops-0123456789")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	j := decode[store.Job](t, r)
	assert.Equal(t, "ops", j.Submitter, "with auth the token's name is the submitter")

	r = e.do(t, "GET", "/api/v1/jobs?submitter=ops", "", "Authorization", "bearer tok-ops-0123456789")
	require.Equal(t, http.StatusOK, r.status)
	assert.Len(t, decode[wire.JobList](t, r).Jobs, 1)

	// Probes stay open for load balancers and orchestrators.
	assert.Equal(t, http.StatusOK, e.do(t, "GET", "/healthz", "").status)
	assert.Equal(t, http.StatusOK, e.do(t, "GET", "/readyz", "").status)
	assert.Contains(t, e.log.String(), `"principal":"ops"`)
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "tether_up 1") })
	})
	r := e.do(t, "GET", "/metrics", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "tether_up 1\n", string(r.body))

	none := newEnv(t, nil)
	assert.Equal(t, http.StatusNotFound, none.do(t, "GET", "/metrics", "").status)
}

func appendLogs(t *testing.T, st *store.Store, id string, lease int64, stdout, stderr string) {
	t.Helper()
	held, err := st.AppendLogs(context.Background(), []store.LogBatch{{JobID: id, Lease: lease, Stdout: []byte(stdout), Stderr: []byte(stderr)}}, 1<<20)
	require.NoError(t, err)
	require.True(t, held[id])
}

func TestLogs(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"hello"}`)

	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Empty(t, r.body, "no output yet")

	_, lease := e.claim(t, j.ID)
	appendLogs(t, e.st, j.ID, lease, "line 1\n", "warn 1\n")
	appendLogs(t, e.st, j.ID, lease, "line 2\n\x00\xff", "")

	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?stream=stdout", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
	assert.Equal(t, "line 1\nline 2\n\x00\xff", string(r.body), "raw bytes")
	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?stream=stderr", "")
	assert.Equal(t, "warn 1\n", string(r.body))
	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs", "")
	assert.Len(t, r.body, len("line 1\nline 2\n\x00\xff")+len("warn 1\n"), "both streams")

	chunks, err := e.st.Logs(context.Background(), j.ID, "stdout", 0, 0)
	require.NoError(t, err)
	r = e.do(t, "GET", fmt.Sprintf("/api/v1/jobs/%s/logs?stream=stdout&after=%d", j.ID, chunks[0].Seq), "")
	assert.Equal(t, "line 2\n\x00\xff", string(r.body))

	for _, tc := range []struct{ q, field string }{
		{"?stream=both", "stream"}, {"?follow=maybe", "follow"}, {"?after=x", "after"},
	} {
		r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs"+tc.q, "")
		require.Equal(t, http.StatusBadRequest, r.status, tc.q)
		assert.Equal(t, tc.field, r.errBody(t).Field)
	}
}

func TestLogsFollowEndsWhenJobFinishes(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)
	appendLogs(t, e.st, j.ID, lease, "first\n", "")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?stream=stdout&follow=true", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// The first chunk arrives while the job is still running.
	buf := make([]byte, len("first\n"))
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	assert.Equal(t, "first\n", string(buf))

	appendLogs(t, e.st, j.ID, lease, "second\n", "ignored stderr\n")
	time.Sleep(60 * time.Millisecond) // a few poll intervals: the stream stays open
	appendLogs(t, e.st, j.ID, lease, "third\n", "")
	require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))

	// The stream ends by itself once the job is finished and drained.
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "second\nthird\n", string(rest))
	require.NoError(t, ctx.Err(), "the stream ended before the test's deadline")

	// Following a finished job returns what it wrote and ends at once.
	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?follow=true&stream=stdout", "")
	assert.Equal(t, "first\nsecond\nthird\n", string(r.body))
}

func TestLogsFollowStopsWhenClientGoesAway(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	_, lease := e.claim(t, j.ID)
	appendLogs(t, e.st, j.ID, lease, "x", "")

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?follow=1", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = io.ReadFull(resp.Body, b)
	require.NoError(t, err)
	cancel()
	resp.Body.Close()

	// httptest.Server.Close waits for every handler to return.
	closed := make(chan struct{})
	go func() { e.srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the follow handler kept running after the client went away")
	}
}

// GET /api/v1/agents answers the live agents (running or draining, seen
// within stale_job) unless all=true, and says which are live.
func TestAgentsLiveByDefaultAllOnRequest(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.StaleJob = time.Minute })
	ctx := context.Background()
	for name, state := range map[string]string{"run": "running", "drain": "draining", "stop": "stopped", "quiet": "running"} {
		h := store.Holder{Name: name, Generation: "g-" + name}
		_, err := e.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"hello"}})
		require.NoError(t, err)
		require.NoError(t, e.st.SetAgentState(ctx, h, state))
	}
	// Silent for longer than the answering agent's stale_job.
	_, err := e.st.Pool().Exec(ctx, `UPDATE agents SET last_seen = now() - interval '2 minutes' WHERE name = 'quiet'`)
	require.NoError(t, err)

	liveness := func(path string) map[string]bool {
		t.Helper()
		r := e.do(t, "GET", path, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var raw struct {
			Agents []map[string]any `json:"agents"`
		}
		require.NoError(t, json.Unmarshal(r.body, &raw))
		out := map[string]bool{}
		for _, a := range raw.Agents {
			live, ok := a["live"].(bool)
			require.True(t, ok, "every agent says whether it is live: %v", a)
			out[a["name"].(string)] = live
		}
		return out
	}
	assert.Equal(t, map[string]bool{"drain": true, "run": true}, liveness("/api/v1/agents"))
	assert.Equal(t, map[string]bool{"drain": true, "run": true}, liveness("/api/v1/agents?all=false"))
	assert.Equal(t, map[string]bool{"drain": true, "run": true, "stop": false, "quiet": false}, liveness("/api/v1/agents?all=true"))

	for _, q := range []string{"?all=yes", "?all=1", "?all=TRUE"} {
		r := e.do(t, "GET", "/api/v1/agents"+q, "")
		require.Equal(t, http.StatusBadRequest, r.status, q)
		assert.Equal(t, "all", r.errBody(t).Field, q)
	}
}
