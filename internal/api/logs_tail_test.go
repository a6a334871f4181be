package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
)

// logLines GETs a job's logs as jsonl with query and returns the lines.
func (e *testEnv) logLines(t *testing.T, id string, query url.Values) []string {
	t.Helper()
	query.Set("format", "jsonl")
	r := e.do(t, "GET", "/api/v1/jobs/"+id+"/logs?"+query.Encode(), "")
	require.Equal(t, http.StatusOK, r.status, "%s: %s", query.Encode(), r.body)
	var lines []string
	for l := range strings.Lines(string(r.body)) {
		var rec struct{ Line string }
		require.NoError(t, json.Unmarshal([]byte(l), &rec))
		lines = append(lines, rec.Line)
	}
	return lines
}

func TestLogsTailAndSince(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)
	old := time.Now().Add(-time.Hour)
	appendRecords(t, e.st, j.ID, lease,
		store.LogRecord{Stream: "stdout", At: old, Data: []byte("a\nb\n")},
		store.LogRecord{Stream: "stderr", At: old.Add(time.Minute), Data: []byte("c\n")},
		store.LogRecord{Stream: "stdout", At: time.Now(), Data: []byte("d\ne")},
	)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"tail=1", []string{"e"}},
		{"tail=3", []string{"c", "d", "e"}},
		{"tail=1000", []string{"a", "b", "c", "d", "e"}},
		{"tail=3&stream=stdout", []string{"b", "d", "e"}},
		{"since=10m", []string{"d", "e"}},
		{"since=2h", []string{"a", "b", "c", "d", "e"}},
		{"since=" + url.QueryEscape(old.Add(30*time.Second).Format(time.RFC3339Nano)), []string{"c", "d", "e"}},
		{"since=2h&tail=2&stream=stdout", []string{"d", "e"}},
		{"since=10m&tail=5", []string{"d", "e"}},
		{"since=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), nil},
	} {
		q, err := url.ParseQuery(tc.query)
		require.NoError(t, err)
		assert.Equal(t, tc.want, e.logLines(t, j.ID, q), tc.query)
	}
	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?tail=2", "")
	assert.Equal(t, "d\ne", string(r.body), "raw: the bytes of the last lines")

	for _, bad := range []struct{ query, field string }{
		{"tail=0", "tail"}, {"tail=100001", "tail"}, {"tail=x", "tail"},
		{"since=yesterday", "since"}, {"since=-5m", "since"},
	} {
		r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?"+bad.query, "")
		require.Equal(t, http.StatusBadRequest, r.status, bad.query)
		assert.Equal(t, bad.field, r.errBody(t).Field, bad.query)
	}

	// tail with follow: the last lines, then what comes until the end.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := follow(t, ctx, e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?format=jsonl&follow=true&tail=2")
	assert.Equal(t, "d", f.next()["line"])
	assert.Equal(t, "e", f.next()["line"])
	appendRecords(t, e.st, j.ID, lease, store.LogRecord{Stream: "stdout", At: time.Now(), Data: []byte("f\n")})
	assert.Equal(t, "f", f.next()["line"])
	require.NoError(t, e.st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
	assert.Equal(t, true, f.next()["end"])
}
