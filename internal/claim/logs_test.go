package claim_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// TestLogsInWriteOrderWithAttempts runs a shell job that writes stdout,
// stderr, stdout and fails retriably on its first attempt. The stored chunks
// come back in write order across both streams (not all stdout, then all
// stderr). Each is stamped with its attempt (1, then 2) and a receive time
// that never goes backwards.
func TestLogsInWriteOrderWithAttempts(t *testing.T) {
	st := store.New(pgtest.DB(t))
	// No periodic flush. Each attempt's output is stored in one statement at
	// its end, so order within a flush is what is tested.
	a := startAgent(t, st, "a1", 2, func(c *claim.Config) { c.LogFlush = time.Hour })
	// The pauses order the writes at the source. The plugin reads stdout and
	// stderr through two pipes, and only time orders writes to two pipes.
	script := `echo "a$TETHER_JOB_ATTEMPT"; sleep 0.2; echo "b$TETHER_JOB_ATTEMPT" >&2; sleep 0.2; echo "c$TETHER_JOB_ATTEMPT"; ` +
		`[ "$TETHER_JOB_ATTEMPT" = 2 ] || exit 75`
	jobCtx, err := json.Marshal(map[string]any{"script": script, "retry_exit_codes": []int{75}})
	require.NoError(t, err)
	j, _, err := st.Submit(context.Background(), store.SubmitParams{
		Command: "shell", Plugin: "shell", Context: jobCtx, Limits: limits.Set{MaxRetry: 1},
	})
	require.NoError(t, err)
	done := a.waitEnd(t, st, j.ID, 30*time.Second, store.StatusSucceeded, store.StatusFailed)
	require.Equal(t, store.StatusSucceeded, done.Status, done.Error)
	require.Equal(t, 2, done.Attempt)

	chunks, err := st.Logs(context.Background(), j.ID, "", 0, 0)
	require.NoError(t, err)
	type got struct {
		Stream  string
		Attempt int
		Data    string
	}
	var out []got
	for i, c := range chunks {
		out = append(out, got{c.Stream, c.Attempt, string(c.Data)})
		if i > 0 {
			assert.False(t, c.At.Before(chunks[i-1].At), "chunk %d received before chunk %d", i, i-1)
			assert.Greater(t, c.Seq, chunks[i-1].Seq)
		}
	}
	assert.Equal(t, []got{
		{"stdout", 1, "a1\n"}, {"stderr", 1, "b1\n"}, {"stdout", 1, "c1\n"},
		{"stdout", 2, "a2\n"}, {"stderr", 2, "b2\n"}, {"stdout", 2, "c2\n"},
	}, out)
	assert.WithinDuration(t, time.Now(), chunks[0].At, time.Minute, "stamped by the agent's clock at receipt")

	// The stream filter still holds, in the same order.
	stdout, err := st.Logs(context.Background(), j.ID, "stdout", 0, 0)
	require.NoError(t, err)
	require.Len(t, stdout, 4)
	assert.Equal(t, "c2\n", string(stdout[3].Data))
}
