package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

const ndjson = "application/x-ndjson"

// contract checks exchanges with the API against its OpenAPI description.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// errorSchema is the Error object, for the answers no operation
	// describes (the mux's 404 and 405).
	errorSchema *openapi3.Schema
	// opts check format: uuid too (kin-openapi knows only date-time and
	// a few others by default).
	opts []openapi3.SchemaValidationOption
}

// consoleMedia are the media types of the console's files (GET /, /ui/).
var consoleMedia = map[string]bool{"text/html": true, "text/javascript": true, "text/css": true, "image/svg+xml": true}

// loadContract loads and validates the description the API serves.
func loadContract(t testing.TB) *contract {
	t.Helper()
	raw, err := api.OpenAPI()
	require.NoError(t, err)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err, "loading the OpenAPI description")
	require.NoError(t, doc.Validate(loader.Context), "the OpenAPI description is invalid")
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	errRef := doc.Components.Schemas["Error"]
	require.NotNil(t, errRef, "components.schemas.Error")
	return &contract{doc: doc, router: router, errorSchema: errRef.Value, opts: []openapi3.SchemaValidationOption{
		openapi3.WithStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(openapi3.FormatOfStringForUUIDOfRFC9562)),
	}}
}

// check returns what is wrong with one exchange. A response that does not
// match the description (undescribed status, content type, header or body),
// or a request the description refuses that the API accepted (2xx). A
// refused malformed request is not drift. Hostile tests send many.
func (c *contract) check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) []string {
	ctx := context.WithoutCancel(req.Context())
	req = req.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return c.checkUnrouted(req, status, header, body)
	}
	var problems []string
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		// Auth is the API's business. The description only says which
		// scheme applies.
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, SchemaValidationOptions: c.opts},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && status/100 == 2 {
		problems = append(problems, fmt.Sprintf("answered %d to a request the description refuses: %v", status, err))
	}
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			// kin-openapi has no NDJSON decoder. checkNDJSON does it. The
			// console's files are opaque strings. Their media type is still
			// checked.
			ExcludeResponseBody:     mt == ndjson || consoleMedia[mt],
			SchemaValidationOptions: c.opts,
		},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		problems = append(problems, err.Error())
	}
	if mt == ndjson {
		problems = append(problems, c.checkNDJSON(route.Operation, status, body)...)
	}
	return problems
}

// checkUnrouted checks an answer to a method and path the description has
// no operation for. Only the mux's JSON 404 and 405, the Host and query
// guards in front of it, and its redirects to a cleaned path are expected.
func (c *contract) checkUnrouted(req *http.Request, status int, header http.Header, body []byte) []string {
	switch status {
	case http.StatusMovedPermanently, http.StatusPermanentRedirect, http.StatusTemporaryRedirect:
		return nil
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusMisdirectedRequest:
	default:
		return []string{fmt.Sprintf("%s %s is not in the description but answered %d", req.Method, req.URL.Path, status)}
	}
	if ct := header.Get("Content-Type"); ct != "application/json" {
		return []string{fmt.Sprintf("error answer %d has Content-Type %q, want application/json", status, ct)}
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return []string{fmt.Sprintf("error answer %d is not JSON: %v", status, err)}
	}
	if err := c.errorSchema.VisitJSON(v, append(c.opts, openapi3.VisitAsResponse())...); err != nil {
		return []string{fmt.Sprintf("error answer %d does not match Error: %v", status, err)}
	}
	if status == http.StatusMethodNotAllowed && header.Get("Allow") == "" {
		return []string{"405 without an Allow header"}
	}
	return nil
}

// checkNDJSON checks each line of a streamed answer against the record
// schema its content type declares.
func (c *contract) checkNDJSON(op *openapi3.Operation, status int, body []byte) []string {
	ref := op.Responses.Status(status)
	if ref == nil || ref.Value.Content.Get(ndjson) == nil || ref.Value.Content.Get(ndjson).Schema == nil {
		return []string{fmt.Sprintf("%d answered %s, which the description does not declare for it", status, ndjson)}
	}
	schema := ref.Value.Content.Get(ndjson).Schema.Value
	var problems []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<24)
	for n := 1; sc.Scan(); n++ {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			problems = append(problems, fmt.Sprintf("record %d is not JSON: %v: %q", n, err, sc.Bytes()))
			continue
		}
		if err := schema.VisitJSON(v, append(c.opts, openapi3.VisitAsResponse())...); err != nil {
			problems = append(problems, fmt.Sprintf("record %d does not match the record schema: %v: %s", n, err, sc.Bytes()))
		}
	}
	if err := sc.Err(); err != nil {
		problems = append(problems, "reading records: "+err.Error())
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		problems = append(problems, "the last record has no newline")
	}
	return problems
}

