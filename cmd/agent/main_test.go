package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type cli struct {
	st  *store.Store
	url string
	env map[string]string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	st := store.New(pgtest.DB(t))
	srv := httptest.NewServer(api.New(api.Options{
		Store:           st,
		Commands:        map[string]config.Command{"hello": {Plugin: "shell"}},
		Logger:          slog.New(slog.DiscardHandler),
		LogPollInterval: 10 * time.Millisecond,
	}))
	t.Cleanup(srv.Close)
	return &cli{st: st, url: srv.URL, env: map[string]string{"TETHER_SERVER": srv.URL}}
}

type result struct {
	code           int
	stdout, stderr string
}

func (c *cli) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb, func(k string) string { return c.env[k] })
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// agent plays the part of a tether agent for the one job it finds. It
// claims it, writes output and finishes it with status.
func (c *cli) agent(t *testing.T, status jobstate.JobStatus) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			h := store.Holder{Name: "fake-agent", Generation: "g1"}
			if _, err := c.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"hello"}}); err != nil {
				return err
			}
			var claimed []store.Claimed
			for len(claimed) == 0 {
				var err error
				if claimed, err = c.st.Claim(ctx, h, 1, []string{"hello"}); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			id, lease := claimed[0].Job.ID, claimed[0].Lease
			if _, err := c.st.MarkRunning(ctx, id, lease, ""); err != nil {
				return err
			}
			for i := range 3 {
				batch := store.LogBatch{JobID: id, Lease: lease, Stdout: fmt.Appendf(nil, "out %d\n", i), Stderr: fmt.Appendf(nil, "err %d\n", i)}
				if _, err := c.st.AppendLogs(ctx, []store.LogBatch{batch}, 1<<20); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
			}
			o := store.Outcome{Status: status}
			if status == store.StatusFailed {
				o.Error, o.ErrorClass = "exit status 7", "permanent"
			}
			return c.st.Finish(ctx, h, id, lease, o)
		}()
	}()
	return done
}

func TestSubmitWaitExitCodes(t *testing.T) {
	for _, tc := range []struct {
		status jobstate.JobStatus
		code   int
	}{
		{store.StatusSucceeded, 0},
		{store.StatusFailed, 1},
		{store.StatusCanceled, 2},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			c := newCLI(t)
			done := c.agent(t, tc.status)
			r := c.run(t, "submit", "hello", "--set", "script=echo hi", "--wait")
			require.NoError(t, <-done)
			assert.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			assert.Equal(t, "out 0\nout 1\nout 2\n", r.stdout, "the job's stdout, and nothing else, on stdout")
			// The job's stderr, in order. The CLI's own notices ("job …:
			// running on …") may come between its lines, as they happen.
			assert.Contains(t, withoutNotices(r.stderr), "err 0\nerr 1\nerr 2\n")
			assert.Contains(t, r.stderr, "submitted job ")
			assert.Contains(t, r.stderr, ": "+string(tc.status))
			if tc.status == store.StatusFailed {
				assert.Contains(t, r.stderr, "failed: exit status 7")
			}
		})
	}
}

func TestSubmitWaitCanceledWhileQueued(t *testing.T) {
	c := newCLI(t)
	go func() {
		// Cancel the job as soon as it exists. No agent ever claims it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			jobs, _, err := c.st.ListJobs(ctx, store.ListParams{})
			if err == nil && len(jobs) == 1 {
				_, _ = c.st.Cancel(ctx, jobs[0].ID, "test")
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	r := c.run(t, "submit", "hello", "--wait")
	assert.Equal(t, exitCanceled, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "canceled: test")
}

func TestSubmitWaitRejectedIsUnknown(t *testing.T) {
	c := newCLI(t)
	r := c.run(t, "submit", "nope", "--wait")
	assert.Equal(t, exitUnknown, r.code)
	assert.Contains(t, r.stderr, `unknown command "nope": neither this agent's config nor any live agent serves it; configured on this agent: hello`)

	r = c.run(t, "submit", "nope")
	assert.Equal(t, 1, r.code, "without --wait an error is exit 1")

	c.env["TETHER_SERVER"] = "http://127.0.0.1:1" // nothing listens
	r = c.run(t, "submit", "hello", "--wait")
	assert.Equal(t, exitUnknown, r.code)
	assert.Contains(t, r.stderr, "submitting")
}

func TestSubmitContextAndKey(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "ctx.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"script":"from file","env":{"A":"1"}}`), 0o600))

	r := c.run(t, "submit", "hello", "--context", "@"+file, "--set", "env.B=2", "--set-json", "retries=3", "--key", "k1", "--submitter", "me")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "submitted job "), r.stdout)
	id := strings.Fields(r.stdout)[2]
	j, err := c.st.GetJob(context.Background(), id)
	require.NoError(t, err)
	assert.JSONEq(t, `{"script":"from file","env":{"A":"1","B":"2"},"retries":3}`, string(j.Context))
	assert.Equal(t, "me", j.Submitter)
	assert.Equal(t, "k1", j.IdempotencyKey)

	// The same request again is a replay. --output json prints the job.
	r = c.run(t, "submit", "hello", "--context", "@"+file, "--set", "env.B=2", "--set-json", "retries=3", "--key", "k1", "--submitter", "me", "-o", "json")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var replay store.Job
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &replay))
	assert.Equal(t, id, replay.ID)

	for _, args := range [][]string{
		{"--context", "[1]"}, {"--context", "null"}, {"--set", "novalue"}, {"--set-json", "a={"}, {"--set", "a..b=1"},
		{"--context", `{"a":1}`, "--set", "a.b=1"},
	} {
		r := c.run(t, append([]string{"submit", "hello"}, args...)...)
		assert.Equal(t, 1, r.code, "%v", args)
		assert.NotEmpty(t, r.stderr, "%v", args)
	}
}

