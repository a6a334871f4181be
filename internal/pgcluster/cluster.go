// Package pgcluster starts and stops a private PostgreSQL cluster from the
// installed server binaries: a throwaway one for tests, or a persistent one
// for `tether dev`.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Options configures Start.
type Options struct {
	// DataDir holds the cluster. Empty means a fresh temporary directory.
	// It must then not be Persistent.
	DataDir string
	// Persistent reuses an initialized DataDir (and a server already running
	// from it) and keeps the directory on Stop.
	Persistent bool
	// Port to listen on at 127.0.0.1. 0 picks a free one, kept for the
	// cluster's lifetime so StopServer/StartServer keep the same URL.
	Port int
	// Fast trades durability for speed (fsync, synchronous_commit and
	// full_page_writes off, wal_level=minimal): for tests, never for data
	// you want to keep. With Replication, synchronous_commit stays on and
	// wal_level replica.
	Fast bool
	// Replication lets the cluster serve streaming standbys (StartStandby):
	// wal_level=replica, max_wal_senders, hot_standby on and a trusted
	// replication line for 127.0.0.1 in pg_hba.conf. It overrides what
	// Fast would set against it. wal_level=minimal carries no WAL for a
	// standby and requires max_wal_senders=0, and synchronous_commit=off
	// would not wait for a synchronous standby (PostgreSQL 15 docs,
	// wal_level and synchronous_commit). fsync stays off under Fast.
	Replication bool
	// MaxConnections is the server's max_connections. 0 means 300, enough
	// for tests running several agents with their own pools.
	MaxConnections int
	// Settings are more server settings (name=value), passed as -c flags
	// after the others: e.g. shared_preload_libraries=pg_stat_statements
	// for a benchmark that reads statement statistics.
	Settings []string
	// BinDir, when set, holds initdb and postgres. Otherwise they are found
	// on PATH or under /usr/lib/postgresql/<highest version>/bin.
	BinDir string
	// Logger receives the server's log lines at debug level. Nil discards them.
	Logger *slog.Logger
}

// Cluster is a PostgreSQL cluster this process started or adopted.
type Cluster struct {
	opts    Options
	logger  *slog.Logger
	bin     binaries
	user    *serverUser // nil unless running as root
	dataDir string
	tmpBase string   // temporary parent removed on Stop; "" for a given DataDir
	lock    *os.File // held while a temporary cluster lives; see sweepStale

	mu     sync.Mutex
	port   int     // fixed after the first successful start
	srv    *server // nil while stopped
	frozen []int   // pids Freeze stopped, postmaster first; nil unless frozen

	// As a primary, it has standbys started from it, and the names of
	// the synchronous ones, in synchronous_standby_names.
	standbys  int
	syncNames []string
	// As a standby (StartStandby), until promoted.
	standbyOf   *Cluster
	standbyName string // its application_name
	syncStandby bool
}

// server is one postmaster: a child process, or an adopted one (cmd nil).
type server struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed when the child exited (children only)
	err  error         // the child's exit status, valid after done
	log  *logTail
}

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
	superuser    = "postgres"
)

// Start initializes the data directory if needed and starts the server. The
// context bounds start-up only. The server runs until Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bin, err := findBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	su, err := lookupServerUser()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, logger: logger, bin: bin, user: su, port: opts.Port}
	if err := c.prepareDir(); err != nil {
		c.release()
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		if ok, err := c.adopt(ctx); err != nil || ok {
			return c, err
		}
	} else if err := c.initdb(ctx); err != nil {
		c.release()
		return nil, err
	}
	if opts.Replication {
		if err := ensureReplicationHBA(c.dataDir); err != nil {
			c.release()
			return nil, err
		}
	}
	if err := c.StartServer(ctx); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Port is the TCP port on 127.0.0.1.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// URL is a connection URL for database dbname as the superuser.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.Port(), url.PathEscape(dbname))
}

// Running reports whether the server is up (as far as this process knows).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv != nil
}

// Stop shuts the server down (fast: clients are disconnected) and removes the
// data directory unless the cluster is persistent.
func (c *Cluster) Stop(ctx context.Context) error {
	err := c.StopServer(ctx)
	c.release()
	return err
}

