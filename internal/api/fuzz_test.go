package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// fuzzHandler is the real handler on a real database, for the fuzz tests.
func fuzzHandler(f *testing.F) http.Handler {
	return api.New(api.Options{
		Store:        store.New(pgtest.DB(f)),
		Commands:     testCommands,
		MaxBodyBytes: 64 << 10,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// checkAnswer fails on a server error, and on an error answer that is not
// the JSON error shape.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, what string) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var e wire.Error
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" || e.Code == "" {
			t.Fatalf("%s: %d answer is not the JSON error shape: %s", what, rec.Code, rec.Body)
		}
	}
}

// FuzzSubmit sends arbitrary bodies to POST /api/v1/jobs: no 5xx, no panic.
func FuzzSubmit(f *testing.F) {
	for _, h := range hostileSubmitBodies() {
		if len(h.body) < 4096 {
			f.Add(h.body)
		}
	}
	for _, b := range []string{`{"command":"hello"}`, `{"command":"hello","context":{"a":[1,2.5,"x",null,true]},"idempotency_key":"k"}`,
		`{"command":"sleep","limits":{"max_retry":1,"active_timeout":"1d"}}`, `{"command":"hello","idempotency_key":"k","context":{"n":1e0}}`} {
		f.Add(b)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/jobs", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec, "POST /api/v1/jobs "+body)
	})
}

// FuzzList sends arbitrary query strings to GET /api/v1/jobs and to a job's
// events and logs: no 5xx, no panic.
func FuzzList(f *testing.F) {
	for _, q := range []string{"", "status=queued&command=hello&submitter=a&limit=2", "after=garbage", "after=%00",
		"command=%ff", "submitter=%ed%a0%80", "limit=99999999999999999999", "status=QUEUED", "a%00=1", "after=01920c5e-8a4e-7b7c-9d2f-3c1e6f0a9b12",
		"stream=stdout&follow=false&after=1", "stream=both", "follow=%ff", "after=-1", "limit=0", "%zz", "a=1;b=2"} {
		f.Add(q)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, query string) {
		for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/01920c5e-8a4e-7b7c-9d2f-3c1e6f0a9b12/events", "/api/v1/jobs/01920c5e-8a4e-7b7c-9d2f-3c1e6f0a9b12/logs"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.URL.RawQuery = query
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			checkAnswer(t, rec, "GET "+path+"?"+query)
		}
	})
}