// validated wraps an API handler so every exchange of the test is checked
// against the description. A mismatch fails the test. Streamed answers pass
// through as they are written (followers see each flush) and are checked
// when the handler returns, which the test server's Close waits for.
func validated(t testing.TB, c *contract, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			t.Errorf("openapi check: reading the request body of %s %s: %v", r.Method, r.URL, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		rec := &teeWriter{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		header := w.Header().Clone()
		if _, set := header["Content-Type"]; !set && rec.body.Len() > 0 {
			// What net/http sends the client for a handler that set none.
			header.Set("Content-Type", http.DetectContentType(rec.body.Bytes()))
		}
		for _, p := range c.check(r, reqBody, status, header, rec.body.Bytes()) {
			t.Errorf("openapi: %s %s → %d: %s\nresponse: %.2000s", r.Method, r.URL, status, p, rec.body.Bytes())
		}
	})
}

// teeWriter passes an answer through and keeps a copy. Unwrap lets
// http.ResponseController reach Flush and the write deadline.
type teeWriter struct {
	http.ResponseWriter
	mu     sync.Mutex
	status int
	body   bytes.Buffer
}

func (w *teeWriter) WriteHeader(code int) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = code
	}
	w.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(b)
	w.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// routesInAPIGo returns the "METHOD /path" patterns api.go registers on its
// mux, read from the source so a new route cannot be missed.
func routesInAPIGo(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "api.go", nil, 0)
	require.NoError(t, err)
	var routes []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "mux" {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		require.True(t, ok && lit.Kind == token.STRING, "a mux route in api.go is not a string literal: the OpenAPI check cannot read it")
		pattern, err := strconv.Unquote(lit.Value)
		require.NoError(t, err)
		// The console's mux patterns in OpenAPI's spelling. "/{$}" is the
		// exact path "/", "/ui/" the files under it.
		pattern = strings.NewReplacer("/{$}", "/", "/ui/", "/ui/{file}").Replace(pattern)
		routes = append(routes, pattern)
		return true
	})
	slices.Sort(routes)
	return routes
}

func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	c := loadContract(t)
	var described []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			described = append(described, method+" "+path)
		}
	}
	slices.Sort(described)
	routes := routesInAPIGo(t)
	require.NotEmpty(t, routes)
	assert.Equal(t, routes, described, "api.go's routes and openapi.yaml's operations differ: describe a new route in openapi.yaml")
}

func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Tokens = []config.Token{{Name: "ci", Token: "s3cret"}}
	})
	r := e.do(t, "GET", "/api/v1/openapi.json", "")
	require.Equal(t, http.StatusUnauthorized, r.status, "the description is behind the same auth as /api/: %s", r.body)

	r = e.do(t, "GET", "/api/v1/openapi.json", "", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	want, err := api.OpenAPI()
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(r.body))

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(r.body)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	assert.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "openapi version %q", doc.OpenAPI)
}

