package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store/migrate"
	"github.com/tetherjobs/tether/pkg/api"
)

// lines is an io.Writer handing each JSON log line to a channel (dropped
// when the test stopped reading and the buffer is full).
type lines chan map[string]any

func (l lines) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			select {
			case l <- rec:
			default:
			}
		}
	}
	return len(p), nil
}

// waitLog returns the first record whose message starts with prefix.
func waitLog(t *testing.T, l lines, prefix string, runErr <-chan error) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case rec := <-l:
			if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, prefix) {
				return rec
			}
		case err := <-runErr:
			t.Fatalf("agent stopped: %v", err)
		case <-timeout:
			t.Fatalf("no log line %q", prefix)
		}
	}
}

func getStatus(t *testing.T, url string) (int, api.Status) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var st api.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return resp.StatusCode, st
}

// First boot on ECS: another session holds the migration lock. The agent
// answers /healthz at once (the container health check must not replace
// it), /readyz 503 "migrating" naming the holder, logs who holds the lock
// at once, and is ready once the holder lets go.
func TestHealthyAndSaysWhoMigratesWhileTheLockIsHeld(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cc.RuntimeParams["application_name"] = "tether migrate (test)"
	holder, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrate.LockKey)
	require.NoError(t, err)

	logs := make(lines, 1000)
	log := slog.New(slog.NewJSONHandler(logs, nil))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	listening, started := make(chan string, 1), make(chan string, 1)
	runErr := make(chan error, 1)
	go func() {
		runErr <- Run(runCtx, testConfig(t, url, "first-boot"), log, Options{
			Listening: func(a string) { listening <- a }, Started: func(a string) { started <- a },
		})
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-runErr:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not open its HTTP port")
	}
	code, st := getStatus(t, "http://"+addr+"/healthz")
	assert.Equal(t, http.StatusOK, code, "healthz answers from the start")
	assert.Equal(t, "ok", st.Status)

	rec := waitLog(t, logs, "waiting for the migration lock", runErr)
	assert.Equal(t, float64(holder.PgConn().PID()), rec["holder_pid"], "the log names the holder: %v", rec)
	assert.Equal(t, "tether migrate (test)", rec["holder_application"])

	code, st = getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "migrating", st.Status)
	assert.Contains(t, st.Error, "held by pid")
	if assert.NotNil(t, st.MigrationLock) {
		assert.Equal(t, int(holder.PgConn().PID()), st.MigrationLock.PID)
		assert.Equal(t, "tether migrate (test)", st.MigrationLock.ApplicationName)
	}
	code, _ = getStatus(t, "http://"+addr+"/healthz")
	assert.Equal(t, http.StatusOK, code, "still healthy while it waits")
	select {
	case <-started:
		t.Fatal("the API started while the migration lock was held")
	default:
	}

	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrate.LockKey)
	require.NoError(t, err)
	select {
	case a := <-started:
		assert.Equal(t, addr, a, "the same port serves the API")
	case err := <-runErr:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not start once the lock was released")
	}
	waitLog(t, logs, "took the migration lock", runErr)
	code, st = getStatus(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusOK, code, "%+v", st)
	assert.Equal(t, "ready", st.Status)
	stop()
	require.NoError(t, <-runErr)
}
