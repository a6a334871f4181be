package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// hostile is one request that must be refused.
type hostile struct {
	name, method, path, body string
	// header replaces the default headers (Content-Type: application/json
	// on POST). A "" value removes one. "Host" sets the request's Host.
	header map[string]string
	status int
	code   string
	field  string
}

// badStrings are JSON string literals PostgreSQL refuses (or that
// encoding/json would silently alter), as they appear in a request body.
var badStrings = []struct{ name, lit string }{
	{"NUL escape", `"a\u0000b"`},
	{"invalid UTF-8", "\"a\xffb\""},
	{"overlong UTF-8", "\"a\xc0\x80b\""},
	{"UTF-8 surrogate", "\"a\xed\xa0\x80b\""},
	{"lone high surrogate", `"a\ud800b"`},
	{"lone low surrogate", `"a\udc00b"`},
	{"high surrogate then a letter", `"\udbff\u0041"`},
}

// badQuery are query-string encodings of text PostgreSQL refuses.
var badQuery = []struct{ name, enc string }{
	{"NUL", "a%00b"}, {"invalid UTF-8", "%ff"}, {"UTF-8 surrogate", "%ed%a0%80"}, {"overlong", "%c0%80"},
}

// hostileSubmitBodies are submit bodies that must be refused, with the
// field named. The fuzz test seeds from them.
func hostileSubmitBodies() []hostile {
	var out []hostile
	add := func(name, body, code, field string) {
		out = append(out, hostile{name: "submit " + name, method: "POST", path: "/api/v1/jobs", body: body,
			status: http.StatusBadRequest, code: code, field: field})
	}
	for _, s := range badStrings {
		add("command "+s.name, `{"command":`+s.lit+`}`, wire.CodeBadRequest, "command")
		add("idempotency_key "+s.name, `{"command":"hello","idempotency_key":`+s.lit+`}`, wire.CodeBadRequest, "idempotency_key")
		add("submitter "+s.name, `{"command":"hello","submitter":`+s.lit+`}`, wire.CodeBadRequest, "submitter")
		add("context value "+s.name, `{"command":"hello","context":{"a":`+s.lit+`}}`, wire.CodeBadRequest, "context.a")
		add("context key "+s.name, `{"command":"hello","context":{"env":{`+s.lit+`:"x"}}}`, wire.CodeBadRequest, "context.env")
		add("context array "+s.name, `{"command":"hello","context":{"l":[1,`+s.lit+`]}}`, wire.CodeBadRequest, "context.l[1]")
		add("limits "+s.name, `{"command":"hello","limits":{"active_timeout":`+s.lit+`}}`, wire.CodeBadRequest, "limits.active_timeout")
	}
	for _, n := range []string{"1e400", "-1e400", "1e-16384", "0." + strings.Repeat("7", 17000), "1" + strings.Repeat("0", 400), "0e2147483648", "0e99999999999999999999"} {
		add(fmt.Sprintf("context number %.12s", n), `{"command":"hello","context":{"n":`+n+`}}`, wire.CodeBadRequest, "context.n")
	}
	add("nested number", `{"command":"hello","context":{"a":{"b":[{"c":1e999}]}}}`, wire.CodeBadRequest, "context.a.b[0].c")
	for _, mr := range []string{"3000000000", "2147483648", "-1", "9223372036854775808", "1.5", "1e400", `"3"`} {
		add("max_retry "+mr, `{"command":"hello","limits":{"max_retry":`+mr+`}}`, wire.CodeBadRequest, "limits.max_retry")
	}
	for _, d := range []struct{ field, v string }{
		{"active_timeout", "-100000d2000000h"}, {"active_timeout", "300000000h"}, {"ttl_failed", "9999999999d"},
		{"ttl_succeeded", "100001d"}, {"pending_timeout", "-1s"}, {"retry_backoff", "-5d"},
		{"retry_backoff_max", "9223372036854775807ns1h"}, {"active_timeout", "1e3s"}, {"ttl_failed", "24hh"},
	} {
		add(d.field+" "+d.v, `{"command":"hello","limits":{"`+d.field+`":"`+d.v+`"}}`, wire.CodeBadRequest, "limits."+d.field)
	}
	add("raw NUL byte", "{\"command\":\"hel\x00lo\"}", wire.CodeBadRequest, "")
	add("context too deep", `{"command":"hello","context":`+strings.Repeat(`{"a":`, 10001)+`1`+strings.Repeat(`}`, 10001)+`}`, wire.CodeBadRequest, "")
	return out
}

