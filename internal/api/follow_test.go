package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// listeningHub starts a claim service with no commands, for its LISTEN
// connection only (the one an agent's API followers share), and returns its
// hub once it is listening.
func listeningHub(t *testing.T, st *store.Store) *notify.Hub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := store.Holder{Name: "listener", Generation: "g1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1})
	require.NoError(t, err)
	hub := notify.New()
	svc := claim.New(st, noPlugins{}, claim.Config{Holder: h, Follow: hub, Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, hub.Live, 20*time.Second, 10*time.Millisecond, "the listener did not connect")
	return hub
}

type noPlugins struct{}

func (noPlugins) Info(string) (plugin.Info, bool) { return plugin.Info{}, false }
func (noPlugins) Execute(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, fmt.Errorf("no plugins here")
}
func (noPlugins) Resume(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, fmt.Errorf("no plugins here")
}
func (noPlugins) Cleanup(context.Context, string, *plugin.Job) error { return nil }
func (noPlugins) Renew(context.Context, time.Duration)               {}

// ndjsonReader reads a followed NDJSON answer one record at a time.
type ndjsonReader struct {
	t    *testing.T
	resp *http.Response
	sc   *bufio.Scanner
}

func follow(t *testing.T, ctx context.Context, url string) *ndjsonReader {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	return &ndjsonReader{t: t, resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next record, or nil at the end of the answer.
func (n *ndjsonReader) next() map[string]any {
	n.t.Helper()
	if !n.sc.Scan() {
		require.NoError(n.t, n.sc.Err())
		return nil
	}
	var v map[string]any
	require.NoError(n.t, json.Unmarshal(n.sc.Bytes(), &v), "record %s", n.sc.Bytes())
	return v
}

func appendRecords(t *testing.T, st *store.Store, id string, lease int64, recs ...store.LogRecord) {
	t.Helper()
	held, err := st.AppendLogs(context.Background(), []store.LogBatch{{JobID: id, Lease: lease, Records: recs}}, 1<<20)
	require.NoError(t, err)
	require.True(t, held[id])
}

// A jsonl follower is woken by the flush's NOTIFY and the end's, not by
// polling (both polls are an hour here). It gets each new line promptly, in
// write order across streams with its stamps, and ends with the end record.
func TestLogsFollowJSONLWokenByNotify(t *testing.T) {
	var hub *notify.Hub
	e := newEnv(t, func(o *api.Options) {
		hub = listeningHub(t, o.Store)
		o.Follow = hub
		o.LogPollInterval = time.Hour
		o.FollowPollInterval = time.Hour
	})
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000, time.UTC) // PostgreSQL keeps microseconds
	appendRecords(t, e.st, j.ID, lease,
		store.LogRecord{Stream: "stdout", At: at, Data: []byte("one\ntwo\n")},
		store.LogRecord{Stream: "stderr", At: at.Add(time.Millisecond), Data: []byte("warn")},
	)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := follow(t, ctx, e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?format=jsonl&follow=true")
	first := f.next()
	assert.Equal(t, "one", first["line"])
	assert.Equal(t, "stdout", first["stream"])
	assert.Equal(t, float64(1), first["attempt"])
	assert.Equal(t, at.Format(time.RFC3339Nano), first["time"])
	assert.Equal(t, false, first["partial"])
	assert.Equal(t, "two", f.next()["line"])
	warn := f.next()
	assert.Equal(t, map[string]any{"seq": warn["seq"], "attempt": float64(1), "stream": "stderr",
		"time": at.Add(time.Millisecond).Format(time.RFC3339Nano), "line": "warn", "partial": true}, warn)
	assert.Greater(t, warn["seq"], first["seq"])

	// Only NOTIFY can wake the follower within the test's deadline now.
	require.Eventually(t, func() bool { return hub.Followers() == 1 }, 10*time.Second, 5*time.Millisecond)
	appendRecords(t, e.st, j.ID, lease, store.LogRecord{Stream: "stdout", At: time.Now(), Data: []byte("three\n")})
	assert.Equal(t, "three", f.next()["line"])

	require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
	assert.Equal(t, map[string]any{"end": true, "status": "succeeded", "attempt": float64(1)}, f.next())
	assert.Nil(t, f.next(), "nothing after the end record")
	require.NoError(t, ctx.Err())

	// after= resumes strictly after a chunk: the stderr chunk and on.
	r := e.do(t, "GET", fmt.Sprintf("/api/v1/jobs/%s/logs?format=jsonl&after=%d", j.ID, int64(first["seq"].(float64))), "")
	require.Equal(t, http.StatusOK, r.status)
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSuffix(r.body, []byte("\n")), []byte("\n")) {
		var v map[string]any
		require.NoError(t, json.Unmarshal(l, &v))
		lines = append(lines, v)
	}
	require.Len(t, lines, 2, "no end record without follow: %s", r.body)
	assert.Equal(t, warn, lines[0])
	assert.Equal(t, "three", lines[1]["line"])

	// The raw format is the same bytes in the same order.
	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs", "")
	assert.Equal(t, "one\ntwo\nwarnthree\n", string(r.body))

	r = e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/logs?format=xml", "")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "format", r.errBody(t).Field)
}

// A follower whose agent stops before the job ends gets no end record. The
// client knows the stream was cut and resumes elsewhere.
func TestLogsFollowCutWithoutEnd(t *testing.T) {
	stopping := make(chan struct{})
	e := newEnv(t, func(o *api.Options) { o.Stopping = stopping })
	j := e.submit(t, `{"command":"sleep"}`)
	_, lease := e.claim(t, j.ID)
	appendLogs(t, e.st, j.ID, lease, "only\n", "")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := follow(t, ctx, e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?format=jsonl&follow=true")
	assert.Equal(t, "only", f.next()["line"])
	close(stopping)
	assert.Nil(t, f.next(), "cut with no end record")
	require.NoError(t, ctx.Err())
}

// A followed event stream sends each event as NDJSON and ends with the end
// record once the job is finished.
func TestEventsFollow(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Follow = listeningHub(t, o.Store)
	})
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	evs, err := e.st.Events(ctx, j.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, "submitted", evs[0].Kind)
	f := follow(t, ctx, fmt.Sprintf("%s/api/v1/jobs/%s/events?follow=true&after=%d", e.srv.URL, j.ID, evs[0].ID))
	var kinds []string
	for {
		ev := f.next()
		require.NotNil(t, ev, "the stream ended before its end record")
		if ev["end"] == true {
			assert.Equal(t, "failed", ev["status"])
			assert.Equal(t, float64(1), ev["attempt"])
			break
		}
		kinds = append(kinds, ev["kind"].(string))
		if ev["kind"] == "running" {
			require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease, store.Outcome{Status: store.StatusFailed, Error: "boom"}))
		}
	}
	assert.Equal(t, []string{"claimed", "running", "failed"}, kinds, "after= skips the submitted event")
	assert.Nil(t, f.next())

	r := e.do(t, "GET", "/api/v1/jobs/"+j.ID+"/events?follow=sometimes", "")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "follow", r.errBody(t).Field)
}