// TestContractCatchesDrift feeds the checker exchanges that do not match the
// description, so the validation of the other tests is known to bite.
func TestContractCatchesDrift(t *testing.T) {
	c := loadContract(t)
	const id = "0b0e5f9e-8a7b-4d7e-9d6f-2a1f0c3e4b5a"
	job := map[string]any{
		"id": id, "command": "hello", "plugin": "shell", "status": "queued", "context": map[string]any{},
		"attempt": 0, "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z",
		"limits": map[string]any{"max_retry": 2, "retry_backoff": "10s", "retry_backoff_max": "10m0s",
			"pending_timeout": "0s", "active_timeout": "0s", "ttl_succeeded": "7d", "ttl_failed": "30d"},
	}
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for kk, vv := range job {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	ndCT := http.Header{"Content-Type": {ndjson}}
	logRec := `{"seq":3,"attempt":1,"stream":"stdout","time":"2026-01-02T03:04:05Z","line":"hi","partial":false}` + "\n"
	logEnd := `{"end":true,"status":"succeeded","attempt":1}` + "\n"
	event := `{"id":1,"job_id":"` + id + `","at":"2026-01-02T03:04:05Z","kind":"submitted"}` + "\n"
	for _, tc := range []struct {
		name, method, path, reqBody string
		status                      int
		header                      http.Header
		body                        []byte
		wantOK                      bool
	}{
		{name: "a good job", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT, body: with("id", id), wantOK: true},
		{name: "a job without a required field", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT, body: with("limits", nil)},
		{name: "a job with an undescribed field", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT, body: with("shiny", true)},
		{name: "a job with a non-UUID id", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT, body: with("id", "42")},
		{name: "a job with a non-RFC 3339 time", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT, body: with("created_at", "yesterday")},
		{name: "a job with a negative limit", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT,
			body: with("limits", map[string]any{"max_retry": 2, "retry_backoff": "-10s", "retry_backoff_max": "10m0s",
				"pending_timeout": "0s", "active_timeout": "0s", "ttl_succeeded": "7d", "ttl_failed": "30d"})},
		{name: "a job with an unknown status", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: jsonCT, body: with("status", "lost")},
		{name: "an undescribed status code", method: "GET", path: "/api/v1/jobs/" + id, status: 418, header: jsonCT, body: []byte(`{"error":"teapot","code":"bad_request"}`)},
		{name: "an error with an unknown code", method: "GET", path: "/api/v1/jobs/" + id, status: 404, header: jsonCT, body: []byte(`{"error":"x","code":"gone"}`)},
		{name: "a plain-text error", method: "GET", path: "/api/v1/jobs/" + id, status: 404, header: http.Header{"Content-Type": {"text/plain"}}, body: []byte("404 page not found\n")},
		{name: "an accepted request the description refuses", method: "GET", path: "/api/v1/jobs?limit=5000", status: 200, header: jsonCT, body: []byte(`{"jobs":[],"next":""}`)},
		{name: "a refused request the description refuses", method: "GET", path: "/api/v1/jobs?limit=5000", status: 400, header: jsonCT, body: []byte(`{"error":"limit must be…","field":"limit","code":"bad_request"}`), wantOK: true},
		{name: "an accepted submit with an unknown field", method: "POST", path: "/api/v1/jobs", reqBody: `{"command":"hello","colour":1}`, status: 201,
			header: http.Header{"Content-Type": {"application/json"}, "Location": {"/api/v1/jobs/" + id}}, body: with("id", id)},
		{name: "an undescribed route answering 200", method: "GET", path: "/api/v1/secret", status: 200, header: jsonCT, body: []byte(`{}`)},
		{name: "the mux's 404 as JSON", method: "GET", path: "/nope", status: 404, header: jsonCT, body: []byte(`{"error":"no such route","code":"not_found"}`), wantOK: true},
		{name: "the mux's 404 as text", method: "GET", path: "/nope", status: 404, header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, body: []byte("404 page not found\n")},
		{name: "a 405 without Allow", method: "DELETE", path: "/api/v1/jobs", status: 405, header: jsonCT, body: []byte(`{"error":"no","code":"method_not_allowed"}`)},
		{name: "good log records", method: "GET", path: "/api/v1/jobs/" + id + "/logs?format=jsonl&follow=true", status: 200, header: ndCT, body: []byte(logRec + logEnd), wantOK: true},
		{name: "a log record without seq", method: "GET", path: "/api/v1/jobs/" + id + "/logs?format=jsonl", status: 200, header: ndCT,
			body: []byte(`{"attempt":1,"stream":"stdout","time":"2026-01-02T03:04:05Z","line":"hi"}` + "\n")},
		{name: "a log end with an unknown status", method: "GET", path: "/api/v1/jobs/" + id + "/logs?format=jsonl", status: 200, header: ndCT,
			body: []byte(logRec + `{"end":true,"status":"lost"}` + "\n")},
		{name: "a torn last record", method: "GET", path: "/api/v1/jobs/" + id + "/logs?format=jsonl", status: 200, header: ndCT, body: []byte(logRec + `{"end":tr`)},
		{name: "an event with a bad job_id", method: "GET", path: "/api/v1/jobs/" + id + "/events?follow=true", status: 200, header: ndCT,
			body: []byte(`{"id":1,"job_id":"x","at":"2026-01-02T03:04:05Z","kind":"submitted"}` + "\n")},
		{name: "good event records", method: "GET", path: "/api/v1/jobs/" + id + "/events?follow=true", status: 200, header: ndCT, body: []byte(event + logEnd), wantOK: true},
		{name: "NDJSON where none is declared", method: "GET", path: "/api/v1/jobs/" + id, status: 200, header: ndCT, body: []byte(event)},
		{name: "plain-text logs", method: "GET", path: "/api/v1/jobs/" + id + "/logs", status: 200, header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, body: []byte("hi\n"), wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.reqBody))
			if tc.reqBody != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			problems := c.check(req, []byte(tc.reqBody), tc.status, tc.header, tc.body)
			t.Log(problems)
			if tc.wantOK {
				assert.Empty(t, problems)
			} else {
				assert.NotEmpty(t, problems, "the checker let this through")
			}
		})
	}
}

