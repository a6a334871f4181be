package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/localstack/emulator"
)

// An agent whose database URL is only in Secrets Manager (database_secret,
// read with the SDK's default chain, here pointed at the emulator) starts,
// and logs the drain's bound beside drain.stop_timeout.
func TestAgentStartsFromTheDatabaseSecret(t *testing.T) {
	em := emulator.New(emulator.Options{})
	t.Cleanup(func() { _ = em.Close() })
	base, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	for k, v := range map[string]string{"AWS_ENDPOINT_URL": base, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
		t.Setenv(k, v)
	}
	dbURL := pgtest.URL(t)
	em.PutSecret("tether/database", dbURL)

	cfg := testConfig(t, "", "from-secret")
	cfg.DatabaseSecret = "tether/database"
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	addr, _ := startAgent(t, cfg, slog.New(slog.NewTextHandler(logFile, nil)))
	assert.NotEmpty(t, addr)
	assert.Equal(t, dbURL, cfg.DatabaseURL)
	logs, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.Contains(t, string(logs), `msg="drain fits the stop timeout" agent=from-secret stop_timeout=2m0s drain_max=1m57s shutdown_timeout=1m40s stop_bound=12s http_shutdown_grace=5s`)
}