func hostileRequests(queued, failed string) []hostile {
	cases := hostileSubmitBodies()
	add := func(h hostile) { cases = append(cases, h) }
	bad := func(name, method, path, body, field string) {
		add(hostile{name: name, method: method, path: path, body: body, status: 400, code: wire.CodeBadRequest, field: field})
	}
	for _, s := range badStrings {
		bad("cancel reason "+s.name, "POST", "/api/v1/jobs/"+queued+"/cancel", `{"reason":`+s.lit+`}`, "reason")
		bad("requeue reason "+s.name, "POST", "/api/v1/jobs/"+failed+"/requeue", `{"reason":`+s.lit+`}`, "reason")
		bad("requeue key "+s.name, "POST", "/api/v1/jobs/"+failed+"/requeue", `{"reason":"r","key":`+s.lit+`}`, "key")
		bad("requeue submitter "+s.name, "POST", "/api/v1/jobs/"+failed+"/requeue", `{"reason":"r","submitter":`+s.lit+`}`, "submitter")
	}
	for _, q := range badQuery {
		for _, p := range []string{"command", "submitter", "after", "status"} {
			bad("list "+p+" "+q.name, "GET", "/api/v1/jobs?"+p+"="+q.enc, "", p)
		}
		bad("logs stream "+q.name, "GET", "/api/v1/jobs/"+queued+"/logs?stream="+q.enc, "", "stream")
		bad("logs follow "+q.name, "GET", "/api/v1/jobs/"+queued+"/logs?follow="+q.enc, "", "follow")
		bad("events after "+q.name, "GET", "/api/v1/jobs/"+queued+"/events?after="+q.enc, "", "after")
	}
	bad("query name NUL", "GET", "/api/v1/jobs?a%00=1", "", "")
	for _, q := range []struct{ name, path, field string }{
		{"after garbage", "/api/v1/jobs?after=garbage", "after"},
		{"after number", "/api/v1/jobs?after=12", "after"},
		{"after almost uuid", "/api/v1/jobs?after=" + queued + "0", "after"},
		{"huge limit", "/api/v1/jobs?limit=99999999999999999999999", "limit"},
		{"negative limit", "/api/v1/jobs?limit=-1", "limit"},
		{"float limit", "/api/v1/jobs?limit=1e3", "limit"},
		{"status case", "/api/v1/jobs?status=QUEUED", "status"},
		{"status sql", "/api/v1/jobs?status=queued'%20OR%201=1--", "status"},
		{"events negative after", "/api/v1/jobs/" + queued + "/events?after=-1", "after"},
		{"events overflowing after", "/api/v1/jobs/" + queued + "/events?after=9223372036854775808", "after"},
		{"events huge limit", "/api/v1/jobs/" + queued + "/events?limit=100001", "limit"},
		{"logs bad stream", "/api/v1/jobs/" + queued + "/logs?stream=both", "stream"},
		{"logs upper stream", "/api/v1/jobs/" + queued + "/logs?stream=STDOUT", "stream"},
		{"logs bad follow", "/api/v1/jobs/" + queued + "/logs?follow=maybe", "follow"},
		{"logs bad after", "/api/v1/jobs/" + queued + "/logs?after=x", "after"},
	} {
		bad(q.name, "GET", q.path, "", q.field)
	}
	bad("requeue without reason", "POST", "/api/v1/jobs/"+failed+"/requeue", `{"key":"k"}`, "reason")
	bad("requeue empty body", "POST", "/api/v1/jobs/"+failed+"/requeue", ``, "")
	bad("cancel unknown field", "POST", "/api/v1/jobs/"+queued+"/cancel", `{"why":"x"}`, "why")

	// Path IDs that are not UUIDs name no job: 404 before any query.
	for _, id := range []string{"%00", "%ff", "a%00b", "%ed%a0%80", "nope", "12345", queued + "x", "00000000-0000-0000-0000-000000000000"} {
		nf := func(method, path, body string) {
			add(hostile{name: method + " " + path, method: method, path: path, body: body, status: 404, code: wire.CodeNotFound})
		}
		nf("GET", "/api/v1/jobs/"+id, "")
		nf("GET", "/api/v1/jobs/"+id+"/logs", "")
		nf("GET", "/api/v1/jobs/"+id+"/events", "")
		nf("POST", "/api/v1/jobs/"+id+"/cancel", `{}`)
		nf("POST", "/api/v1/jobs/"+id+"/requeue", `{"reason":"r"}`)
	}

	// Cross-site. Every state-changing route wants JSON and a same-site
	// Origin.
	posts := []struct{ path, body string }{
		{"/api/v1/jobs", `{"command":"hello"}`},
		{"/api/v1/jobs/" + queued + "/cancel", `{"reason":"r"}`},
		{"/api/v1/jobs/" + failed + "/requeue", `{"reason":"r"}`},
	}
	for _, p := range posts {
		for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", "text/json", "application/jsonp", "application/json; charset=iso-8859-1", "application/json;;"} {
			add(hostile{name: "content type " + ct + " " + p.path, method: "POST", path: p.path, body: p.body,
				header: map[string]string{"Content-Type": ct}, status: 415, code: wire.CodeUnsupportedMediaType, field: "Content-Type"})
		}
		add(hostile{name: "cancel with no body and no content type " + p.path, method: "POST", path: p.path,
			header: map[string]string{"Content-Type": ""}, status: 415, code: wire.CodeUnsupportedMediaType, field: "Content-Type"})
		for _, origin := range []string{"null", "http://evil.example", "http://127.0.0.1:1", "http://localhost", "file://", "%%"} {
			add(hostile{name: "origin " + origin + " " + p.path, method: "POST", path: p.path, body: p.body,
				header: map[string]string{"Origin": origin}, status: 403, code: wire.CodeForbiddenOrigin, field: "Origin"})
		}
	}
	// DNS rebinding. A name that is not the agent's.
	for _, h := range []struct{ method, path, body, host string }{
		{"POST", "/api/v1/jobs", `{"command":"hello"}`, "evil.example"},
		{"POST", "/api/v1/jobs", `{"command":"hello"}`, "localhost.evil.example:9090"},
		{"POST", "/api/v1/jobs/" + queued + "/cancel", `{}`, "rebind.evil.example"},
		{"GET", "/api/v1/jobs", "", "evil.example:80"},
		{"GET", "/api/v1/jobs/" + queued, "", "127.0.0.1.evil.example"},
		{"GET", "/healthz", "", "evil.example"},
	} {
		add(hostile{name: "host " + h.host + " " + h.path, method: h.method, path: h.path, body: h.body,
			header: map[string]string{"Host": h.host}, status: 421, code: wire.CodeForbiddenHost, field: "Host"})
	}
	for _, p := range []string{"/", "/api", "/api/v1", "/api/v1/nope", "/api/v2/jobs", "/jobs", "/api/v1/jobs/" + queued + "/retry", "/api/v1/jobs/", "/metrics"} {
		add(hostile{name: "unknown route " + p, method: "GET", path: p, status: 404, code: wire.CodeNotFound})
	}
	for _, m := range []struct{ method, path string }{
		{"DELETE", "/api/v1/jobs"}, {"PUT", "/api/v1/jobs"}, {"PATCH", "/api/v1/jobs/" + queued},
		{"DELETE", "/api/v1/jobs/" + queued}, {"GET", "/api/v1/jobs/" + queued + "/cancel"},
		{"GET", "/api/v1/jobs/" + failed + "/requeue"}, {"POST", "/healthz"}, {"POST", "/api/v1/agents"},
		{"PUT", "/api/v1/jobs/" + queued + "/logs"},
	} {
		add(hostile{name: "method " + m.method + " " + m.path, method: m.method, path: m.path, body: `{}`,
			status: 405, code: wire.CodeMethodNotAllowed})
	}
	return cases
}

