package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const token = "client-test-token-0123456789"

func setup(t *testing.T) (*store.Store, *client.Client, string) {
	t.Helper()
	st := store.New(pgtest.DB(t))
	srv := httptest.NewServer(api.New(api.Options{
		Store:           st,
		Commands:        map[string]config.Command{"echo": {Plugin: "shell"}},
		Tokens:          []config.Token{{Name: "tester", Token: token}},
		Logger:          slog.New(slog.DiscardHandler),
		LogPollInterval: 10 * time.Millisecond,
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL+"/", client.WithToken(token), client.WithPollInterval(10*time.Millisecond))
	require.NoError(t, err)
	return st, c, srv.URL
}

// run claims the job as an agent would, writes output and finishes it.
func run(t *testing.T, st *store.Store, id string, steps func(lease int64)) (store.Holder, int64) {
	t.Helper()
	ctx := context.Background()
	h := store.Holder{Name: "agent-1", Generation: "gen-1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"echo"}})
	require.NoError(t, err)
	claimed, err := st.Claim(ctx, h, 1, []string{"echo"})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, id, claimed[0].Job.ID)
	lease := claimed[0].Lease
	_, err = st.MarkRunning(ctx, id, lease, "")
	require.NoError(t, err)
	if steps != nil {
		steps(lease)
	}
	return h, lease
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:9090", "ftp://x", "http://"} {
		_, err := client.New(u)
		assert.Error(t, err, u)
	}
}

func TestSubmitGetListCancel(t *testing.T) {
	ctx := context.Background()
	_, c, _ := setup(t)

	j, created, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo", Context: json.RawMessage(`{"a":1}`), IdempotencyKey: "k"})
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, "tester", j.Submitter)
	again, created, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo", Context: json.RawMessage(`{"a":1}`), IdempotencyKey: "k"})
	require.NoError(t, err)
	assert.False(t, created, "replayed")
	assert.Equal(t, j.ID, again.ID)

	_, _, err = c.Submit(ctx, wire.SubmitRequest{Command: "echo", Context: json.RawMessage(`{"a":2}`), IdempotencyKey: "k"})
	var ae *client.APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusConflict, ae.Status)
	assert.Equal(t, "idempotency_key", ae.Field)
	assert.Equal(t, wire.CodeIdempotencyConflict, ae.Code)

	_, _, err = c.Submit(ctx, wire.SubmitRequest{Command: "nope"})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusBadRequest, ae.Status)
	assert.Equal(t, "command", ae.Field)
	assert.Contains(t, ae.Message, "configured on this agent: echo")
	assert.Contains(t, err.Error(), "field command")

	got, err := c.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, j.ID, got.ID)
	_, err = c.Get(ctx, "missing")
	assert.True(t, client.IsNotFound(err))

	second, _, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo"})
	require.NoError(t, err)
	page, next, err := c.List(ctx, client.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, second.ID, page[0].ID)
	require.NotEmpty(t, next)
	page, next, err = c.List(ctx, client.ListOptions{Limit: 1, After: next})
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, j.ID, page[0].ID)
	assert.Empty(t, next)

	canceled, err := c.Cancel(ctx, j.ID, "changed my mind")
	require.NoError(t, err)
	assert.Equal(t, store.StatusCanceled, canceled.Status)
	_, err = c.Cancel(ctx, j.ID, "")
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusConflict, ae.Status)

	list, _, err := c.List(ctx, client.ListOptions{Status: "canceled"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	_, _, err = c.List(ctx, client.ListOptions{Status: "bogus"})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "status", ae.Field)

	evs, err := c.Events(ctx, j.ID)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, "submitted", evs[0].Kind)
	assert.Equal(t, "canceled", evs[1].Kind)
	assert.Contains(t, evs[1].Message, "changed my mind")
}

func TestWrongToken(t *testing.T) {
	_, _, url := setup(t)
	c, err := client.New(url, client.WithToken("wrong"))
	require.NoError(t, err)
	_, err = c.Agents(context.Background())
	var ae *client.APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusUnauthorized, ae.Status)
	assert.Equal(t, "invalid bearer token", ae.Message)
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLogsWaitAndAgents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, c, _ := setup(t)
	j, _, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo"})
	require.NoError(t, err)

	var statuses []jobstate.JobStatus
	var mu sync.Mutex
	waited := make(chan wire.JobDetail, 1)
	go func() {
		final, err := c.Wait(ctx, j.ID, func(j wire.JobDetail) {
			mu.Lock()
			statuses = append(statuses, j.Status)
			mu.Unlock()
		})
		assert.NoError(t, err)
		waited <- final
	}()
	// Let Wait see the queued job before it moves on.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(statuses) > 0 }, 5*time.Second, 5*time.Millisecond)

	out := &safeBuffer{}
	followed := make(chan error, 1)
	h, lease := run(t, st, j.ID, func(lease int64) {
		_, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Stdout: []byte("hello\n"), Stderr: []byte("err\n")}}, 1<<20)
		require.NoError(t, err)
	})
	go func() { followed <- c.Logs(ctx, j.ID, "stdout", true, out) }()
	require.Eventually(t, func() bool { return out.String() == "hello\n" }, 5*time.Second, 5*time.Millisecond)

	agents, err := c.Agents(ctx)
	require.NoError(t, err)
	require.Len(t, agents, 1)
	assert.Equal(t, "agent-1", agents[0].Name)

	_, err = st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Stdout: []byte("bye\n")}}, 1<<20)
	require.NoError(t, err)
	require.NoError(t, st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusFailed, Error: "exit status 3"}))

	require.NoError(t, <-followed)
	assert.Equal(t, "hello\nbye\n", out.String())
	final := <-waited
	assert.Equal(t, store.StatusFailed, final.Status)
	assert.Equal(t, "exit status 3", final.Error)
	mu.Lock()
	assert.Equal(t, store.StatusQueued, statuses[0])
	assert.Equal(t, store.StatusFailed, statuses[len(statuses)-1])
	mu.Unlock()

	var all bytes.Buffer
	require.NoError(t, c.Logs(ctx, j.ID, "", false, &all))
	assert.Equal(t, len("hello\nerr\nbye\n"), all.Len())

	err = c.Logs(ctx, "missing", "", false, io.Discard)
	assert.True(t, client.IsNotFound(err))
}