// StopServer shuts the server down (fast shutdown) but keeps the data
// directory and port, so StartServer brings the same data back: a database
// outage.
func (c *Cluster) StopServer(ctx context.Context) error {
	return c.stopServer(ctx, syscall.SIGINT)
}

// StopServerImmediate is StopServer without a clean shutdown. The server
// exits at once and recovers from its WAL on the next start, like a crash.
func (c *Cluster) StopServerImmediate(ctx context.Context) error {
	return c.stopServer(ctx, syscall.SIGQUIT)
}

// Restart is StopServer followed by StartServer.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.StopServer(ctx); err != nil {
		return err
	}
	return c.StartServer(ctx)
}

// StartServer starts the server on the cluster's port. It is a no-op while
// the server is running.
func (c *Cluster) StartServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	pickPort := c.port == 0
	for attempt := 1; ; attempt++ {
		port := c.port
		if pickPort {
			p, err := freePort()
			if err != nil {
				return err
			}
			port = p
		}
		srv, err := c.spawn(port)
		if err != nil {
			return err
		}
		err = c.waitReady(ctx, srv, port)
		if err == nil {
			c.srv, c.port = srv, port
			c.logger.Info("postgres started", "data_dir", c.dataDir, "port", port, "pid", srv.pid)
			return nil
		}
		// Another process may take the free port between our probe and
		// the server's bind. Pick another.
		if pickPort && attempt < 5 && strings.Contains(srv.log.String(), "could not bind") {
			continue
		}
		return err
	}
}

func (c *Cluster) stopServer(ctx context.Context, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	srv := c.srv
	if srv == nil {
		return nil
	}
	if c.frozen != nil {
		// The stop signal first, so the postmaster starts shutting down as
		// soon as it runs again. Statements waiting in the backends'
		// sockets may still run before their backend is told to exit.
		if err := signal(srv, sig); err != nil {
			return fmt.Errorf("stopping frozen postgres (pid %d, data %s): %w", srv.pid, c.dataDir, err)
		}
		c.thawLocked()
		// signalAndWait sends it again. A postmaster already shutting
		// down ignores a second request of the same kind.
	}
	if err := c.signalAndWait(ctx, srv, sig); err != nil {
		return fmt.Errorf("stopping postgres (pid %d, data %s): %w", srv.pid, c.dataDir, err)
	}
	c.srv = nil
	c.logger.Info("postgres stopped", "data_dir", c.dataDir, "port", c.port)
	return nil
}

// signalAndWait sends sig and waits for the postmaster to exit, escalating to
// SIGKILL when ctx ends or stopTimeout passes.
func (c *Cluster) signalAndWait(ctx context.Context, srv *server, sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if srv.cmd != nil {
		select {
		case <-srv.done:
			return nil // already gone (it crashed, or someone else stopped it)
		default:
		}
	}
	if err := signal(srv, sig); err != nil {
		return err
	}
	if srv.cmd != nil {
		select {
		case <-srv.done:
			return nil
		case <-ctx.Done():
			_ = srv.cmd.Process.Kill()
			<-srv.done
			return fmt.Errorf("killed after waiting: %w", ctx.Err())
		}
	}
	// Adopted server. It is not our child, so poll until it is gone.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for processAlive(srv.pid) {
		select {
		case <-t.C:
		case <-ctx.Done():
			_ = syscall.Kill(srv.pid, syscall.SIGKILL)
			return fmt.Errorf("killed after waiting: %w", ctx.Err())
		}
	}
	return nil
}

// signal sends sig to the postmaster. One already gone is not an error.
func signal(srv *server, sig syscall.Signal) error {
	if err := syscall.Kill(srv.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling: %w", err)
	}
	return nil
}

// release drops the directory lock and removes what is not persistent.
func (c *Cluster) release() {
	if c.lock != nil {
		_ = c.lock.Close()
		c.lock = nil
	}
	if c.opts.Persistent {
		return
	}
	dir := c.tmpBase
	if dir == "" {
		dir = c.dataDir
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			c.logger.Warn("removing postgres data directory", "dir", dir, "error", err)
		}
	}
}

