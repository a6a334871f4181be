package claim_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// statusAtCleanup passes calls to the real plugins and records, for every
// Cleanup, the job's status in the database at the moment it was called.
type statusAtCleanup struct {
	claim.Plugins
	st *store.Store

	mu   sync.Mutex
	seen []string
}

func (p *statusAtCleanup) Cleanup(ctx context.Context, name string, job *plugin.Job) error {
	j, err := p.st.GetJob(ctx, job.ID)
	p.mu.Lock()
	if err != nil {
		p.seen = append(p.seen, "error: "+err.Error())
	} else {
		p.seen = append(p.seen, string(j.Status))
	}
	p.mu.Unlock()
	return p.Plugins.Cleanup(ctx, name, job)
}

func (p *statusAtCleanup) statuses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// The agent-wide rule: Cleanup (which may delete the remote work and what
// it produced) runs only once the job's terminal status is committed.
func TestCleanupRunsOnlyAfterTheTerminalStatusIsCommitted(t *testing.T) {
	st := store.New(pgtest.DB(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plugins, err := pluginhost.New(pluginhost.Config{Dir: pluginDir, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, plugins.Start(ctx))
	rec := &statusAtCleanup{Plugins: plugins, st: st}
	h := store.Holder{Name: "order", Generation: fmt.Sprint("order-", time.Now().UnixNano())}
	_, err = st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 4, Commands: []string{"noop"}})
	require.NoError(t, err)
	cfg := claim.Config{Holder: h, Capacity: 4, Commands: commands,
		PollInterval: 100 * time.Millisecond, Keepalive: time.Second, LogFlush: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	a := &agent{sig: watchSignals(&cfg)}
	svc := claim.New(st, rec, cfg)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx); plugins.Close() }()
	defer func() { cancel(); <-done }()

	dir := t.TempDir()
	j := submit(t, st, "noop", fmt.Sprintf(`{"wait":true,"cleanup_file":%q}`, filepath.Join(dir, "cleaned")))
	a.waitCalled(t, st, j.ID)
	_, err = st.Cancel(ctx, j.ID, "user asked")
	require.NoError(t, err)
	a.waitEnd(t, st, j.ID, 10*time.Second, store.StatusCanceled) // signalled once its Cleanup is over
	assert.Equal(t, []string{string(store.StatusCanceled)}, rec.statuses(), "Cleanup saw the job before its final status was written")
}
