package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
)

func TestPoolConfigConnectTimeout(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want time.Duration
	}{
		{"postgres://u:p@db.example:5432/tether", 7 * time.Second},                   // database_connect_timeout
		{"postgres://u:p@db.example:5432/tether?connect_timeout=3", 3 * time.Second}, // the URL wins
		{"host=db.example user=u password=p dbname=tether", 7 * time.Second},
		{"host=db.example connect_timeout=2 dbname=tether", 2 * time.Second},
	} {
		t.Run(tc.url, func(t *testing.T) {
			cfg := config.Default()
			cfg.DatabaseURL = tc.url
			cfg.DatabaseConnectTimeout = config.Duration(7 * time.Second)
			pc, err := PoolConfig(cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.want, pc.ConnConfig.ConnectTimeout)
		})
	}
}

func TestPoolConfigParseErrorHidesTheURL(t *testing.T) {
	cfg := config.Default()
	cfg.DatabaseURL = "postgres://u:s3cr%t-pw@db.example:5432/tether" // a bad percent escape
	_, err := PoolConfig(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "database_url: cannot be parsed")
	assert.NotContains(t, err.Error(), "s3cr")
}

func TestConnectErrorNamesHostNotPassword(t *testing.T) {
	const url = "postgres://u:pw-secret@db.example:6543/tether"
	cfg := config.Default()
	cfg.DatabaseURL = url
	pc, err := PoolConfig(cfg)
	require.NoError(t, err)
	cause := fmt.Errorf("failed to connect: %w", context.DeadlineExceeded)

	msg := ConnectError(pc.ConnConfig, url, cause).Error()
	assert.Contains(t, msg, "connecting to the database at db.example:6543")
	assert.Contains(t, msg, "timed out after 10s")
	assert.NotContains(t, msg, "pw-secret")

	other := ConnectError(pc.ConnConfig, url, errors.New("connection refused")).Error()
	assert.Contains(t, other, "connecting to the database at db.example:6543")
	assert.NotContains(t, other, "timed out")
	assert.NotContains(t, other, "pw-secret")

	socket, err := PoolConfig(&config.Config{DatabaseURL: "host=/var/run/postgresql dbname=tether"})
	require.NoError(t, err)
	assert.Contains(t, ConnectError(socket.ConnConfig, "", cause).Error(), "at /var/run/postgresql (")
}