// TestOpenAPIStreams follows a finished job's jsonl log and its events
// through the validated server. Each NDJSON record is checked against its
// schema by the env's wrapper.
func TestOpenAPIStreams(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)
	appendLogs(t, e.st, j.ID, lease, "out 1\nout 2 partial", "err 1\n")
	require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))

	for _, path := range []string{
		"/api/v1/jobs/" + j.ID + "/logs?format=jsonl",
		"/api/v1/jobs/" + j.ID + "/logs?format=jsonl&follow=true",
		"/api/v1/jobs/" + j.ID + "/events?follow=true",
	} {
		r := e.do(t, "GET", path, "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
		require.NoError(t, err)
		assert.Equal(t, ndjson, mt, path)
		lines := strings.Split(strings.TrimSuffix(string(r.body), "\n"), "\n")
		require.GreaterOrEqual(t, len(lines), 2, "%s: %s", path, r.body)
		if strings.Contains(path, "follow=true") {
			var end wire.StreamEnd
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &end))
			assert.Equal(t, wire.StreamEnd{End: true, Status: store.StatusSucceeded, Attempt: 1}, end, path)
		}
	}
}

// recordingTB collects the errors a validated server reports.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestValidatedServerReports checks the wiring newEnv relies on. A
// mismatching answer, streamed or not, fails the test that made the server.
func TestValidatedServerReports(t *testing.T) {
	c := loadContract(t)
	for _, tc := range []struct {
		name, path, contentType, body string
		wantErr                       bool
	}{
		{"a good status", "/healthz", "application/json", `{"status":"ok"}`, false},
		{"an undescribed field", "/healthz", "application/json", `{"status":"ok","mood":"fine"}`, true},
		{"a streamed bad record", "/api/v1/jobs/0b0e5f9e-8a7b-4d7e-9d6f-2a1f0c3e4b5a/logs?format=jsonl&follow=true", ndjson, `{"seq":"one"}` + "\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			srv := httptest.NewServer(validated(rec, c, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = io.WriteString(w, tc.body)
				_ = http.NewResponseController(w).Flush() // as a follower does
			})))
			resp, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			srv.Close() // waits for the handler and its check
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if tc.wantErr {
				assert.NotEmpty(t, rec.errs, "the mismatch was not reported")
			} else {
				assert.Empty(t, rec.errs)
			}
		})
	}
}

// The description's statuses are pkg/api's (the one list jobstate and the
// store alias), so a status added to one is not missing in the other.
func TestOpenAPIJobStatusesAreTheWireTypes(t *testing.T) {
	c := loadContract(t)
	ref := c.doc.Components.Schemas["JobStatus"]
	require.NotNil(t, ref, "components.schemas.JobStatus")
	var described []string
	for _, v := range ref.Value.Enum {
		described = append(described, fmt.Sprint(v))
	}
	var declared []string
	for _, s := range wire.Statuses() {
		declared = append(declared, string(s))
	}
	assert.Equal(t, declared, described)
}
