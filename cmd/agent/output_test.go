package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
)

// Every read command's machine output parses, alone on stdout, in each
// format. -o json and -o yaml carry the same document.
func TestMachineOutputParses(t *testing.T) {
	c := newCLI(t)
	done := c.agent(t, store.StatusSucceeded)
	r := c.run(t, "submit", "hello", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var j store.Job
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &j), r.stdout)
	require.NoError(t, <-done)

	for _, tc := range []struct {
		args []string
		key  string // the list's key under json/yaml; "" for one object
	}{
		{[]string{"get", j.ID}, ""},
		{[]string{"wait", j.ID}, ""},
		{[]string{"jobs"}, "jobs"},
		{[]string{"agents", "--all"}, "agents"},
		{[]string{"commands"}, "commands"},
		{[]string{"cleanups"}, "cleanups"},
		{[]string{"events", j.ID}, "events"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			docs := map[string]any{}
			for _, format := range []string{"json", "yaml", "jsonl"} {
				r := c.run(t, append(tc.args, "-o", format)...)
				require.Equal(t, 0, r.code, "%v -o %s: %s", tc.args, format, r.stderr)
				switch format {
				case "json":
					var v any
					require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "-o json: %s", r.stdout)
					docs[format] = v
				case "yaml":
					var v any
					require.NoError(t, yaml.Unmarshal([]byte(r.stdout), &v), "-o yaml: %s", r.stdout)
					docs[format] = v
				case "jsonl":
					lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
					if r.stdout == "" {
						lines = nil // an empty list: no lines
					}
					for _, l := range lines {
						var v map[string]any
						require.NoError(t, json.Unmarshal([]byte(l), &v), "-o jsonl line %q", l)
					}
					if tc.key == "" {
						assert.Len(t, lines, 1, "one object, one line")
					}
				}
			}
			if tc.key != "" {
				m, ok := docs["json"].(map[string]any)
				require.True(t, ok, "json: %v", docs["json"])
				assert.Contains(t, m, tc.key)
			}
			// Through JSON, YAML's document equals JSON's (same names, same
			// values), but for the ages that grow between the two calls.
			yb, err := json.Marshal(dropAges(docs["yaml"]))
			require.NoError(t, err)
			jb, err := json.Marshal(dropAges(docs["json"]))
			require.NoError(t, err)
			assert.JSONEq(t, string(jb), string(yb))
		})
	}

	// The job's output of submit --wait -o json goes to stderr. stdout is the
	// finished job alone.
	done = c.agent(t, store.StatusSucceeded)
	r = c.run(t, "submit", "hello", "--wait", "-o", "json")
	require.NoError(t, <-done)
	require.Equal(t, 0, r.code, r.stderr)
	var fin store.Job
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fin), "stdout: %s", r.stdout)
	assert.Equal(t, store.StatusSucceeded, fin.Status)
	assert.Contains(t, r.stderr, "out 0\n")
	assert.Contains(t, r.stderr, "err 2\n")

	// logs -o jsonl: one record per line, in write order.
	r = c.run(t, "logs", fin.ID, "-o", "jsonl")
	require.Equal(t, 0, r.code, r.stderr)
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var rec api.LogLine
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		lines = append(lines, rec.Stream+":"+rec.Line)
	}
	assert.Equal(t, []string{"stdout:out 0", "stderr:err 0", "stdout:out 1", "stderr:err 1", "stdout:out 2", "stderr:err 2"}, lines)
}

// Flags are checked as the API checks them, naming the flag.
func TestFlagValidation(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "--limit", "0"}, "--limit must be between 1 and 1000, got 0"},
		{[]string{"jobs", "--limit", "1001"}, "--limit must be between 1 and 1000"},
		{[]string{"cleanups", "--limit", "0"}, "--limit must be between 1 and 1000"},
		{[]string{"jobs", "--status", "done"}, "--status must be one of queued,"},
		{[]string{"jobs", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"wait", "x", "--wait-timeout", "-1s"}, "--wait-timeout must not be negative"},
		{[]string{"logs", "x", "--wait-timeout", "1s"}, "--wait-timeout needs --follow"},
		{[]string{"logs", "x", "-o", "yaml"}, "use -o jsonl"},
		{[]string{"events", "x", "-f", "-o", "json"}, "use -o jsonl with --follow"},
	} {
		r := c.run(t, tc.args...)
		assert.NotEqual(t, 0, r.code, "%v", tc.args)
		assert.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
}

// A server that accepts connections but never answers is given up on after
// --timeout, not waited for forever.
func TestRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() }) // held open, never answered
		}
	}()
	c := &cli{env: map[string]string{"TETHER_SERVER": "http://" + ln.Addr().String()}}
	start := time.Now()
	r := c.run(t, "jobs", "--timeout", "300ms")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "GET /api/v1/jobs")
	assert.Less(t, time.Since(start), 10*time.Second)

	// A follower gives up at --wait-timeout (exit 3), having retried.
	r = c.run(t, "wait", "some-job", "--timeout", "200ms", "--wait-timeout", "1s")
	assert.Equal(t, exitUnknown, r.code, r.stderr)
	assert.Contains(t, r.stderr, "reconnecting")
}

