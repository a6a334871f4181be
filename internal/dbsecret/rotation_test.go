package dbsecret

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// A rotation against real PostgreSQL with password authentication: the
// role's password changes and the secret gets the new value. A connection
// already open goes on working; a new one uses the copy of the secret until
// it is older than the refresh (and is refused meanwhile), then reads the
// secret again and connects; with Secrets Manager gone it keeps the last
// value read.
func TestRotationReachesNewConnections(t *testing.T) {
	ctx := context.Background()
	cluster, superURL := pgtest.StartCluster(t)
	requirePasswordAuth(t, cluster.DataDir(), superURL, "rotor", "first")

	em, sm := secretsManager(t)
	_, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("db"), SecretString: aws.String(`{"username":"rotor","password":"first"}`)})
	require.NoError(t, err)

	dbURL := fmt.Sprintf("postgres://127.0.0.1:%d/tether?sslmode=disable", cluster.Port())
	src, err := NewSource(ctx, sm, "db", dbURL, time.Minute, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	clock := time.Now()
	src.now = func() time.Time { return clock }
	connect := func() (*pgx.Conn, error) {
		cc, err := pgx.ParseConfig(dbURL)
		require.NoError(t, err)
		require.NoError(t, src.BeforeConnect(ctx, cc))
		return pgx.ConnectConfig(ctx, cc)
	}
	held, err := connect()
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Close(ctx) })

	super, err := pgx.Connect(ctx, superURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = super.Close(ctx) })
	_, err = super.Exec(ctx, "ALTER ROLE rotor PASSWORD 'second'")
	require.NoError(t, err)
	_, err = sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String("db"), SecretString: aws.String(`{"username":"rotor","password":"second"}`)})
	require.NoError(t, err)

	var one int
	require.NoError(t, held.QueryRow(ctx, "SELECT 1").Scan(&one), "an open session outlives the password change")

	_, err = connect()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "within the refresh a new connection still uses the old password")
	assert.Equal(t, "28P01", pgErr.Code)

	clock = clock.Add(time.Minute)
	c, err := connect()
	require.NoError(t, err, "past the refresh the secret is read again")
	require.NoError(t, c.Close(ctx))

	require.NoError(t, em.Close())
	clock = clock.Add(time.Minute)
	c, err = connect()
	require.NoError(t, err, "Secrets Manager unreachable: the last value read is used")
	require.NoError(t, c.Close(ctx))
}

// requirePasswordAuth makes role log in with a SCRAM password over TCP (the
// test clusters trust everyone otherwise).
func requirePasswordAuth(t *testing.T, dataDir, superURL, role, password string) {
	t.Helper()
	ctx := context.Background()
	hba := filepath.Join(dataDir, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	require.NoError(t, err)
	rule := fmt.Sprintf("host all %s 127.0.0.1/32 scram-sha-256\n", role)
	require.NoError(t, os.WriteFile(hba, append([]byte(rule), old...), 0o600))
	super, err := pgx.Connect(ctx, superURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	_, err = super.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password))
	require.NoError(t, err)
	_, err = super.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	// The reload is asynchronous: wait until a wrong password is refused.
	wrong := fmt.Sprintf("postgres://%s:wrong@127.0.0.1:%s/tether?sslmode=disable", role, strconv.Itoa(int(super.Config().Port)))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := pgx.Connect(ctx, wrong)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "28P01" {
			return
		}
		if c != nil {
			_ = c.Close(ctx)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pg_hba.conf reload: a wrong password for %s is still accepted (last error: %v)", role, err)
		case <-tick.C:
		}
	}
}
