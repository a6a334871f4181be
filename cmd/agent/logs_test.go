package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/store"
)

// running submits a job of command and makes it running under agent; it
// returns the job's ID, holder and lease.
func (c *cli) running(t *testing.T, agent, command string) (string, store.Holder, int64) {
	t.Helper()
	ctx := context.Background()
	j, _, err := c.st.Submit(ctx, store.SubmitParams{Command: command, Plugin: "shell"})
	require.NoError(t, err)
	h := store.Holder{Name: agent, Generation: "g1"}
	_, err = c.st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{command}})
	require.NoError(t, err)
	claimed, err := c.st.Claim(ctx, h, 1, []string{command})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = c.st.MarkRunning(ctx, j.ID, claimed[0].Lease, "")
	require.NoError(t, err)
	return j.ID, h, claimed[0].Lease
}

func (c *cli) write(t *testing.T, id string, lease int64, recs ...store.LogRecord) {
	t.Helper()
	held, err := c.st.AppendLogs(context.Background(), []store.LogBatch{{JobID: id, Lease: lease, Records: recs}}, 1<<20)
	require.NoError(t, err)
	require.True(t, held[id])
}

func TestLogsTailAndSince(t *testing.T) {
	c := newCLI(t)
	id, h, lease := c.running(t, "a1", "hello")
	old := time.Now().Add(-time.Hour)
	c.write(t, id, lease,
		store.LogRecord{Stream: "stdout", At: old, Data: []byte("a\nb\n")},
		store.LogRecord{Stream: "stderr", At: old.Add(time.Minute), Data: []byte("c\n")},
		store.LogRecord{Stream: "stdout", At: time.Now(), Data: []byte("d\ne\n")},
	)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tail", "2"}, "d\ne\n"},
		{[]string{"--tail", "3"}, "c\nd\ne\n"},
		{[]string{"--tail", "-1"}, "a\nb\nc\nd\ne\n"},
		{[]string{"--tail", "2", "--stream", "stderr"}, "c\n"},
		{[]string{"--since", "10m"}, "d\ne\n"},
		{[]string{"--since", old.Add(30 * time.Second).Format(time.RFC3339)}, "c\nd\ne\n"},
		{[]string{"--since", "2h", "--tail", "1", "-o", "jsonl"}, ""},
	} {
		r := c.ok(t, append([]string{"logs", id}, tc.args...)...)
		if tc.want != "" {
			assert.Equal(t, tc.want, r.stdout, tc.args)
		} else {
			assert.Regexp(t, `^\{"seq":\d+,"attempt":1,"stream":"stdout","time":"[^"]+","line":"e","partial":false\}\n$`, r.stdout, tc.args)
		}
	}
	for _, bad := range [][]string{{"--tail", "0"}, {"--tail", "-2"}, {"--tail", "100001"}, {"--since", "yesterday"}} {
		r := c.run(t, append([]string{"logs", id}, bad...)...)
		assert.Equal(t, 1, r.code, bad)
		assert.Contains(t, r.stderr, bad[0]+" must be", bad)
	}

	// -f --tail: the last lines, then the rest until the job's end (the
	// API's TestLogsTailAndSince follows a running one), then the outcome.
	c.write(t, id, lease, store.LogRecord{Stream: "stdout", At: time.Now(), Data: []byte("f\n")})
	require.NoError(t, c.st.Finish(context.Background(), h, id, lease, store.Outcome{Status: store.StatusSucceeded}))
	r := c.ok(t, "logs", id, "-f", "--tail", "2")
	assert.Equal(t, "e\nf\n", r.stdout)
	assert.Contains(t, r.stderr, "succeeded")
}