// While the hub is not live (its LISTEN connection is down), followers fall
// back to the short poll. Output still arrives though no NOTIFY does.
func TestLogsFollowPollsWhileListenIsDown(t *testing.T) {
	hub := notify.New() // never fed: as after a lost connection
	e := newEnv(t, func(o *api.Options) {
		o.Follow = hub
		o.LogPollInterval = 20 * time.Millisecond
		o.FollowPollInterval = time.Hour
	})
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := follow(t, ctx, e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?format=jsonl&follow=true")
	require.Eventually(t, func() bool { return hub.Followers() == 1 }, 10*time.Second, 5*time.Millisecond)
	appendLogs(t, e.st, j.ID, lease, "polled\n", "")
	assert.Equal(t, "polled", f.next()["line"])
	require.NoError(t, e.st.Finish(context.Background(), h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
	assert.Equal(t, true, f.next()["end"])
	require.NoError(t, ctx.Err())
}

// A flush notifies tether_logs once per job it stored output for, and an
// attempt's end tether_job_end. The followers above are woken by these.
func TestFlushAndEndNotify(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := e.st.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN tether_logs; LISTEN tether_job_end")
	require.NoError(t, err)

	appendRecords(t, e.st, j.ID, lease,
		store.LogRecord{Stream: "stdout", At: time.Now(), Data: []byte("a\n")},
		store.LogRecord{Stream: "stderr", At: time.Now(), Data: []byte("b\n")})
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	assert.Equal(t, [2]string{notify.LogsChannel, j.ID}, [2]string{n.Channel, n.Payload})

	// A job nobody follows ends without a NOTIFY (it would cost every end
	// a database-wide lock at commit). A followed one sends it.
	unfollowed := e.submit(t, `{"command":"sleep"}`)
	uh, ulease := e.claim(t, unfollowed.ID)
	require.NoError(t, e.st.Finish(ctx, uh, unfollowed.ID, ulease, store.Outcome{Status: store.StatusSucceeded}))
	fid, err := e.st.AddFollower(ctx, j.ID)
	require.NoError(t, err)
	require.NoError(t, e.st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
	n, err = conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	assert.Equal(t, [2]string{notify.JobEndChannel, j.ID}, [2]string{n.Channel, n.Payload},
		"one per job per flush (no second tether_logs), and none for the unfollowed job that ended first")
	require.NoError(t, e.st.RemoveFollower(ctx, fid))
}

// A followed stream records itself in job_followers while it lasts and
// removes the row when it ends.
func TestFollowerRecordedWhileFollowing(t *testing.T) {
	e := newEnv(t, nil)
	j := e.submit(t, `{"command":"sleep"}`)
	h, lease := e.claim(t, j.ID)
	count := func() int {
		var n int
		require.NoError(t, e.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM job_followers WHERE job_id = $1`, j.ID).Scan(&n))
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v1/jobs/"+j.ID+"/logs?follow=true&format=jsonl", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Eventually(t, func() bool { return count() == 1 }, 10*time.Second, 20*time.Millisecond, "the follower is recorded")
	require.NoError(t, e.st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), `"end":true`)
	require.Eventually(t, func() bool { return count() == 0 }, 10*time.Second, 20*time.Millisecond, "the row goes with the stream")
}
