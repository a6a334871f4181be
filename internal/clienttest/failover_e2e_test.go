package clienttest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// Two API servers over one database. The first is cut mid-stream. The
// follower goes on from the second with every line once, and ends with the
// job's status.
func TestFailoverFollowLogsAcrossServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := store.New(pgtest.DB(t))
	newServer := func() *httptest.Server {
		srv := httptest.NewServer(api.New(api.Options{
			Store:           st,
			Commands:        map[string]config.Command{"echo": {Plugin: "shell"}},
			Logger:          slog.New(slog.DiscardHandler),
			LogPollInterval: 10 * time.Millisecond,
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	first, second := newServer(), newServer()
	var clients []*client.Client
	for _, s := range []*httptest.Server{first, second} {
		c, err := client.New(s.URL)
		require.NoError(t, err)
		clients = append(clients, c)
	}
	var mu sync.Mutex
	var retries []string
	fo, err := client.NewFailover(clients, client.WithBackoff(10*time.Millisecond, 50*time.Millisecond),
		client.OnRetry(func(server string, _ error, _ time.Duration) {
			mu.Lock()
			retries = append(retries, server)
			mu.Unlock()
		}))
	require.NoError(t, err)

	j, _, err := st.Submit(ctx, store.SubmitParams{Command: "echo", Plugin: "shell"})
	require.NoError(t, err)
	h, lease := run(t, st, j.ID, nil)
	write := func(from, to int) {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		_, err := st.AppendLogs(ctx, []store.LogBatch{{JobID: j.ID, Lease: lease, Stdout: []byte(b.String())}}, 1<<20)
		require.NoError(t, err)
	}
	write(0, 3) // one chunk of three lines

	var got []string
	cut := false
	end, err := fo.FollowLogs(ctx, j.ID, client.LogQuery{}, func(r wire.LogLine) error {
		got = append(got, r.Line)
		if len(got) == 2 && !cut {
			// Mid-chunk. The first server goes away, like a killed agent.
			cut = true
			first.CloseClientConnections()
			first.Close()
			write(3, 5)
			require.NoError(t, st.Finish(ctx, h, j.ID, lease, store.Outcome{Status: store.StatusSucceeded}))
		}
		return nil
	})
	require.NoError(t, err)
	assert.True(t, end.End)
	assert.Equal(t, store.StatusSucceeded, end.Status)
	assert.Equal(t, []string{"line 0", "line 1", "line 2", "line 3", "line 4"}, got, "every line once, in order")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{first.URL}, retries, "one retry, after the first server was lost")
}