// prepareDir creates the data directory, owned by the server user.
func (c *Cluster) prepareDir() error {
	if c.opts.DataDir == "" {
		if c.opts.Persistent {
			return errors.New("a persistent cluster needs a DataDir")
		}
		sweepStale(c.logger)
		base, err := os.MkdirTemp("", tmpPrefix+"*")
		if err != nil {
			return fmt.Errorf("creating a directory for postgres: %w", err)
		}
		c.tmpBase = base
		if c.lock, err = lockTmpBase(base); err != nil {
			return err
		}
		c.dataDir = filepath.Join(base, "data")
		if err := os.Mkdir(c.dataDir, 0o700); err != nil {
			return fmt.Errorf("creating postgres data directory: %w", err)
		}
		if err := c.user.chown(base); err != nil {
			return err
		}
		return c.user.chown(c.dataDir)
	}
	dir, err := filepath.Abs(c.opts.DataDir)
	if err != nil {
		return fmt.Errorf("postgres data directory %q: %w", c.opts.DataDir, err)
	}
	c.dataDir = dir
	if !c.opts.Persistent {
		// Stop deletes a throwaway cluster's directory: never one with data in it.
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			c.dataDir = "" // not ours to remove
			return fmt.Errorf("refusing to start a throwaway cluster in non-empty %s (it is deleted on Stop)", dir)
		}
	}
	if err := c.mkdirAll(dir); err != nil {
		return err
	}
	if c.user == nil {
		return nil
	}
	if err := c.checkReachable(dir); err != nil {
		return err
	}
	if fi, err := os.Stat(dir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != c.user.uid {
			// Only an empty directory is handed over. An initialized one
			// belongs to whoever initialized it.
			if entries, _ := os.ReadDir(dir); len(entries) == 0 {
				return c.user.chown(dir)
			}
		}
	}
	return nil
}

// mkdirAll creates dir and its missing parents, handing the ones it creates
// to the server user.
func (c *Cluster) mkdirAll(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		mode := os.FileMode(0o755)
		if i == 0 {
			mode = 0o700 // postgres insists on a private data directory
		}
		if err := os.Mkdir(missing[i], mode); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating postgres data directory: %w", err)
		}
		if err := c.user.chown(missing[i]); err != nil {
			return err
		}
	}
	return nil
}

