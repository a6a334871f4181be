package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
)

// TestListJobsByTimeAndKey checks that since/until bound created_at exactly
// (including a job whose created_at is far from its UUIDv7 ID's time, within
// the allowed skew), idempotency_key finds any submitter's job, and bad
// values are 400s naming the parameter.
func TestListJobsByTimeAndKey(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	var ids []string
	for i := range 4 {
		j := e.submit(t, fmt.Sprintf(`{"command":"hello","submitter":"user%d","idempotency_key":"k-%d"}`, i%2, i/2))
		ids = append(ids, j.ID)
	}
	// Place the jobs a minute apart by the database's clock. Job 2's
	// created_at is then moved 40 minutes from its ID's time.
	base := time.Now().UTC().Truncate(time.Second)
	for i, id := range ids {
		at := base.Add(time.Duration(i-3) * time.Minute)
		_, err := e.st.Pool().Exec(ctx, `UPDATE jobs SET created_at = $2 WHERE id = $1`, id, at)
		require.NoError(t, err)
	}
	_, err := e.st.Pool().Exec(ctx, `UPDATE jobs SET created_at = created_at - interval '40 minutes' WHERE id = $1`, ids[2])
	require.NoError(t, err)

	list := func(q url.Values) []string { return e.listIDs(t, q) }
	ts := func(d time.Duration) string { return base.Add(d).Format(time.RFC3339Nano) }

	// created_at: job 0 base−3m, job 1 base−2m, job 2 base−41m, job 3 base−0.
	assert.Equal(t, []string{ids[3]}, list(url.Values{"since": {ts(-1 * time.Minute)}}), "since includes its bound")
	assert.Equal(t, []string{ids[1], ids[0]}, list(url.Values{"since": {ts(-3 * time.Minute)}, "until": {ts(-1 * time.Minute)}}), "until excludes its bound")
	assert.Equal(t, []string{ids[2]}, list(url.Values{"until": {ts(-3 * time.Minute)}}), "found by created_at 40 minutes from its ID's time")
	assert.Equal(t, []string{ids[3], ids[2], ids[1], ids[0]}, list(url.Values{"since": {ts(-2 * time.Hour)}}))
	assert.Empty(t, list(url.Values{"since": {ts(time.Minute)}}))

	assert.Equal(t, []string{ids[1], ids[0]}, list(url.Values{"idempotency_key": {"k-0"}}), "any submitter's key")
	assert.Equal(t, []string{ids[1]}, list(url.Values{"idempotency_key": {"k-0"}, "submitter": {"user1"}}))
	assert.Empty(t, list(url.Values{"idempotency_key": {"k-9"}}))

	for _, tc := range []struct {
		q               url.Values
		field, contains string
	}{
		{url.Values{"since": {"yesterday"}}, "since", `since must be an RFC 3339 time such as 2026-12-01T09:00:00Z, got "yesterday"`},
		{url.Values{"until": {"2026-12-01"}}, "until", "until must be an RFC 3339 time"},
		{url.Values{"since": {"0001-01-01T00:00:00Z"}}, "since", "between years 1970 and 9999"},
		{url.Values{"since": {ts(0)}, "until": {ts(0)}}, "until", "must be later than since"},
		{url.Values{"since": {ts(time.Hour)}, "until": {ts(0)}}, "until", "must be later than since"},
	} {
		r := e.do(t, "GET", "/api/v1/jobs?"+tc.q.Encode(), "")
		require.Equal(t, http.StatusBadRequest, r.status, tc.q.Encode())
		er := r.errBody(t)
		assert.Equal(t, tc.field, er.Field, tc.q.Encode())
		assert.Contains(t, er.Error, tc.contains, tc.q.Encode())
	}
}

// TestListJobsByAgent checks that agent lists exactly the jobs an agent
// holds now, in any held status, and that asking for a status no holder
// can have is a 400 naming agent.
func TestListJobsByAgent(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for range 4 {
		e.submit(t, `{"command":"hello"}`)
	}
	held := map[string][]string{}
	var runLease int64
	for _, name := range []string{"a1", "a2"} {
		h := store.Holder{Name: name, Generation: "g-" + name}
		_, err := e.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 10, Commands: []string{"hello"}})
		require.NoError(t, err)
		claimed, err := e.st.Claim(ctx, h, 1, []string{"hello"})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		held[name] = append(held[name], claimed[0].Job.ID)
		if name == "a1" {
			runLease = claimed[0].Lease
		}
	}
	// a1 runs its job; a2's stays accepted. Two jobs stay queued.
	_, err := e.st.MarkRunning(ctx, held["a1"][0], runLease, "")
	require.NoError(t, err)

	list := func(q url.Values) []string { return e.listIDs(t, q) }
	assert.Equal(t, held["a1"], list(url.Values{"agent": {"a1"}}))
	assert.Equal(t, held["a2"], list(url.Values{"agent": {"a2"}}))
	assert.Equal(t, held["a1"], list(url.Values{"agent": {"a1"}, "status": {"running"}}))
	assert.Empty(t, list(url.Values{"agent": {"a1"}, "status": {"accepted"}}))
	assert.Empty(t, list(url.Values{"agent": {"a3"}}))
	assert.Len(t, list(url.Values{}), 4, "no agent filter lists every job")

	for _, status := range []string{"queued", "succeeded", "failed", "canceled"} {
		r := e.do(t, "GET", "/api/v1/jobs?agent=a1&status="+status, "")
		require.Equal(t, http.StatusBadRequest, r.status, status)
		er := r.errBody(t)
		assert.Equal(t, "agent", er.Field)
		assert.Contains(t, er.Error, "has no holder", status)
	}
}

// listIDs lists jobs with query q and returns their IDs in order.
func (e *testEnv) listIDs(t *testing.T, q url.Values) []string {
	t.Helper()
	r := e.do(t, "GET", "/api/v1/jobs?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var out []string
	for _, j := range decode[api.JobList](t, r).Jobs {
		out = append(out, j.ID)
	}
	return out
}
