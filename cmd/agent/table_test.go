package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// ok runs the CLI and requires it to succeed.
func (c *cli) ok(t *testing.T, args ...string) result {
	t.Helper()
	r := c.run(t, args...)
	require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
	return r
}

func TestHumanDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{45 * time.Second, "45s"},
		{119 * time.Second, "119s"},
		{3*time.Minute + 20*time.Second, "3m20s"},
		{42 * time.Minute, "42m"},
		{5*time.Hour + 10*time.Minute, "5h10m"},
		{30 * time.Hour, "30h"},
		{3*24*time.Hour + 4*time.Hour, "3d4h"},
		{200 * 24 * time.Hour, "200d"},
	} {
		assert.Equal(t, tc.want, humanDuration(tc.d), tc.d.String())
	}
}

func TestJobDuration(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	started, finished := now.Add(-90*time.Second), now.Add(-30*time.Second)
	assert.Equal(t, "-", jobDuration(wire.Job{}, now), "not started")
	assert.Equal(t, "90s", jobDuration(wire.Job{StartedAt: &started}, now), "running: until now")
	assert.Equal(t, "60s", jobDuration(wire.Job{StartedAt: &started, FinishedAt: &finished}, now), "finished: start to end")
}

func TestHangingLines(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, hangingLines(&b, "KIND  ", "first\r\nsecond  \n\nfourth\n\n"))
	assert.Equal(t, "KIND  first\n      second\n\n      fourth\n", b.String())
	assert.Equal(t, "a ⏎ b", oneLine("a\nb\n"))
}

func TestVersionOutputJSON(t *testing.T) {
	c := newCLI(t)
	r := c.ok(t, "version", "-o", "json")
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	assert.NotEmpty(t, v["version"])
	assert.Equal(t, buildVersion().Go, v["go"])
	r = c.run(t, "version")
	assert.Regexp(t, `^tether \S+`, r.stdout)
}

// An ID the server does not know is an error (exit 1), not "unknown" (3),
// which scripts read as "still running".
func TestFollowUnknownJobIsNotFound(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{{"wait", "nope"}, {"logs", "-f", "nope"}, {"events", "-f", "nope"}, {"logs", "-f", "nope", "-o", "jsonl"}} {
		r := c.run(t, args...)
		assert.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, `job "nope" not found (HTTP 404)`, args)
	}
}

func TestJobsAgeDurationAgentAndNoHeaders(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	queued, _, err := c.st.Submit(ctx, store.SubmitParams{Command: "hello", Plugin: "shell"})
	require.NoError(t, err)
	heldID, _, _ := c.running(t, "agent-b", "other")

	r := c.ok(t, "jobs")
	assert.Regexp(t, `(?m)^ID\s+COMMAND\s+STATUS\s+ATTEMPT\s+SUBMITTER\s+AGENT\s+AGE\s+DURATION$`, r.stdout)
	assert.Regexp(t, `(?m)^`+queued.ID+`\s+hello\s+queued\s+1\s+-\s+-\s+\d+s\s+-$`, r.stdout)
	assert.Regexp(t, `(?m)^`+heldID+`\s+other\s+running\s+1\s+-\s+agent-b\s+\d+s\s+\d+s$`, r.stdout)

	r = c.ok(t, "jobs", "--agent", "agent-b", "--no-headers")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 1, r.stdout)
	assert.True(t, strings.HasPrefix(lines[0], heldID), r.stdout)
	r = c.ok(t, "jobs", "--agent", "agent-x", "-o", "json")
	assert.JSONEq(t, `{"jobs":[],"next":""}`, r.stdout)

	r = c.ok(t, "events", queued.ID, "--no-headers")
	assert.NotContains(t, r.stdout, "KIND")
	assert.Contains(t, r.stdout, "submitted")
}

// A reason over several lines stays in the MESSAGE column of events and in
// the value column of get.
func TestMultiLineMessagesKeepTheLayout(t *testing.T) {
	c := newCLI(t)
	ctx := context.Background()
	j, _, err := c.st.Submit(ctx, store.SubmitParams{Command: "hello", Plugin: "shell"})
	require.NoError(t, err)
	r := c.ok(t, "cancel", j.ID, "--reason", "first line\nsecond line")

	r = c.ok(t, "events", j.ID)
	col := strings.Index(strings.Split(r.stdout, "\n")[0], "MESSAGE")
	m := regexp.MustCompile(`(?m)^( *)second line$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	assert.Len(t, m[1], col, "the second line starts under MESSAGE:\n%s", r.stdout)
	assert.Regexp(t, `(?m)^\S.*canceled.*first line$`, r.stdout)

	r = c.ok(t, "get", j.ID)
	first := regexp.MustCompile(`(?m)^Error:( +)first line$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, first, r.stdout)
	assert.Regexp(t, fmt.Sprintf(`(?m)^ {%d}second line$`, len("Error:")+len(first[1])), r.stdout)
}