func TestWaitGivesUpOnContext(t *testing.T) {
	_, c, _ := setup(t)
	j, _, err := c.Submit(context.Background(), wire.SubmitRequest{Command: "echo"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	last, err := c.Wait(ctx, j.ID, nil)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "err: %v", err)
	assert.Equal(t, store.StatusQueued, last.Status)
}

func TestCommands(t *testing.T) {
	ctx := context.Background()
	st, c, _ := setup(t)
	_, _, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo"})
	require.NoError(t, err)
	cmds, err := c.Commands(ctx)
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	assert.Equal(t, "echo", cmds[0].Name)
	assert.Equal(t, "shell", cmds[0].Plugin)
	assert.Equal(t, 1, cmds[0].Queued)
	assert.False(t, cmds[0].Served)
	assert.Contains(t, cmds[0].Hint, "no live agent serves command echo")

	_, err = st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "agent-1", Generation: "g"}, Capacity: 1, Commands: []string{"echo"}})
	require.NoError(t, err)
	cmds, err = c.Commands(ctx)
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	assert.True(t, cmds[0].Served)
	assert.Equal(t, []string{"agent-1"}, cmds[0].Agents)
	assert.Empty(t, cmds[0].Hint)
}

// Every state-changing route requires Content-Type: application/json, even
// cancel with no reason (a cross-site form cannot send it). The client
// always sends a JSON body with it.
func TestStateChangingRequestsAreJSON(t *testing.T) {
	ctx := context.Background()
	_, c, _ := setup(t)
	j, _, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo"})
	require.NoError(t, err)
	canceled, err := c.Cancel(ctx, j.ID, "")
	require.NoError(t, err, "cancel without a reason is still a JSON request")
	assert.Equal(t, store.StatusCanceled, canceled.Status)
	res, err := c.Requeue(ctx, j.ID, wire.RequeueRequest{Reason: "again"})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Job.Attempt)
}

func TestListAgentsLiveOrAll(t *testing.T) {
	ctx := context.Background()
	st, c, _ := setup(t)
	for _, name := range []string{"up", "gone"} {
		_, err := st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: name, Generation: "g"}, Capacity: 1})
		require.NoError(t, err)
	}
	require.NoError(t, st.SetAgentState(ctx, store.Holder{Name: "gone", Generation: "g"}, "stopped"))

	live, err := c.Agents(ctx)
	require.NoError(t, err)
	require.Len(t, live, 1)
	assert.Equal(t, "up", live[0].Name)
	assert.True(t, live[0].Live)

	all, err := c.ListAgents(ctx, true)
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, []string{"gone", "up"}, []string{all[0].Name, all[1].Name})
	assert.False(t, all[0].Live, "a stopped agent is listed with all, not live")
	assert.True(t, all[1].Live)
}

// Get answers what GET /api/v1/jobs/{id} does, the plugin's remote
// resources included, and Wait hands them on. A submit sets the job's
// levers through the limits override.
func TestGetReturnsResourcesAndLimits(t *testing.T) {
	st, c, _ := setup(t)
	ctx := context.Background()
	j, created, err := c.Submit(ctx, wire.SubmitRequest{Command: "echo",
		Limits: &wire.LimitsOverride{MaxRetry: new(0), ActiveTimeout: new("90m"), TTLFailed: new("3d")}})
	require.NoError(t, err)
	require.True(t, created)
	assert.Equal(t, 0, j.Limits.MaxRetry)
	assert.Equal(t, 90*time.Minute, j.Limits.ActiveTimeout)
	assert.Equal(t, 3*24*time.Hour, j.Limits.TTLFailed)

	got, err := c.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Empty(t, got.Resources, "none reported yet")
	assert.Equal(t, j.Limits, got.Limits)

	task := wire.Resource{Kind: "ecs_task", Name: "arn:aws:ecs:eu-west-1:123456789012:task/c/abc", Label: "ECS task 0",
		URL: "https://eu-west-1.console.aws.amazon.com/ecs/v2/clusters/c/tasks/abc"}
	h, lease := run(t, st, j.ID, func(lease int64) {
		require.NoError(t, st.CheckpointDescribed(ctx, store.LogBatch{JobID: j.ID, Lease: lease}, 0, []byte("h"),
			&store.Described{Holder: store.Holder{Name: "agent-1", Generation: "gen-1"}, Attempt: 1, Resources: []store.Resource{task}}))
	})
	require.NoError(t, st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
	task.Attempt = 1

	got, err = c.Get(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, []wire.Resource{task}, got.Resources)
	final, err := c.Wait(ctx, j.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, wire.StatusSucceeded, final.Status)
	assert.Equal(t, []wire.Resource{task}, final.Resources)

	var kinds []string
	end, err := c.EventRecords(ctx, j.ID, 0, true, func(e wire.Event) error {
		kinds = append(kinds, e.Kind)
		return nil
	})
	require.NoError(t, err)
	assert.Contains(t, kinds, store.EventRemote)
	assert.Equal(t, wire.StreamEnd{End: true, Status: wire.StatusSucceeded, Attempt: 1}, end)
}