func TestOutcome(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	finished := created.Add(41 * time.Second)
	for _, tc := range []struct {
		job  store.Job
		line string
		code int
	}{
		{store.Job{ID: "j1", Status: store.StatusSucceeded, Attempt: 2, CreatedAt: created, FinishedAt: &finished},
			"job j1: succeeded (attempt 2, 41s)", exitSucceeded},
		{store.Job{ID: "j1", Status: store.StatusFailed, Attempt: 1, Error: "exit status 7", ErrorClass: "permanent", CreatedAt: created, FinishedAt: &finished},
			"job j1: failed: exit status 7 [permanent] (attempt 1, 41s)", exitFailed},
		{store.Job{ID: "j1", Status: store.StatusCanceled, Attempt: 1, Error: "no longer needed", CreatedAt: created, FinishedAt: &finished},
			"job j1: canceled: no longer needed (attempt 1, 41s)", exitCanceled},
		{store.Job{ID: "j1", Status: store.StatusCanceled, Attempt: 1},
			"job j1: canceled (attempt 1)", exitCanceled},
		{store.Job{ID: "j1", Status: store.StatusRunning, Attempt: 1},
			"job j1 is running: its outcome is not known yet", exitUnknown},
	} {
		line, code := outcome(tc.job)
		assert.Equal(t, tc.line, line)
		assert.Equal(t, tc.code, code, tc.line)
	}
}

// Attempts are separated on stderr. --stamps prefixes each line. A partial
// line is continued without a prefix.
func TestLogPrinter(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 5e6, time.UTC)
	var out, errOut, notices bytes.Buffer
	p := &logPrinter{out: &out, errOut: &errOut, notices: &notices, stamps: true}
	for _, r := range []api.LogLine{
		{Seq: 1, Attempt: 1, Stream: "stdout", Time: at, Line: "one"},
		{Seq: 2, Attempt: 1, Stream: "stderr", Time: at, Line: "warn"},
		{Seq: 3, Attempt: 1, Stream: "stdout", Time: at, Line: "par", Partial: true},
		{Seq: 4, Attempt: 1, Stream: "stdout", Time: at, Line: "tial"},
		{Seq: 5, Attempt: 2, Stream: "stdout", Time: at, Line: "again"},
	} {
		require.NoError(t, p.print(r))
	}
	assert.Equal(t, "2026-01-01T12:00:00.005Z stdout #1 | one\n2026-01-01T12:00:00.005Z stdout #1 | partial\n2026-01-01T12:00:00.005Z stdout #2 | again\n", out.String())
	assert.Equal(t, "2026-01-01T12:00:00.005Z stderr #1 | warn\n", errOut.String())
	assert.Equal(t, "── attempt 2 ──\n", notices.String())
}

// dropAges removes the *_seconds fields (ages measured at each call).
func dropAges(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if strings.HasSuffix(k, "_seconds") {
				delete(v, k)
				continue
			}
			dropAges(e)
		}
	case []any:
		for _, e := range v {
			dropAges(e)
		}
	}
	return v
}

// events -f prints the timeline as it happens and ends with the outcome.
func TestEventsFollow(t *testing.T) {
	c := newCLI(t)
	done := c.agent(t, store.StatusFailed)
	r := c.run(t, "submit", "hello")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.Fields(r.stdout)[2]
	r = c.run(t, "events", "-f", id)
	require.NoError(t, <-done)
	t.Logf("events -f:\n%s%s", r.stdout, r.stderr)
	assert.Equal(t, exitFailed, r.code, r.stderr)
	assert.Regexp(t, `(?m)^TIME\s+\+\s+KIND\s+AGENT\s+MESSAGE$`, r.stdout)
	assert.Regexp(t, `(?m)^\S+\s+-\s+submitted\s`, r.stdout, "the first event has no delta")
	assert.Regexp(t, `(?m)^\S+\s+\+\S+\s+failed\s+fake-agent\s`, r.stdout)
	assert.Regexp(t, `job `+id+`: failed: exit status 7 \[permanent\] \(attempt 1, \d+s\)\n$`, r.stderr)

	r = c.run(t, "events", "-f", id, "-o", "jsonl")
	require.Equal(t, exitFailed, r.code, r.stderr)
	var kinds []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var e store.Event
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, "submitted", kinds[0])
	assert.Equal(t, "failed", kinds[len(kinds)-1])
}

// YAML output is block style, with only the strings quoted that need it.
func TestToYAML(t *testing.T) {
	got, err := toYAML(map[string]any{"a": []any{1, "two", true, nil}, "b": map[string]any{"yes": "yes", "n": "123", "s": "plain"}, "e": []any{}})
	require.NoError(t, err)
	assert.Equal(t, "a:\n  - 1\n  - two\n  - true\n  - null\nb:\n  n: \"123\"\n  s: plain\n  yes: yes\ne: []\n", string(got))
}

// A list is a table with the next page's cursor on stderr, or the API's
// list object, or one item per line.
func TestPrintList(t *testing.T) {
	row := func(w io.Writer, s string) { fmt.Fprintf(w, "%s\t%d\n", s, len(s)) }
	next := "c1"
	for _, tc := range []struct {
		output         string
		next           *string
		stdout, stderr string
	}{
		{outTable, &next, "NAME  LEN\na     1\nbbb   3\n", "more things: --after c1 (or --all)\n"},
		{outTable, nil, "NAME  LEN\na     1\nbbb   3\n", ""},
		{outJSON, &next, "{\n  \"next\": \"c1\",\n  \"things\": [\n    \"a\",\n    \"bbb\"\n  ]\n}\n", ""},
		{outJSONL, &next, "\"a\"\n\"bbb\"\n", ""},
		{outYAML, nil, "things:\n  - a\n  - bbb\n", ""},
	} {
		var stdout, stderr bytes.Buffer
		a := &app{stdout: &stdout, stderr: &stderr, output: tc.output}
		require.NoError(t, printList(a, "things", []string{"a", "bbb"}, tc.next, "NAME\tLEN", row))
		assert.Equal(t, tc.stdout, stdout.String(), tc.output)
		assert.Equal(t, tc.stderr, stderr.String(), tc.output)
	}
}