// send makes one request against the test server.
func (e *testEnv) send(t testing.TB, h hostile) response {
	t.Helper()
	var rd io.Reader
	if h.body != "" {
		rd = strings.NewReader(h.body)
	}
	req, err := http.NewRequest(h.method, e.srv.URL+h.path, rd)
	require.NoError(t, err)
	if h.method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h.header {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// rowCounts counts what a request could create: jobs, their claimable rows,
// events and requeue keys.
func rowCounts(t testing.TB, pool *pgxpool.Pool) [4]int {
	t.Helper()
	var c [4]int
	err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM active_jobs),
		(SELECT count(*) FROM job_timeline), (SELECT count(*) FROM requeue_requests)`).Scan(&c[0], &c[1], &c[2], &c[3])
	require.NoError(t, err)
	return c
}

func TestHostileRequests(t *testing.T) {
	pool := pgtest.DB(t)
	st := store.New(pool)
	e := newEnv(t, func(o *api.Options) {
		o.Store = st
		o.MaxBodyBytes = 1 << 20
		d := config.Default().Defaults
		d.MaxRetry = 0
		o.Defaults = &d
		o.Metrics = nil
	})
	e.st = st // the handler's store, whose rows are counted
	failedJob := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, failedJob.ID)
	require.NoError(t, e.st.Finish(context.Background(), h, failedJob.ID, lease,
		store.Outcome{Status: store.StatusFailed, Error: "boom", ErrorClass: "permanent"}))
	queued := e.submit(t, `{"command":"hello"}`)

	cases := hostileRequests(queued.ID, failedJob.ID)
	require.GreaterOrEqual(t, len(cases), 150)
	t.Logf("%d hostile requests", len(cases))
	before := rowCounts(t, pool)
	for _, tc := range cases {
		r := e.send(t, tc)
		ok := assert.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.body)
		ok = assert.Equal(t, "application/json", r.header.Get("Content-Type"), tc.name) && ok
		var er wire.Error
		if ok && assert.NoError(t, json.Unmarshal(r.body, &er), "%s: %s", tc.name, r.body) {
			assert.NotEmpty(t, er.Error, tc.name)
			assert.Equal(t, tc.code, er.Code, "%s: %s", tc.name, r.body)
			assert.Equal(t, tc.field, er.Field, "%s: %s", tc.name, r.body)
		}
		if tc.status == http.StatusMethodNotAllowed {
			assert.NotEmpty(t, r.header.Get("Allow"), tc.name)
		}
		assert.Empty(t, r.header.Get("Access-Control-Allow-Origin"), "%s: no CORS headers, ever", tc.name)
		assert.Equal(t, before, rowCounts(t, pool), "%s created something", tc.name)
	}
	assert.NotContains(t, e.log.String(), `"status":500`, "no request was a server error")

	j, err := e.st.GetJob(context.Background(), queued.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusQueued, j.Status, "no refused cancel canceled it")
}

// The checks refuse what PostgreSQL refuses and nothing more.
func TestHostileLookalikesAccepted(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.MaxBodyBytes = 1 << 20 })
	for _, body := range []string{
		`{"command":"hello","context":{"emoji":"\ud83d\ude00","é":"ü","tab":"a\tb","esc":"\\u0000 is text here"}}`,
		`{"command":"hello","context":{"big":1.7976931348623157e308,"tiny":1e-400,"exact":1.00000000000000000000001,"scale":1e-16383}}`,
		`{"command":"hello","limits":{"max_retry":2147483647,"ttl_failed":"100000d","active_timeout":"99999d24h"}}`,
		`{"command":"hello","context":` + strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat(`}`, 500) + `}`,
	} {
		r := e.do(t, "POST", "/api/v1/jobs", body)
		require.Equal(t, http.StatusCreated, r.status, "%.80s: %s", body, r.body)
	}
	j := e.submit(t, `{"command":"hello","context":{"emoji":"\ud83d\ude00","n":1.00000000000000000000001}}`)
	assert.JSONEq(t, `{"emoji":"😀","n":1.00000000000000000000001}`, string(j.Context))

	ok := func(method, path, body string, header ...string) {
		t.Helper()
		r := e.do(t, method, path, body, header...)
		assert.Less(t, r.status, 300, "%s %s %v: %s", method, path, header, r.body)
	}
	ok("GET", "/api/v1/jobs?command=caf%C3%A9&submitter=%F0%9F%98%80", "")
	ok("GET", "/api/v1/jobs?after="+strings.ToUpper(j.ID), "") // the canonical form is used
	ok("GET", "/api/v1/jobs/"+strings.ToUpper(j.ID), "")
	ok("POST", "/api/v1/jobs/"+j.ID+"/cancel", "", "Content-Type", "Application/JSON; charset=UTF-8")
	ok("POST", "/api/v1/jobs", `{"command":"hello"}`, "Origin", e.srv.URL)
	ok("GET", "/healthz", "", "Origin", "null") // Origin only matters on state-changing routes
	for _, host := range []string{"localhost", "dev.localhost:9090", "[::1]:9090", "10.0.0.1"} {
		r := e.send(t, hostile{method: "GET", path: "/healthz", header: map[string]string{"Host": host}})
		assert.Equal(t, http.StatusOK, r.status, "Host %s: %s", host, r.body)
	}
}

func TestAllowedHostsAndTokens(t *testing.T) {
	const token = "tok-0123456789abcdef"
	tokens := []config.Token{{Name: "ops", Token: token}}
	get := func(e *testEnv, host string, header ...string) int {
		hdr := map[string]string{"Host": host}
		for i := 0; i+1 < len(header); i += 2 {
			hdr[header[i]] = header[i+1]
		}
		return e.send(t, hostile{method: "GET", path: "/api/v1/jobs", header: hdr}).status
	}
	// With tokens and no list, any Host. A rebinding page has no token.
	open := newEnv(t, func(o *api.Options) { o.Tokens = tokens })
	assert.Equal(t, http.StatusOK, get(open, "tether.example.com", "Authorization", "Bearer "+token))

	listed := newEnv(t, func(o *api.Options) {
		o.Tokens = tokens
		o.AllowedHosts = []string{"tether.example.com", "api.example.com:8443"}
		o.ListenAddr = "agent.internal:9090"
	})
	auth := []string{"Authorization", "Bearer " + token}
	assert.Equal(t, http.StatusOK, get(listed, "TETHER.example.com:1234", auth...))
	assert.Equal(t, http.StatusOK, get(listed, "api.example.com:8443", auth...))
	assert.Equal(t, http.StatusOK, get(listed, "agent.internal:9090", auth...), "the listen address's name")
	assert.Equal(t, http.StatusMisdirectedRequest, get(listed, "api.example.com:9090", auth...))
	assert.Equal(t, http.StatusMisdirectedRequest, get(listed, "evil.example", auth...))
	r := listed.send(t, hostile{method: "GET", path: "/api/v1/jobs", header: map[string]string{"Host": "evil.example"}})
	er := r.errBody(t)
	assert.Equal(t, "Host", er.Field)
	assert.Contains(t, er.Error, "http.allowed_hosts")

	// A listed host is also an allowed Origin (a UI served from it).
	r = listed.send(t, hostile{method: "POST", path: "/api/v1/jobs", body: `{"command":"hello"}`,
		header: map[string]string{"Origin": "https://tether.example.com", "Authorization": "Bearer " + token}})
	assert.Equal(t, http.StatusCreated, r.status, "%s", r.body)
}

func TestIdempotencyKeysPerSubmitter(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Tokens = []config.Token{{Name: "ci", Token: "tok-ci-0123456789"}, {Name: "ops", Token: "tok-ops-0123456789"}}
	})
	body := `{"command":"hello","idempotency_key":"deploy-1","context":{"v":1}}`
	ci := e.do(t, "POST", "/api/v1/jobs", body, "Authorization", "Bearer tok-ci-0123456789")
	require.Equal(t, http.StatusCreated, ci.status, "%s", ci.body)
	// Another token with the same key and another body. It gets its own job,
	// not a conflict that would tell it ci's key exists.
	ops := e.do(t, "POST", "/api/v1/jobs", `{"command":"sleep","idempotency_key":"deploy-1"}`, "Authorization", "Bearer tok-ops-0123456789")
	require.Equal(t, http.StatusCreated, ops.status, "%s", ops.body)
	ciJob, opsJob := decode[store.Job](t, ci), decode[store.Job](t, ops)
	assert.NotEqual(t, ciJob.ID, opsJob.ID)
	assert.Equal(t, "ops", opsJob.Submitter)

	// Each replays its own.
	r := e.do(t, "POST", "/api/v1/jobs", body, "Authorization", "Bearer tok-ci-0123456789")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, ciJob.ID, decode[store.Job](t, r).ID)
	r = e.do(t, "POST", "/api/v1/jobs", body, "Authorization", "Bearer tok-ops-0123456789")
	require.Equal(t, http.StatusConflict, r.status, "ops's key with ci's body: ops's own conflict")

	// With auth off the request's submitter scopes the key.
	anon := newEnv(t, nil)
	a := anon.submit(t, `{"command":"hello","idempotency_key":"k","submitter":"alice"}`)
	b := anon.submit(t, `{"command":"hello","idempotency_key":"k","submitter":"bob"}`)
	assert.NotEqual(t, a.ID, b.ID)
}

func TestIdempotencyHashIsExact(t *testing.T) {
	e := newEnv(t, nil)
	first := e.submit(t, `{"command":"hello","idempotency_key":"k","context":{"n":1,"s":"x"}}`)
	for _, body := range []string{
		`{"command":"hello","idempotency_key":"k","context":{"n":1.00000000000000001,"s":"x"}}`, // equal as float64
		`{"command":"hello","idempotency_key":"k","context":{"n":1.0,"s":"x"}}`,
		`{"command":"hello","idempotency_key":"k","context":{"n":1e0,"s":"x"}}`,
		`{"command":"hello","idempotency_key":"k","context":{"n":1,"s":"x","t":null}}`,
	} {
		r := e.do(t, "POST", "/api/v1/jobs", body)
		require.Equal(t, http.StatusConflict, r.status, "%s: %s", body, r.body)
		assert.Equal(t, wire.CodeIdempotencyConflict, r.errBody(t).Code)
	}
	// Key order, whitespace and string escapes are not part of the request.
	r := e.do(t, "POST", "/api/v1/jobs", `{ "context" : { "s" : "\u0078", "n" : 1 }, "idempotency_key":"k", "command":"hello" }`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, first.ID, decode[store.Job](t, r).ID)
}

func TestRequeueKeysPerRequester(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		d := config.Default().Defaults
		d.MaxRetry = 0
		o.Defaults = &d
	})
	fail := func() string {
		j := e.submit(t, `{"command":"sleep"}`)
		h, lease := e.claim(t, j.ID)
		require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease,
			store.Outcome{Status: store.StatusFailed, Error: "boom", ErrorClass: "permanent"}))
		return j.ID
	}
	j1, j2 := fail(), fail()
	r := e.do(t, "POST", "/api/v1/jobs/"+j1+"/requeue", `{"reason":"r","key":"same","submitter":"alice"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	// bob's "same" is bob's. It requeues j2 rather than conflicting with
	// alice's.
	r = e.do(t, "POST", "/api/v1/jobs/"+j2+"/requeue", `{"reason":"r","key":"same","submitter":"bob"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.False(t, decode[wire.RequeueResponse](t, r).Replayed)
	// alice reusing her key for another job is her conflict.
	r = e.do(t, "POST", "/api/v1/jobs/"+j2+"/requeue", `{"reason":"r","key":"same","submitter":"alice"}`)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	assert.Equal(t, "key", r.errBody(t).Field)
}

// With tokens on, every /api/ route refuses every request that does not
// carry a configured token, in every way a token can be malformed, with a
// 401 in the JSON shape, the WWW-Authenticate challenge and nothing created.
// The probes stay open.
func TestUnauthenticatedVariantsRefused(t *testing.T) {
	const token = "tok-0123456789abcdef"
	pool := pgtest.DB(t)
	st := store.New(pool)
	e := newEnv(t, func(o *api.Options) {
		o.Store = st
		o.Tokens = []config.Token{{Name: "ops", Token: token}}
	})
	e.st = st
	sub := e.do(t, "POST", "/api/v1/jobs", `{"command":"hello"}`, "Authorization", "Bearer "+token)
	require.Equal(t, http.StatusCreated, sub.status, "%s", sub.body)
	var job store.Job
	require.NoError(t, json.Unmarshal(sub.body, &job))

	routes := []struct{ method, path, body string }{
		{"POST", "/api/v1/jobs", `{"command":"hello"}`},
		{"GET", "/api/v1/jobs", ""},
		{"GET", "/api/v1/jobs/" + job.ID, ""},
		{"POST", "/api/v1/jobs/" + job.ID + "/cancel", `{}`},
		{"POST", "/api/v1/jobs/" + job.ID + "/requeue", `{"reason":"x"}`},
		{"GET", "/api/v1/jobs/" + job.ID + "/logs", ""},
		{"GET", "/api/v1/jobs/" + job.ID + "/events", ""},
		{"GET", "/api/v1/agents", ""},
		{"GET", "/api/v1/commands", ""},
		{"GET", "/api/v1/cleanups", ""},
	}
	variants := []struct {
		name   string
		header map[string]string // "" removes the header
	}{
		{"none", map[string]string{"Authorization": ""}},
		{"empty", map[string]string{"Authorization": " "}},
		{"scheme only", map[string]string{"Authorization": "Bearer"}},
		{"scheme and space", map[string]string{"Authorization": "Bearer  "}},
		{"basic", map[string]string{"Authorization": "Basic b3BzOnRvay0wMTIzNDU2Nzg5YWJjZGVm"}},
		{"token without scheme", map[string]string{"Authorization": token}},
		{"wrong token", map[string]string{"Authorization": "Bearer tok-wrong-0123456789"}},
		{"prefix of the token", map[string]string{"Authorization": "Bearer " + token[:len(token)-1]}},
		{"token and more", map[string]string{"Authorization": "Bearer " + token + "x"}},
		{"token twice", map[string]string{"Authorization": "Bearer " + token + " " + token}},
		{"upper-cased token", map[string]string{"Authorization": "Bearer " + strings.ToUpper(token)}},
		{"other scheme", map[string]string{"Authorization": "Token " + token}},
		{"token name", map[string]string{"Authorization": "Bearer ops"}},
		{"token in another header", map[string]string{"Authorization": "", "X-Api-Token": token}},
		{"token in a cookie", map[string]string{"Authorization": "", "Cookie": "token=" + token}},
		{"invalid UTF-8 token", map[string]string{"Authorization": "Bearer \xff\xfe"}},
		{"huge token", map[string]string{"Authorization": "Bearer " + strings.Repeat("a", 64<<10)}},
	}
	before := rowCounts(t, pool)
	n := 0
	for _, rt := range routes {
		for _, v := range variants {
			h := map[string]string{}
			for k, val := range v.header {
				h[k] = val
			}
			r := e.send(t, hostile{method: rt.method, path: rt.path, body: rt.body, header: h})
			name := rt.method + " " + rt.path + " " + v.name
			n++
			if !assert.Equal(t, http.StatusUnauthorized, r.status, "%s: %s", name, r.body) {
				continue
			}
			assert.Equal(t, wire.CodeUnauthorized, r.errBody(t).Code, name)
			assert.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer", name)
			assert.NotContains(t, string(r.body), token, "%s: the answer never echoes a token", name)
		}
		// The token in the query string is not a token either.
		r := e.send(t, hostile{method: rt.method, path: rt.path + "?access_token=" + token, body: rt.body, header: map[string]string{"Authorization": ""}})
		n++
		assert.Equal(t, http.StatusUnauthorized, r.status, "%s %s token in the query: %s", rt.method, rt.path, r.body)
	}
	t.Logf("%d unauthenticated requests", n)
	assert.Equal(t, before, rowCounts(t, pool), "an unauthenticated request created something")
	got, err := st.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusQueued, got.Status, "no unauthenticated cancel went through")
	for _, p := range []string{"/healthz", "/readyz"} {
		assert.Equal(t, http.StatusOK, e.send(t, hostile{method: "GET", path: p, header: map[string]string{"Authorization": ""}}).status, p)
	}
}
