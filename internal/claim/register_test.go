package claim_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// logBuffer collects an agent's log lines. The service logs from many
// goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// nextBeat waits for a heartbeat answer that satisfies ok.
func nextBeat(t *testing.T, beats <-chan store.HeartbeatResult, what string, ok func(store.HeartbeatResult) bool) store.HeartbeatResult {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case res := <-beats:
			if ok(res) {
				return res
			}
		case <-timeout:
			t.Fatalf("no heartbeat %s within 10s", what)
		}
	}
}

func agentRow(t *testing.T, st *store.Store, name string) (generation, state string) {
	t.Helper()
	require.NoError(t, st.Pool().QueryRow(context.Background(),
		`SELECT generation, state FROM agents WHERE name = $1`, name).Scan(&generation, &state))
	return generation, state
}

func TestDeletedAgentRowRegistersAgainAndCarriesOn(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	// Buffered well past the test's beats, so an unread answer never stalls
	// the heartbeat.
	beats := make(chan store.HeartbeatResult, 1000)
	logs := &logBuffer{}
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) {
		c.Keepalive = 200 * time.Millisecond
		c.TestSignals.Heartbeat = beats
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	gen, _ := agentRow(t, st, "a1")
	j := submit(t, st, "noop", fmt.Sprintf(`{"wait":true,"cancel_file":%q,"stdout":["in the plugin"],"checkpoint":"h"}`,
		filepath.Join(t.TempDir(), "canceled")))
	running := a.waitCalled(t, st, j.ID)
	a.waitCheckpointed(t, j.ID)

	_, err := st.Pool().Exec(ctx, `DELETE FROM agents WHERE name = 'a1'`)
	require.NoError(t, err)
	nextBeat(t, beats, "finding the row deleted", func(r store.HeartbeatResult) bool { return r.Missing })
	res := nextBeat(t, beats, "after registering again", func(r store.HeartbeatResult) bool { return !r.Missing })
	require.True(t, res.Registered, "the row written again is this process's")
	require.Len(t, res.Held, 1, "the renewal right after registering again kept the lease")
	assert.Equal(t, j.ID, res.Held[0].JobID)

	again, state := agentRow(t, st, "a1")
	assert.Equal(t, gen, again, "registered again under the same generation")
	assert.Equal(t, "running", state)
	assert.Equal(t, 1, strings.Count(logs.String(), "agent row was deleted (by an operator or agent retention); registered again"), logs.String())
	assert.NotContains(t, logs.String(), "another process registered")

	// It keeps its job and goes on claiming.
	assert.Equal(t, []string{j.ID}, a.svc.Running())
	after, err := st.GetJob(ctx, j.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusRunning, after.Status)
	assert.Equal(t, running.Lease, after.Lease)
	next := submit(t, st, "noop", `{}`)
	done := a.waitEnd(t, st, next.ID, 20*time.Second, store.StatusSucceeded, store.StatusFailed)
	assert.Equal(t, store.StatusSucceeded, done.Status, done.Error)
	evs, err := st.Events(ctx, next.ID, 0, 0)
	require.NoError(t, err)
	var claimedBy []string
	for _, e := range evs {
		if e.Kind == "claimed" {
			claimedBy = append(claimedBy, e.Agent+"/"+e.Generation)
		}
	}
	assert.Equal(t, []string{"a1/" + gen}, claimedBy)
}

func TestAgentRowOfAnotherGenerationStopsTheService(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx := context.Background()
	a := startAgent(t, st, "a1", 4, func(c *claim.Config) { c.Keepalive = 200 * time.Millisecond })
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "a1", Generation: "newer"}, Capacity: 1})
	require.NoError(t, err)

	select {
	case err := <-a.done:
		a.done <- err // for startAgent's cleanup, which waits on it too
		require.Error(t, err)
		assert.Contains(t, err.Error(), "another process registered under this agent's name")
	case <-time.After(10 * time.Second):
		t.Fatal("the superseded service did not stop within 10s")
	}
	gen, _ := agentRow(t, st, "a1")
	assert.Equal(t, "newer", gen, "the newer process's row is left alone")
}
