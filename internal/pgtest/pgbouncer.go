package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgbouncerReady bounds PgBouncer's start-up.
const pgbouncerReady = 30 * time.Second

// PgBouncer starts Debian's pgbouncer in front of the server dbURL points at,
// in pool mode mode ("transaction", "session" or "statement"), and returns
// dbURL rewritten to go through it. It is stopped when the test ends. A
// missing pgbouncer fails the test. It is part of what the tests need.
func PgBouncer(t testing.TB, dbURL, mode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		// Debian installs it in /usr/sbin, which a user's PATH may lack.
		bin = "/usr/sbin/pgbouncer"
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("pgtest: pgbouncer not found on PATH or in /usr/sbin: install it with `apt-get install pgbouncer` (.ci/run does)")
		}
	}
	pc, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parsing %s: %v", redact(dbURL), err)
	}
	port, err := freeTCPPort()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir := t.TempDir()
	users := filepath.Join(dir, "users.txt")
	ini := filepath.Join(dir, "pgbouncer.ini")
	// Server address and credentials come from dbURL. Clients are trusted
	// (the tests' servers trust them too), and the server login uses the
	// password from the auth file.
	if err := os.WriteFile(users, []byte(fmt.Sprintf("%s %s\n", iniQuote(pc.User), iniQuote(pc.Password))), 0o600); err != nil {
		t.Fatalf("pgtest: writing pgbouncer auth file: %v", err)
	}
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 500
default_pool_size = 50
ignore_startup_parameters = extra_float_digits
`, pc.Host, pc.Port, port, users, mode)
	if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
		t.Fatalf("pgtest: writing pgbouncer.ini: %v", err)
	}
	args := []string{ini}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root. -u drops to nobody after it
		// has read its files.
		args = []string{"-u", "nobody", ini}
	}
	cmd := exec.Command(bin, args...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, and gone with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // fast exit
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pgbouncer output:\n%s", out.String())
		}
	})
	through := withHostPort(t, dbURL, "127.0.0.1", port)
	ctx, cancel := context.WithTimeout(context.Background(), pgbouncerReady)
	defer cancel()
	if err := waitPgBouncer(ctx, through, exited); err != nil {
		t.Fatalf("pgtest: pgbouncer did not come up: %v\n%s", err, out.String())
	}
	return through
}

// waitPgBouncer waits until a query through it answers (it connects to the
// server lazily, so this also proves the server side works).
func waitPgBouncer(ctx context.Context, through string, exited <-chan error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, through)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case werr := <-exited:
			return fmt.Errorf("pgbouncer exited: %v", werr)
		case <-tick.C:
		}
	}
}

// withHostPort returns connection string u pointing at host:port.
func withHostPort(t testing.TB, u, host string, port int) string {
	t.Helper()
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("pgtest: parsing %s: %v", redact(u), err)
		}
		pu.Host = net.JoinHostPort(host, strconv.Itoa(port))
		return pu.String()
	}
	// keyword=value form. A later keyword overrides an earlier one.
	return fmt.Sprintf("%s host=%s port=%d", u, host, port)
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for pgbouncer: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// iniQuote quotes s for pgbouncer's auth file.
func iniQuote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WithQueryParam returns the postgres:// URL u with the query parameter key
// set to value (e.g. default_query_exec_mode=exec for a transaction pooler).
func WithQueryParam(t testing.TB, u, key, value string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parsing database URL: %v", err)
	}
	q := pu.Query()
	q.Set(key, value)
	pu.RawQuery = q.Encode()
	return pu.String()
}
