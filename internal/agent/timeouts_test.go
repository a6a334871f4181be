package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// closeBound is how long a test waits for the server to close a connection
// whose 1s timeout ran out. It is generous, so the tests are not about exact
// timing, yet far below "held forever".
const closeBound = 10 * time.Second

// The API server cuts slow and idle clients (http.read_header_timeout,
// read_timeout, idle_timeout), while a followed log stream outlives
// write_timeout and read_timeout. It lasts as long as its job.
func TestServerTimeouts(t *testing.T) {
	url := pgtest.URL(t)
	cfg := testConfig(t, url, "timeouts")
	cfg.HTTP.ReadHeaderTimeout = config.Duration(time.Second)
	cfg.HTTP.ReadTimeout = config.Duration(time.Second)
	cfg.HTTP.WriteTimeout = config.Duration(time.Second)
	cfg.HTTP.IdleTimeout = config.Duration(time.Second)
	require.NoError(t, cfg.Validate())

	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.DiscardHandler), Options{Started: func(a string) { started <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	var addr string
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not start")
	}

	t.Run("slow body is cut", func(t *testing.T) {
		conn := dial(t, addr)
		// 1000 bytes announced, one sent per second. Without read_timeout the
		// server would wait about 17 minutes for them.
		_, err := fmt.Fprintf(conn, "POST /api/v1/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", addr)
		require.NoError(t, err)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		assertClosedWithin(t, conn, bufio.NewReader(conn), closeBound)
	})

	t.Run("slow headers are cut", func(t *testing.T) {
		conn := dial(t, addr)
		_, err := fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n", addr) // and never the blank line
		require.NoError(t, err)
		assertClosedWithin(t, conn, bufio.NewReader(conn), closeBound)
	})

	t.Run("idle keep-alive connection is closed", func(t *testing.T) {
		conn := dial(t, addr)
		_, err := fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.False(t, resp.Close, "the server keeps the connection alive after the answer")
		assertClosedWithin(t, conn, br, closeBound)
	})

	t.Run("followed log outlives write and read timeouts", func(t *testing.T) {
		pool, err := pgxpool.New(ctx, url) // the agent's database
		require.NoError(t, err)
		defer pool.Close()
		// No agent serves this command. The job stays queued and its log
		// stream open.
		job, _, err := store.New(pool).Submit(ctx, store.SubmitParams{Command: "unserved", Plugin: "none"})
		require.NoError(t, err)
		addLine := func(line string) {
			_, err := pool.Exec(ctx, "INSERT INTO job_logs (job_id, stream, data) VALUES ($1, 'stdout', $2)", job.ID, []byte(line+"\n"))
			require.NoError(t, err)
		}
		addLine("before")

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/jobs/"+job.ID+"/logs?follow=true", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		assert.Equal(t, "before", <-lines)

		// Past both deadlines, the stream still delivers.
		select {
		case l, ok := <-lines:
			t.Fatalf("stream sent %q (open %v) before any new line", l, ok)
		case <-time.After(2500 * time.Millisecond):
		}
		addLine("after the deadlines")
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the stream ended: a server timeout cut it")
			assert.Equal(t, "after the deadlines", l)
		case <-time.After(closeBound):
			t.Fatal("no line within the bound")
		}
	})
}

// dial opens a raw connection to the API, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// assertClosedWithin reads until the server closes the connection (any
// answer it sends first is read and dropped) and fails if that takes longer
// than bound.
func assertClosedWithin(t *testing.T, conn net.Conn, r io.Reader, bound time.Duration) {
	t.Helper()
	began := time.Now()
	require.NoError(t, conn.SetReadDeadline(began.Add(bound)))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still held the connection after %s", bound)
	}
	// A clean close (EOF) or a reset (unread bytes were pending). Either way
	// the server let go.
	t.Logf("server closed the connection after %s (%v)", time.Since(began).Round(time.Millisecond), err)
}