func TestClientCommands(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	j, _, err := c.st.Submit(ctx, store.SubmitParams{Command: "hello", Plugin: "shell", Submitter: "ann"})
	require.NoError(t, err)

	r := c.run(t, "get", j.ID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Status:     queued")
	assert.Contains(t, r.stdout, "Submitter:  ann")
	r = c.run(t, "get", j.ID, "--output", "json")
	var got store.Job
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, j.ID, got.ID)
	r = c.run(t, "get", "missing")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `job "missing" not found (HTTP 404)`)

	r = c.run(t, "jobs")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "ID")
	assert.Contains(t, r.stdout, j.ID)
	r = c.run(t, "jobs", "--status", "running")
	assert.NotContains(t, r.stdout, j.ID)
	r = c.run(t, "jobs", "--status", "bogus")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "field status")

	second, _, err := c.st.Submit(ctx, store.SubmitParams{Command: "hello", Plugin: "shell"})
	require.NoError(t, err)
	r = c.run(t, "jobs", "--limit", "1")
	assert.Contains(t, r.stdout, second.ID)
	assert.NotContains(t, r.stdout, j.ID)
	assert.Contains(t, r.stderr, "more jobs: --after")
	r = c.run(t, "jobs", "--limit", "1", "--all", "-o", "json")
	var list wire.JobList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	assert.Len(t, list.Jobs, 2)

	r = c.run(t, "cancel", j.ID, "--reason", "no longer needed")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "job "+j.ID+": canceled\n", r.stdout)
	r = c.run(t, "cancel", j.ID)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "already canceled")

	r = c.run(t, "logs", j.ID)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	r = c.run(t, "logs", j.ID, "--stream", "both")
	assert.Equal(t, 1, r.code)

	_, err = c.st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "agent-7", Generation: "g"}, Capacity: 3, Commands: []string{"hello"}})
	require.NoError(t, err)
	r = c.run(t, "agents")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "agent-7")
	assert.Contains(t, r.stdout, "running")
}

func TestCommandsCommand(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	_, _, err := c.st.Submit(ctx, store.SubmitParams{Command: "hello", Plugin: "shell"})
	require.NoError(t, err)

	r := c.run(t, "commands")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `NAME\s+PLUGIN\s+SERVED\s+AGENTS\s+DRAINING\s+UNHEALTHY\s+QUEUED\s+OLDEST`, r.stdout)
	assert.Regexp(t, `hello\s+shell\s+no\s+-\s+-\s+-\s+1\s+\d+s`, r.stdout)
	assert.Contains(t, r.stdout, "no live agent serves command hello: jobs wait queued; start an agent with this command or check its plugin (shell) loaded")

	_, err = c.st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "agent-7", Generation: "g"}, Capacity: 3, Commands: []string{"hello"}})
	require.NoError(t, err)
	r = c.run(t, "commands")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `hello\s+shell\s+yes\s+agent-7\s+-\s+-\s+1`, r.stdout)
	assert.NotContains(t, r.stdout, "no live agent")

	r = c.run(t, "commands", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var list wire.CommandList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list.Commands, 1)
	assert.True(t, list.Commands[0].Served)
	assert.Equal(t, []string{"agent-7"}, list.Commands[0].Agents)

	// Its plugin fails its health check there: it claims none of the
	// command's jobs, and nobody else serves it.
	h := store.Holder{Name: "agent-8", Generation: "g"}
	_, err = c.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 3, Commands: []string{"hello"},
		CommandSpecs: map[string]store.CommandSpec{"hello": {Plugin: "shell"}}})
	require.NoError(t, err)
	require.NoError(t, c.st.SetUnhealthyPlugins(ctx, h, map[string]string{"shell": "backend unreachable"}))
	_, err = c.st.Pool().Exec(ctx, `UPDATE agents SET state = 'stopped' WHERE name = 'agent-7'`)
	require.NoError(t, err)
	r = c.run(t, "commands")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `hello\s+shell\s+no\s+-\s+-\s+agent-8\s+1`, r.stdout)
	assert.Contains(t, r.stdout, "no live agent serves command hello with a healthy plugin: its plugin (shell) fails its health check on agent-8")
	r = c.run(t, "agents", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var agents wire.AgentList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &agents), r.stdout)
	require.Len(t, agents.Agents, 1)
	assert.Equal(t, map[string]string{"shell": "backend unreachable"}, agents.Agents[0].UnhealthyPlugins)
}

