package agent

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
)

func TestSetApplicationName(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"postgres://u@db.example/tether", "tether/a1/work"},
		{"postgres://u@db.example/tether?application_name=billing", "billing/a1/work"},
		{"host=db.example dbname=tether application_name=ops", "ops/a1/work"},
	} {
		cfg := config.Default()
		cfg.DatabaseURL = tc.url
		pc, err := PoolConfig(cfg)
		require.NoError(t, err)
		SetApplicationName(&pc.ConnConfig.Config, "a1", poolWork)
		assert.Equal(t, tc.want, pc.ConnConfig.RuntimeParams["application_name"], tc.url)
	}
}

// backendNames returns the application_name of every backend on the
// database other than the observer's own, sorted, with repeats.
func backendNames(t *testing.T, observer *pgx.Conn) []string {
	t.Helper()
	rows, err := observer.Query(context.Background(), `
		SELECT application_name FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
		ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// Every backend a started agent holds says tether/<agent>/<pool>, or the
// operator's application_name in front of /<agent>/<pool>, and each pool and
// session is there.
func TestBackendsCarryAgentAndPool(t *testing.T) {
	for _, tc := range []struct{ name, query, prefix string }{
		{"default", "", "tether"},
		{"given", "application_name=billing", "billing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := pgtest.URL(t)
			u, err := url.Parse(base)
			require.NoError(t, err)
			if tc.query != "" {
				q := u.Query()
				q.Set("application_name", "billing")
				u.RawQuery = q.Encode()
			}
			observer, err := pgx.Connect(context.Background(), base)
			require.NoError(t, err)
			t.Cleanup(func() { _ = observer.Close(context.Background()) })

			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			done := make(chan error, 1)
			cfg := testConfig(t, u.String(), "named-1")
			go func() {
				done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
					Options{Started: func(string) { close(started) }})
			}()
			t.Cleanup(func() {
				cancel()
				require.NoError(t, <-done)
			})
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("agent stopped: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("agent did not start")
			}

			// The LISTEN session opens when the claim service starts, after
			// the API listens: wait for it to show.
			want := []string{"api", "heartbeat", "listen", "lock", "work"}
			for i := range want {
				want[i] = tc.prefix + "/named-1/" + want[i]
			}
			deadline := time.Now().Add(30 * time.Second)
			var names []string
			for {
				names = backendNames(t, observer)
				if slices.Contains(names, tc.prefix+"/named-1/listen") || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // polls the server's state, which has no signal
			}
			assert.Equal(t, want, slices.Compact(slices.Clone(names)), "every pool and session once at least")
			for _, n := range names {
				assert.Contains(t, want, n)
			}
		})
	}
}
