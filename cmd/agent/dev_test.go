package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

func TestCheckDevListen(t *testing.T) {
	for _, tc := range []struct {
		listen string
		tokens int
		ok     bool
	}{
		{"127.0.0.1:9090", 0, true},
		{"127.0.0.2:9090", 0, true}, // all of 127/8 is loopback
		{"[::1]:9090", 0, true},
		{"localhost:9090", 0, true},
		{"0.0.0.0:9090", 0, false},
		{":9090", 0, false}, // every interface
		{"[::]:9090", 0, false},
		{"192.168.1.10:9090", 0, false},
		{"myhost.example:9090", 0, false}, // a name may resolve anywhere
		{"0.0.0.0:9090", 1, true},         // with tokens, auth guards it
		{"9090", 0, false},                // not host:port
	} {
		t.Run(tc.listen, func(t *testing.T) {
			err := checkDevListen(tc.listen, tc.tokens)
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "--listen")
			assert.Contains(t, err.Error(), tc.listen)
		})
	}
}

// `tether dev` refuses to serve its unauthenticated API beyond this
// machine, before it starts anything.
func TestDevRefusesNonLoopbackWithoutTokens(t *testing.T) {
	var stdout, stderr syncBuf
	code := run(context.Background(), []string{"dev", "--listen", "0.0.0.0:0", "--no-demo"}, &stdout, &stderr, func(string) string { return "" })
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), `--listen "0.0.0.0:0": tether dev serves its API without auth, so it listens only on a loopback address`)
	assert.Contains(t, stderr.String(), "http.tokens")
	assert.NotContains(t, stderr.String(), "starting a private PostgreSQL")
}

// On loopback, `tether dev` says at start that auth is off and who can
// reach it.
func TestDevSaysAuthIsOff(t *testing.T) {
	env := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--listen", "127.0.0.1:0", "--no-demo", "--log-level", "warn"}, &stdout, &stderr, func(k string) string { return env[k] })
	}()
	require.Eventually(t, func() bool {
		select {
		case code := <-done:
			done <- code
			return true
		default:
		}
		return strings.Contains(stdout.String(), "tether is serving at")
	}, 60*time.Second, 50*time.Millisecond)
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("tether dev did not stop")
	}
	assert.Contains(t, stderr.String(), "API auth is OFF (no http.tokens): it listens on 127.0.0.1:0, reachable only from this machine")
}