// checkReachable explains, before initdb does obscurely, that the postgres
// user cannot enter a parent of the data directory (e.g. a root-owned 0700
// home directory). Parents we did not create are not ours to change.
func (c *Cluster) checkReachable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("checking postgres data directory parent %s: %w", d, err)
		}
		if !c.user.canSearch(fi) {
			return fmt.Errorf("postgres runs as the postgres user (initdb refuses root), and that user cannot "+
				"enter %s (mode %v) to reach the data directory %s: choose a data directory outside it, "+
				"allow it with `chmod o+x %s`, or set DATABASE_URL", d, fi.Mode().Perm(), dir, d)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	// The server user may not be able to enter our working directory.
	cmd.Dir = filepath.Dir(c.dataDir)
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.user.credential(),
		// Own process group. A Ctrl-C meant for tether must not shut the
		// database down under it.
		Setpgid: true,
	}
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	args := []string{"-D", c.dataDir, "-U", superuser, "--auth=trust", "--encoding=UTF8", "--locale=C"}
	if c.opts.Fast {
		args = append(args, "--no-sync")
	}
	cmd := c.command(c.bin.initdb, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	c.logger.Debug("initdb", "data_dir", c.dataDir)
	if err := runContext(ctx, cmd); err != nil {
		return fmt.Errorf("initializing postgres data directory %s with %s: %w\n%s",
			c.dataDir, c.bin.initdb, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// runContext runs cmd, killing it if ctx ends.
func runContext(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

func (c *Cluster) spawn(port int) (*server, error) {
	settings := []string{
		"listen_addresses=127.0.0.1",
		"port=" + strconv.Itoa(port),
		"unix_socket_directories=" + socketDirSetting(c.dataDir),
		"max_connections=" + strconv.Itoa(orDefault(c.opts.MaxConnections, 300)),
		"logging_collector=off",
	}
	switch {
	case c.opts.Fast && c.opts.Replication:
		// synchronous_commit left at on. With fsync off it costs a write,
		// and it is what makes a synchronous standby synchronous.
		settings = append(settings, "fsync=off", "full_page_writes=off", "shared_buffers=32MB")
	case c.opts.Fast:
		settings = append(settings,
			"fsync=off", "synchronous_commit=off", "full_page_writes=off",
			"wal_level=minimal", "max_wal_senders=0", "shared_buffers=32MB")
	}
	if c.opts.Replication {
		// wal_keep_size lets a standby stopped for a while catch up
		// without a replication slot (PostgreSQL 15 docs, wal_keep_size).
		settings = append(settings,
			"wal_level=replica", "max_wal_senders=10", "hot_standby=on", "wal_keep_size=128MB")
	}
	settings = append(settings, c.opts.Settings...)
	args := []string{"-D", c.dataDir}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	cmd := c.command(c.bin.postgres, args...)
	if !c.opts.Persistent {
		// If this process dies without Stop, a throwaway server shuts down
		// instead of lingering.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	}
	tail := newLogTail(c.logger)
	cmd.Stdout, cmd.Stderr = tail, tail
	// Server children inherit the log pipe. Do not wait on them forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", c.bin.postgres, err)
	}
	srv := &server{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), log: tail}
	go func() {
		srv.err = cmd.Wait()
		close(srv.done)
	}()
	return srv, nil
}

func (c *Cluster) waitReady(ctx context.Context, srv *server, port int) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var lastErr error
	for {
		select {
		case <-srv.done:
			return fmt.Errorf("postgres (data %s, port %d) exited during start-up: %v\n%s",
				c.dataDir, port, srv.err, srv.log.String())
		case <-ctx.Done():
			_ = c.signalAndWait(context.WithoutCancel(ctx), srv, syscall.SIGQUIT)
			return fmt.Errorf("postgres (data %s, port %d) not ready: %w (last: %v)\n%s",
				c.dataDir, port, ctx.Err(), lastErr, srv.log.String())
		case <-t.C:
		}
		if lastErr = ping(ctx, port); lastErr == nil {
			return nil
		}
		t.Reset(20 * time.Millisecond)
	}
}

func ping(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, port))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// adopt reuses a server already running from a persistent data directory
// (e.g. left by a `tether dev` that was killed). It returns false when there
// is none to adopt, and the caller starts one.
func (c *Cluster) adopt(ctx context.Context) (bool, error) {
	if !c.opts.Persistent {
		return false, fmt.Errorf("%s already holds a cluster; only a persistent cluster reuses one", c.dataDir)
	}
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return false, nil
	}
	// postmaster.pid: line 1 pid, line 4 port.
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return false, nil
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || !processAlive(pid) {
		return false, nil // stale: postgres removes it on start
	}
	if err := ping(ctx, port); err != nil {
		return false, fmt.Errorf("a postgres server (pid %d) is running from %s but does not answer on 127.0.0.1:%d (%v): "+
			"stop it, e.g. `kill -INT %d`, and start again", pid, c.dataDir, port, err, pid)
	}
	c.mu.Lock()
	c.srv, c.port = &server{pid: pid, log: newLogTail(c.logger)}, port
	c.mu.Unlock()
	c.logger.Info("reusing running postgres", "data_dir", c.dataDir, "port", port, "pid", pid)
	return true, nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for postgres: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// socketDirSetting puts the unix socket in the data directory, unless its path
// would exceed the kernel's limit for socket paths. TCP is what we use anyway.
func socketDirSetting(dataDir string) string {
	if len(dataDir)+len("/.s.PGSQL.65535") >= 100 || strings.ContainsAny(dataDir, `",`) {
		return ""
	}
	return `"` + dataDir + `"`
}

// serverEnv is our environment without PG* variables, which would redirect
// initdb and postgres elsewhere.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// logTail forwards the server's output to the logger and keeps the last lines
// for error messages.
type logTail struct {
	logger  *slog.Logger
	mu      sync.Mutex
	partial []byte
	lines   []string
}

const tailLines = 40

func newLogTail(logger *slog.Logger) *logTail { return &logTail{logger: logger} }

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	consumed := 0
	for {
		i := bytes.IndexByte(l.partial[consumed:], '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[consumed : consumed+i])
		consumed += i + 1
		l.logger.Debug(line, "component", "postgres")
		l.lines = append(l.lines, line)
		if len(l.lines) > tailLines {
			l.lines = l.lines[1:]
		}
	}
	l.partial = append(l.partial[:0], l.partial[consumed:]...)
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(append(append([]string(nil), l.lines...), string(l.partial)), "\n")
}