func TestLogsFollow(t *testing.T) {
	c := newCLI(t)
	done := c.agent(t, store.StatusSucceeded)
	r := c.run(t, "submit", "hello")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.Fields(r.stdout)[2]
	r = c.run(t, "logs", "-f", id, "--stream", "stdout")
	require.NoError(t, <-done)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "out 0\nout 1\nout 2\n", r.stdout)
}

func TestGlobalFlags(t *testing.T) {
	c := newCLI(t)
	r := c.run(t, "jobs", "--output", "xml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "--output must be table, json, jsonl or yaml")

	r = c.run(t, "jobs", "--log-level", "loud")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "--log-level")

	// --server wins over TETHER_SERVER.
	c.env["TETHER_SERVER"] = "http://127.0.0.1:1"
	r = c.run(t, "jobs", "--server", c.url)
	assert.Equal(t, 0, r.code, r.stderr)
	r = c.run(t, "jobs")
	assert.Equal(t, 1, r.code)

	c.env["TETHER_SERVER"] = "not a url"
	r = c.run(t, "agents")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "--server")

	r = c.run(t, "version")
	assert.Equal(t, 0, r.code)
	assert.True(t, strings.HasPrefix(r.stdout, "tether "), r.stdout)

	r = c.run(t, "frobnicate")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "unknown command")
}

func TestTokenFromEnv(t *testing.T) {
	st := store.New(pgtest.DB(t))
	srv := httptest.NewServer(api.New(api.Options{
		Store: st, Logger: slog.New(slog.DiscardHandler),
		Tokens: []config.Token{{Name: "ops", Token: "ops-token-0123456789"}},
	}))
	t.Cleanup(srv.Close)
	c := &cli{st: st, url: srv.URL, env: map[string]string{"TETHER_SERVER": srv.URL}}
	r := c.run(t, "agents")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "missing bearer token")
	c.env["TETHER_TOKEN"] = "ops-token-0123456789"
	r = c.run(t, "agents")
	assert.Equal(t, 0, r.code, r.stderr)
}

func TestMigrateCommand(t *testing.T) {
	c := &cli{env: map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)}}
	r := c.run(t, "migrate", "--log-level", "error")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "applied migrations [1")
	r = c.run(t, "migrate")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "database schema is up to date")

	c.env = map[string]string{}
	r = c.run(t, "migrate")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "database_url is not set")
}

func TestRunRejectsBadConfig(t *testing.T) {
	c := &cli{env: map[string]string{"TETHER_AGENT_KEEPALIVE": "24hh"}}
	r := c.run(t, "run")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "TETHER_AGENT_KEEPALIVE")

	path := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte("agent:\n  capacty: 3\n"), 0o600))
	c.env = map[string]string{"TETHER_CONFIG": path}
	r = c.run(t, "run")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "agent.capacty: unknown key")
}

