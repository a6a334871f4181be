package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// idleFollowers and followWindow: 50 clients tailing jobs that run and say
// nothing, counted over a window long enough for several fallback polls.
const (
	idleFollowers = 50
	followWindow  = 15 * time.Second
)

// BenchmarkIdleFollowers measures the database queries per second that 50
// idle log followers cost one agent's API, side by side in one run:
//
//	poll:   the old behaviour, every follower polling every 250ms;
//	notify: woken by NOTIFY (the claim service's LISTEN connection), with the
//	        default 5s fallback poll.
//
// Queries are counted by a pgx tracer on the API's own pool, so the agent's
// other work (heartbeats, claim polls) is not in the figures. Run with
// `go test -run '^$' -bench IdleFollowers -benchtime 1x ./internal/bench/`.
func BenchmarkIdleFollowers(b *testing.B) {
	for i := 0; i < b.N; i++ {
		poll := idleFollowerQPS(b, false)
		notified := idleFollowerQPS(b, true)
		b.ReportMetric(poll, "poll-queries/s")
		b.ReportMetric(notified, "notify-queries/s")
		b.ReportMetric(poll/notified, "ratio")
		b.Logf("%d idle followers: polling every 250ms %.1f queries/s, NOTIFY with a 5s fallback %.1f queries/s (%.0f× fewer)",
			idleFollowers, poll, notified, poll/notified)
	}
}

func idleFollowerQPS(b *testing.B, withNotify bool) float64 {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := pgtest.URL(b)
	st := openStore(b, url, nil)
	jobs := silentRunningJobs(b, st, idleFollowers)

	var counted atomic.Int64
	apiStore := openStore(b, url, &countQueries{n: &counted})
	opts := api.Options{
		Store:           apiStore,
		Commands:        map[string]config.Command{"silent": {Plugin: "silent"}},
		Logger:          slog.New(slog.DiscardHandler),
		LogPollInterval: api.DefaultLogPollInterval,
	}
	if withNotify {
		opts.Follow = listener(b, ctx, st)
	}
	srv := httptest.NewServer(api.New(opts))
	defer srv.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before wg.Wait: ends the followers
	for _, id := range jobs {
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/jobs/"+id+"/logs?format=jsonl&follow=true", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req) // answers once the headers are out: following
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body) // until cancel
		}()
	}
	if withNotify {
		for opts.Follow.Followers() < idleFollowers {
			select {
			case <-ctx.Done():
				b.Fatal("followers did not subscribe")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	start, before := time.Now(), counted.Load()
	select {
	case <-time.After(followWindow):
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	return float64(counted.Load()-before) / time.Since(start).Seconds()
}

func openStore(b *testing.B, url string, tracer *countQueries) *store.Store {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return store.New(pool)
}

// silentRunningJobs submits n jobs and moves them to running under a holder
// that never writes output. That is what a follower of a long quiet job sees.
func silentRunningJobs(b *testing.B, st *store.Store, n int) []string {
	b.Helper()
	ctx := context.Background()
	h := store.Holder{Name: "silent", Generation: "1"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: n, Commands: []string{"silent"}}); err != nil {
		b.Fatal(err)
	}
	var ids []string
	for range n {
		j, _, err := st.Submit(ctx, store.SubmitParams{Command: "silent", Plugin: "silent"})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	claimed, err := st.Claim(ctx, h, n, []string{"silent"})
	if err != nil || len(claimed) != n {
		b.Fatalf("claimed %d of %d jobs: %v", len(claimed), n, err)
	}
	for _, c := range claimed {
		if _, err := st.MarkRunning(ctx, c.Job.ID, c.Lease, ""); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// listener runs a claim service with no commands for its LISTEN connection,
// as an agent does, and returns its hub once it listens.
func listener(b *testing.B, ctx context.Context, st *store.Store) *notify.Hub {
	b.Helper()
	h := store.Holder{Name: "listener", Generation: "1"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1}); err != nil {
		b.Fatal(err)
	}
	hub := notify.New()
	svc := claim.New(st, idlePlugins{}, claim.Config{Holder: h, Follow: hub, Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	b.Cleanup(func() { <-done })
	for !hub.Live() {
		select {
		case err := <-done:
			b.Fatalf("listener stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return hub
}

// countQueries counts the statements a pool sends.
type countQueries struct{ n *atomic.Int64 }

func (c *countQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// idlePlugins runs nothing. The listener's service has no commands.
type idlePlugins struct{}

func (idlePlugins) Info(string) (plugin.Info, bool) { return plugin.Info{}, false }
func (idlePlugins) Execute(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, fmt.Errorf("no plugins")
}
func (idlePlugins) Resume(context.Context, string, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return nil, fmt.Errorf("no plugins")
}
func (idlePlugins) Cleanup(context.Context, string, *plugin.Job) error { return nil }
func (idlePlugins) Renew(context.Context, time.Duration)               {}
