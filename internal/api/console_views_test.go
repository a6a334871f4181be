package api_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
)

// counts reads GET /api/v1/jobs/counts?q as status → count, with the total.
func (e *testEnv) counts(t *testing.T, q url.Values) (map[api.JobStatus]int, api.JobCounts) {
	t.Helper()
	r := e.do(t, "GET", "/api/v1/jobs/counts?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	c := decode[api.JobCounts](t, r)
	out := map[api.JobStatus]int{}
	var order []api.JobStatus
	for _, sc := range c.Counts {
		order = append(order, sc.Status)
		if sc.Count > 0 {
			out[sc.Status] = sc.Count
		}
	}
	require.Equal(t, api.Statuses(), order, "every status, in lifecycle order")
	return out, c
}

// TestJobCounts checks the counts per status under the list's filters, the
// agent's held jobs, the cap and a bad window.
func TestJobCounts(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	var ids []string
	for range 5 {
		ids = append(ids, e.submit(t, `{"command":"hello","submitter":"u1"}`).ID)
	}
	_, err := e.st.Cancel(ctx, ids[4], "not needed")
	require.NoError(t, err)
	h := store.Holder{Name: "a1", Generation: "g1"}
	_, err = e.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 10, Commands: []string{"hello"}})
	require.NoError(t, err)
	claimed, err := e.st.Claim(ctx, h, 3, []string{"hello"})
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	for _, c := range claimed[:2] {
		_, err := e.st.MarkRunning(ctx, c.Job.ID, c.Lease, "")
		require.NoError(t, err)
	}
	require.NoError(t, e.st.Finish(ctx, h, claimed[1].Job.ID, claimed[1].Lease,
		store.Outcome{Status: store.StatusFailed, Error: "boom", ErrorClass: "permanent"}))
	e.submit(t, `{"command":"sleep","submitter":"u2"}`)

	got, c := e.counts(t, url.Values{})
	assert.Equal(t, map[api.JobStatus]int{"queued": 2, "accepted": 1, "running": 1, "failed": 1, "canceled": 1}, got)
	assert.Equal(t, 6, c.Total)
	assert.False(t, c.TotalAtLeast)

	got, c = e.counts(t, url.Values{"agent": {"a1"}})
	assert.Equal(t, map[api.JobStatus]int{"accepted": 1, "running": 1}, got, "what a1 holds now")
	assert.Equal(t, 2, c.Total)
	got, _ = e.counts(t, url.Values{"submitter": {"u2"}})
	assert.Equal(t, map[api.JobStatus]int{"queued": 1}, got)
	got, _ = e.counts(t, url.Values{"command": {"hello"}, "until": {"2000-01-01T00:00:00Z"}})
	assert.Empty(t, got)
	got, _ = e.counts(t, url.Values{"since": {"2000-01-01T00:00:00Z"}, "until": {"2100-01-01T00:00:00Z"}})
	assert.Equal(t, map[api.JobStatus]int{"queued": 2, "accepted": 1, "running": 1, "failed": 1, "canceled": 1}, got, "a window holding every job")
	got, _ = e.counts(t, url.Values{"since": {"2100-01-01T00:00:00Z"}})
	assert.Empty(t, got)

	// Past the cap a part says "at least": the two queued jobs read with a
	// cap of 1, and each ended status within it.
	counts, err := e.st.CountJobs(ctx, store.ListParams{}, 1)
	require.NoError(t, err)
	for _, sc := range counts {
		assert.Equal(t, sc.Status == "queued", sc.AtLeast, "%s: %+v", sc.Status, sc)
	}

	r := e.do(t, "GET", "/api/v1/jobs/counts?since=2030-01-02T00:00:00Z&until=2030-01-01T00:00:00Z", "")
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "until", r.errBody(t).Field)
}

// TestJobAttempts checks the attempts the API derives from a job's events:
// a retry, then a failure with the retries used up.
func TestJobAttempts(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	j := e.submit(t, `{"command":"hello","limits":{"max_retry":1,"retry_backoff":"0s"}}`)
	for range 2 {
		h, lease := e.claim(t, j.ID)
		require.NoError(t, e.st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusFailed, Error: "exit 75", ErrorClass: api.Retriable}))
	}
	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/attempts", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	list := decode[api.AttemptList](t, r).Attempts
	require.Len(t, list, 2, "body: %s", r.body)
	assert.Equal(t, []int{1, 2}, []int{list[0].Attempt, list[1].Attempt})
	assert.Equal(t, []string{"retry_scheduled", "failed"}, []string{list[0].Outcome, list[1].Outcome})
	assert.Contains(t, list[0].Error, "exit 75")
	assert.Equal(t, "exit 75", list[1].Error)
	for _, a := range list {
		assert.Equal(t, "a1", a.Agent)
		require.NotNil(t, a.End)
		assert.GreaterOrEqual(t, a.Seconds, 0.0)
	}
	got, err := e.st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusFailed, got.Status, "the retries are used up")

	r = e.do(t, "GET", "/api/v1/jobs/0190d5a1-0000-7000-8000-000000000000/attempts", "")
	assert.Equal(t, http.StatusNotFound, r.status)
}

// TestLogDownload checks download=true: the whole stored log as an
// attachment named after the job, refused with follow, and a missing job's
// 404 no attachment.
func TestLogDownload(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"hello"}`)
	_, lease := e.claim(t, j.ID)
	appendLogs(t, e.st, j.ID, lease, "one\ntwo\n", "warn\n")

	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?download=true", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, `attachment; filename="tether-job-`+j.ID+`.log"`, r.header.Get("Content-Disposition"))
	assert.Equal(t, "one\ntwo\nwarn\n", string(r.body))

	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?download=true&format=jsonl&stream=stderr", "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, `attachment; filename="tether-job-`+j.ID+`.stderr.jsonl"`, r.header.Get("Content-Disposition"))
	assert.Equal(t, 1, strings.Count(string(r.body), `"line":"warn"`), "body: %s", r.body)

	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs", "")
	assert.Empty(t, r.header.Get("Content-Disposition"), "no attachment unless asked")

	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?download=true&follow=true", "")
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "download", r.errBody(t).Field)

	r = e.do(t, "GET", "/api/v1/jobs/0190d5a1-0000-7000-8000-000000000000/logs?download=true", "")
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Empty(t, r.header.Get("Content-Disposition"))
}
