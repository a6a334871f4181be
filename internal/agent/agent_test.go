package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testConfig(t *testing.T, url, name string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DatabaseURL = url
	cfg.Agent.Name = name
	cfg.Agent.Keepalive = config.Duration(250 * time.Millisecond)
	cfg.Agent.StaleJob = config.Duration(2 * time.Second)
	cfg.Agent.OfflineAfter = config.Duration(750 * time.Millisecond)
	cfg.Agent.DeadAfter = config.Duration(500 * time.Millisecond)
	cfg.Agent.CleanInterval = config.Duration(500 * time.Millisecond)
	cfg.Agent.AWOLTimeout = config.Duration(time.Minute)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.PluginDir = t.TempDir() // no plugins: this test is about identity
	require.NoError(t, cfg.Validate())
	return cfg
}

func TestSecondLiveProcessWithTheSameNameIsRefused(t *testing.T) {
	url := pgtest.URL(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- Run(ctx, testConfig(t, url, "same"), log, Options{Started: func(a string) { started <- a }})
	}()
	select {
	case <-started:
	case err := <-firstDone:
		t.Fatalf("first agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("first agent did not start")
	}

	began := time.Now()
	err := Run(context.Background(), testConfig(t, url, "same"), log, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `agent name "same" is held by another live process`)
	assert.Contains(t, err.Error(), "unique per process")
	assert.GreaterOrEqual(t, time.Since(began), 2*time.Second, "it waits up to stale_job for the holder to exit")

	// Once the holder stops, the name is free at once.
	cancel()
	require.NoError(t, <-firstDone)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	again := make(chan error, 1)
	started2 := make(chan string, 1)
	go func() {
		again <- Run(ctx2, testConfig(t, url, "same"), log, Options{Started: func(a string) { started2 <- a }})
	}()
	select {
	case <-started2:
	case err := <-again:
		t.Fatalf("restart under the same name failed: %v", err)
	case <-time.After(time.Second * 30):
		t.Fatal("restart under the same name did not start")
	}
	cancel2()
	require.NoError(t, <-again)
}

func TestNameDefaultsToECSTaskID(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v4/abc/task" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"TaskARN":"arn:aws:ecs:eu-west-1:123456789012:task/prod/0123456789abcdef0"}`)
	}))
	defer srv.Close()
	env := map[string]string{"ECS_CONTAINER_METADATA_URI_V4": srv.URL + "/v4/abc"}
	name, err := resolveName(context.Background(), "", func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "0123456789abcdef0", name)

	name, err = resolveName(context.Background(), "explicit", func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "explicit", name)

	env["ECS_CONTAINER_METADATA_URI_V4"] = srv.URL + "/nope"
	_, err = resolveName(context.Background(), "", func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "set agent.name")
}