func TestBuildContext(t *testing.T) {
	got, err := buildContext("", nil, nil)
	require.NoError(t, err)
	assert.Nil(t, got, "no flags: the server's default {}")
	got, err = buildContext(`{"a":{"b":1}}`, []string{"a.c=x", "d=1=2"}, []string{"e=[1,2]", "a.b=null"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":{"b":null,"c":"x"},"d":"1=2","e":[1,2]}`, string(got))
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSubmitLimitFlags(t *testing.T) {
	c := newCLI(t)
	r := c.run(t, "submit", "hello", "--limit", "max_retry=0", "--limit", "active_timeout=90m")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	j, err := c.st.GetJob(context.Background(), strings.Fields(r.stdout)[2])
	require.NoError(t, err)
	assert.Equal(t, 0, j.Limits.MaxRetry)
	assert.Equal(t, 90*time.Minute, j.Limits.ActiveTimeout)

	for args, want := range map[string]string{
		"max_retry":           "want lever=value",
		"max_retry=two":       "want a whole number",
		"retries=3":           "unknown field",
		"active_timeout=24hh": "active_timeout",
		"pending_timeout=-1s": "pending_timeout",
	} {
		r := c.run(t, "submit", "hello", "--limit", args)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stderr, want, args)
	}
}

// withoutNotices drops the CLI's own lines about the job ("submitted job …",
// "job <id>: …") from its stderr, leaving the job's.
func withoutNotices(stderr string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if strings.HasPrefix(l, "job ") || strings.HasPrefix(l, "submitted job ") {
			continue
		}
		b.WriteString(l)
	}
	return b.String()
}

func TestAgentsCommandLiveByDefaultAllWithFlag(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	for _, name := range []string{"agent-up", "agent-gone"} {
		_, err := c.st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: name, Generation: "g"}, Capacity: 3, Commands: []string{"hello"}})
		require.NoError(t, err)
	}
	require.NoError(t, c.st.SetAgentState(ctx, store.Holder{Name: "agent-gone", Generation: "g"}, "stopped"))

	r := c.run(t, "agents")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `NAME\s+STATE\s+LIVENESS\s+ACTIVE\s+CAPACITY\s+LAST SEEN\s+VERSION\s+COMMANDS\s+REASON`, r.stdout)
	assert.Regexp(t, `agent-up\s+running\s+live\s+0\s+3\s.*\sheartbeating`, r.stdout)
	assert.NotContains(t, r.stdout, "agent-gone", "a stopped agent is history: only with --all")

	r = c.run(t, "agents", "--all")
	require.Equal(t, 0, r.code, r.stderr)
	// A clean stop shows stopped, not stale (issue 27).
	assert.Regexp(t, `agent-gone\s+stopped\s+stopped\s+0\s+3\s.*\sstopped cleanly`, r.stdout)
	assert.Regexp(t, `agent-up\s+running\s+live\s`, r.stdout)

	r = c.run(t, "agents", "--all", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var list wire.AgentList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list.Agents, 2)
	assert.Equal(t, "agent-gone", list.Agents[0].Name)
	assert.False(t, list.Agents[0].Live)
	assert.True(t, list.Agents[1].Live)
}

// A job of a command no live agent serves would wait queued with no hint.
// Submit says so on stderr, and stays quiet once an agent serves it.
func TestSubmitWarnsWhenNoAgentServesTheCommand(t *testing.T) {
	c := newCLI(t)
	r := c.run(t, "submit", "hello")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "notice: no live agent serves command hello: jobs wait queued")
	assert.NotContains(t, r.stdout, "notice:", "stdout stays the answer")

	_, err := c.st.RegisterAgent(context.Background(), store.Registration{Holder: store.Holder{Name: "agent-1", Generation: "g"}, Capacity: 1, Commands: []string{"hello"}})
	require.NoError(t, err)
	r = c.run(t, "submit", "hello")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "no live agent")
}

// get shows the remote resources the plugin reported, as GET /jobs/{id}
// answers them: in the table and under -o json.
func TestGetShowsResources(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	j, _, err := c.st.Submit(ctx, store.SubmitParams{Command: "hello", Plugin: "shell"})
	require.NoError(t, err)
	h := store.Holder{Name: "agent-1", Generation: "gen-1"}
	_, err = c.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"hello"}})
	require.NoError(t, err)
	claimed, err := c.st.Claim(ctx, h, 1, []string{"hello"})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	task := store.Resource{Kind: "ecs_task", Name: "arn:aws:ecs:eu-west-1:123456789012:task/c/abc",
		URL: "https://eu-west-1.console.aws.amazon.com/ecs/v2/clusters/c/tasks/abc"}
	require.NoError(t, c.st.CheckpointDescribed(ctx, store.LogBatch{JobID: j.ID, Lease: claimed[0].Lease}, 0, []byte("h"),
		&store.Described{Holder: h, Attempt: 1, Resources: []store.Resource{task}}))

	r := c.run(t, "get", j.ID, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var got wire.JobDetail
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	task.Attempt = 1
	assert.Equal(t, []wire.Resource{task}, got.Resources)

	r = c.run(t, "get", j.ID)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Resource:   #1 ecs_task "+task.Name+" "+task.URL+"\n")
}
