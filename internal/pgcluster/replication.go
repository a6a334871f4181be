package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions configures StartStandby.
type StandbyOptions struct {
	// Synchronous makes the primary wait at every commit until this standby
	// has flushed the commit's WAL: synchronous_commit=on waits for the
	// standbys synchronous_standby_names names (PostgreSQL 15 docs,
	// synchronous_commit). While the standby is stopped, commits on the
	// primary block. Otherwise the standby is asynchronous. The primary
	// never waits for it, and what it had not received is lost when it is
	// promoted.
	Synchronous bool
	// Name is the standby's application_name, by which pg_stat_replication
	// and synchronous_standby_names know it: letters, digits and
	// underscores. Empty means standby1, standby2, ... in the order the
	// primary's standbys were started.
	Name string
	// Settings are more server settings for the standby, after the
	// primary's Options.Settings.
	Settings []string
	// Port to listen on. 0 picks a free one. A test that replaces a dead
	// primary by a new standby on its port keeps a multi-host URL valid.
	Port int
}

const (
	backupTimeout = 2 * time.Minute
	pollInterval  = 20 * time.Millisecond
)

// StartStandby takes a base backup of the running primary c (started with
// Options.Replication) into a new temporary cluster and starts it on a port
// of its own as a hot standby streaming from c: readable, not writable. It
// returns once c's pg_stat_replication shows it streaming, and for a
// Synchronous one as sync. The standby is a Cluster like any other (URL,
// StopServer, StartServer, Freeze, Stop, which removes its directory) with
// the primary's options. Promote makes it a primary.
//
// The primary keeps waiting for a Synchronous standby that is stopped or
// removed, until it is started again or the primary is stopped.
func (c *Cluster) StartStandby(ctx context.Context, so StandbyOptions) (*Cluster, error) {
	if !c.opts.Replication {
		return nil, fmt.Errorf("starting a standby of %s: the primary was started without Options.Replication, "+
			"so it has no WAL for a standby", c.dataDir)
	}
	basebackup, err := c.bin.tool("pg_basebackup")
	if err != nil {
		return nil, fmt.Errorf("starting a standby of %s: %w", c.dataDir, err)
	}
	c.mu.Lock()
	running, port := c.srv != nil, c.port
	c.standbys++
	n := c.standbys
	c.mu.Unlock()
	if !running {
		return nil, fmt.Errorf("starting a standby of %s: the primary is not running", c.dataDir)
	}
	name := so.Name
	if name == "" {
		name = "standby" + strconv.Itoa(n)
	}
	if !validStandbyName(name) {
		return nil, fmt.Errorf("standby name %q: use letters, digits and underscores", name)
	}
	opts := c.opts
	opts.DataDir, opts.Persistent, opts.Port = "", false, so.Port
	opts.Settings = append(slices.Clone(c.opts.Settings), so.Settings...)
	s := &Cluster{
		opts: opts, logger: c.logger.With("standby", name), bin: c.bin, user: c.user, port: so.Port,
		standbyOf: c, standbyName: name, syncStandby: so.Synchronous,
	}
	if err := s.prepareDir(); err != nil {
		s.release()
		return nil, err
	}
	if err := s.baseBackup(ctx, basebackup, port); err != nil {
		s.release()
		return nil, err
	}
	if so.Synchronous {
		// Named before the standby starts. The primary's checkpointer then
		// has the standby's start-up time to load the setting, which gates
		// the commit waits (syncrep.c, sync_standbys_defined).
		if err := c.addSyncStandby(ctx, name); err != nil {
			s.release()
			return nil, err
		}
	}
	if err := s.StartServer(ctx); err == nil {
		err = s.WaitStreaming(ctx)
	}
	if err != nil {
		_ = s.Stop(context.WithoutCancel(ctx))
		if so.Synchronous {
			_ = c.removeSyncStandby(context.WithoutCancel(ctx), name)
		}
		return nil, err
	}
	return s, nil
}

func validStandbyName(name string) bool {
	for _, r := range name {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return name != ""
}

// baseBackup copies the primary listening on primaryPort into s's empty data
// directory, as the server user so the files are the server's.
func (s *Cluster) baseBackup(ctx context.Context, pgBasebackup string, primaryPort int) error {
	ctx, cancel := context.WithTimeout(ctx, backupTimeout)
	defer cancel()
	// -R "creates a standby.signal file and appends connection settings to
	// the postgresql.auto.conf file", taken from this connection, so
	// application_name reaches primary_conninfo. --checkpoint=fast, since a
	// spread checkpoint could take minutes. -X stream copies the WAL written
	// meanwhile (PostgreSQL 15 docs, pg_basebackup).
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", primaryPort, superuser, s.standbyName)
	args := []string{"-D", s.dataDir, "-d", conninfo, "-R", "-X", "stream", "--checkpoint=fast", "--no-password"}
	if s.opts.Fast {
		args = append(args, "--no-sync")
	}
	cmd := s.command(pgBasebackup, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	s.logger.Debug("pg_basebackup", "data_dir", s.dataDir, "primary_port", primaryPort)
	if err := runContext(ctx, cmd); err != nil {
		return fmt.Errorf("taking a base backup of 127.0.0.1:%d into %s with %s: %w\n%s",
			primaryPort, s.dataDir, pgBasebackup, err, strings.TrimSpace(out.String()))
	}
	// The primary's postgresql.auto.conf came along. Its
	// synchronous_standby_names would make this standby, once promoted,
	// wait at every commit for standbys it does not have.
	return dropSetting(filepath.Join(s.dataDir, "postgresql.auto.conf"), "synchronous_standby_names")
}

// dropSetting removes the lines setting name from a configuration file,
// keeping the file (and so its owner).
func dropSetting(path, name string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		key, _, _ := strings.Cut(line, "=")
		if strings.TrimSpace(key) != name {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(kept, "")), 0o600); err != nil {
		return fmt.Errorf("rewriting %s: %w", path, err)
	}
	return nil
}

func (c *Cluster) addSyncStandby(ctx context.Context, name string) error {
	c.mu.Lock()
	c.syncNames = append(c.syncNames, name)
	names := slices.Clone(c.syncNames)
	c.mu.Unlock()
	return c.setSyncStandbys(ctx, names)
}

func (c *Cluster) removeSyncStandby(ctx context.Context, name string) error {
	c.mu.Lock()
	c.syncNames = slices.DeleteFunc(c.syncNames, func(n string) bool { return n == name })
	names := slices.Clone(c.syncNames)
	c.mu.Unlock()
	return c.setSyncStandbys(ctx, names)
}

// setSyncStandbys makes every standby in names synchronous. "FIRST n (...)"
// waits for n standbys from the list (PostgreSQL 15 docs,
// synchronous_standby_names), so with n = len(names) for all of them.
// ALTER SYSTEM writes postgresql.auto.conf. pg_reload_conf makes the server
// read it.
func (c *Cluster) setSyncStandbys(ctx context.Context, names []string) error {
	stmt := "ALTER SYSTEM RESET synchronous_standby_names"
	if len(names) > 0 {
		// Names are validated: letters, digits and underscores.
		stmt = fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = 'FIRST %d ("%s")'`,
			len(names), strings.Join(names, `", "`))
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("setting synchronous standbys %v on %s: %w", names, c.dataDir, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("setting synchronous standbys %v on %s: %w", names, c.dataDir, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reloading configuration of %s: %w", c.dataDir, err)
	}
	return nil
}

// WaitStreaming waits until the primary that standby c was started from lists
// it in pg_stat_replication with state "streaming", and with sync_state
// "sync" for a Synchronous standby or "async" otherwise (PostgreSQL 15 docs,
// pg_stat_replication). After StartServer of a stopped standby, this says it
// has reconnected.
func (c *Cluster) WaitStreaming(ctx context.Context) error {
	c.mu.Lock()
	primary, name, sync := c.standbyOf, c.standbyName, c.syncStandby
	c.mu.Unlock()
	if primary == nil {
		return fmt.Errorf("waiting for %s to stream: not a standby (or promoted)", c.dataDir)
	}
	want := "async"
	if sync {
		want = "sync"
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	err := poll(ctx, pollInterval, func(ctx context.Context) (bool, error) {
		var ok bool
		var seen string
		err := queryRow(ctx, primary.URL("postgres"),
			`SELECT coalesce(bool_or(state = 'streaming' AND sync_state = $2), false),
			        coalesce(string_agg(state || '/' || sync_state, ', '), 'absent')
			   FROM pg_stat_replication WHERE application_name = $1`,
			[]any{name, want}, &ok, &seen)
		if err != nil {
			return false, err
		}
		return ok, fmt.Errorf("pg_stat_replication has %s as %s", name, seen)
	})
	if err != nil {
		return fmt.Errorf("waiting for standby %s (port %d) to be streaming/%s from %s: %w",
			name, c.Port(), want, primary.dataDir, err)
	}
	return nil
}

// Promote makes standby c a primary and waits until it accepts writes.
// pg_promote(wait => true) "waits until promotion is completed ... and returns
// true if promotion is successful" (PostgreSQL 15 docs, Recovery Control
// Functions). A new session then checks pg_is_in_recovery() is false. The
// promoted server starts a new timeline from the end of the WAL it had. What
// it had not received from its primary is not in its history.
func (c *Cluster) Promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	u := c.URL("postgres")
	var promoted bool
	if err := queryRow(ctx, u, "SELECT pg_promote(true, $1)", []any{int(startTimeout / time.Second)}, &promoted); err != nil {
		return fmt.Errorf("promoting standby %s: %w", c.dataDir, err)
	}
	if !promoted {
		return fmt.Errorf("promoting standby %s: pg_promote did not complete within %s", c.dataDir, startTimeout)
	}
	err := poll(ctx, pollInterval, func(ctx context.Context) (bool, error) {
		var inRecovery bool
		if err := queryRow(ctx, u, "SELECT pg_is_in_recovery()", nil, &inRecovery); err != nil {
			return false, err
		}
		return !inRecovery, errors.New("still in recovery")
	})
	if err != nil {
		return fmt.Errorf("waiting for promoted %s to accept writes: %w", c.dataDir, err)
	}
	c.mu.Lock()
	c.standbyOf = nil
	c.mu.Unlock()
	c.logger.Info("postgres promoted", "data_dir", c.dataDir, "port", c.Port())
	return nil
}

// CurrentWAL returns primary c's timeline and WAL write position:
// pg_current_wal_lsn(), and the timeline from the first 8 hex digits of the
// name of the WAL file holding it, pg_walfile_name() (PostgreSQL 15 docs,
// Backup Control Functions; WAL internals for the file names). A promoted
// standby's timeline is its old primary's plus one, and its LSN continues
// from the end of the history it had, so it can be behind the old primary's.
// The same LSN on two timelines is two different histories. Both functions
// refuse to run during recovery, so CurrentWAL fails on a standby. See
// WaitReplayed.
func (c *Cluster) CurrentWAL(ctx context.Context) (timeline uint32, lsn LSN, err error) {
	var lsnText, file string
	if err := queryRow(ctx, c.URL("postgres"),
		"SELECT l::text, pg_walfile_name(l) FROM pg_current_wal_lsn() AS l", nil, &lsnText, &file); err != nil {
		return 0, 0, fmt.Errorf("reading the WAL position of %s: %w", c.dataDir, err)
	}
	if lsn, err = ParseLSN(lsnText); err != nil {
		return 0, 0, err
	}
	tl, err := strconv.ParseUint(file[:min(8, len(file))], 16, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("timeline of WAL file %q: %w", file, err)
	}
	return uint32(tl), lsn, nil
}

// WaitReplayed waits until standby c has replayed the WAL up to lsn
// (pg_last_wal_replay_lsn(), PostgreSQL 15 docs, Recovery Information
// Functions). Then it holds every commit its primary had made at lsn, e.g.
// one read with CurrentWAL, and a promotion loses none of them.
func (c *Cluster) WaitReplayed(ctx context.Context, lsn LSN) error {
	err := poll(ctx, pollInterval, func(ctx context.Context) (bool, error) {
		var done bool
		var at string
		if err := queryRow(ctx, c.URL("postgres"),
			`SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false),
			        coalesce(pg_last_wal_replay_lsn()::text, 'none')`,
			[]any{lsn.String()}, &done, &at); err != nil {
			return false, err
		}
		return done, fmt.Errorf("replayed to %s", at)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to replay WAL to %s: %w", c.dataDir, lsn, err)
	}
	return nil
}

// LSN is a WAL position (pg_lsn). It is comparable with <, printed as
// PostgreSQL prints it ("16/B374D848").
type LSN uint64

// ParseLSN parses PostgreSQL's text form of an LSN.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing LSN %q: want hex/hex", s)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// MultiHostURL is a URL of database dbname that lists every cluster's
// address, in order, with target_session_attrs=read-write. libpq and pgx try
// the hosts in turn and keep the first that accepts read-write transactions,
// which a hot standby does not (PostgreSQL 15 docs, libpq Connection
// Strings). It reaches whichever cluster is the primary, as of each new
// connection.
func MultiHostURL(dbname string, clusters ...*Cluster) string {
	hosts := make([]string, len(clusters))
	for i, c := range clusters {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port()))
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&target_session_attrs=read-write",
		superuser, strings.Join(hosts, ","), url.PathEscape(dbname))
}

// hbaReplication lets replication connections from loopback in without a
// password. They match only lines whose database is "replication" (PostgreSQL
// 15 docs, The pg_hba.conf File). initdb --auth=trust writes it already.
const hbaReplication = "host    replication     all             127.0.0.1/32            trust"

// ensureReplicationHBA appends hbaReplication to the data directory's
// pg_hba.conf unless a line like it is there.
func ensureReplicationHBA(dataDir string) error {
	p := filepath.Join(dataDir, "pg_hba.conf")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "host" && f[1] == "replication" && f[3] == "127.0.0.1/32" && f[4] == "trust" {
			return nil
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", p, err)
	}
	_, err = fmt.Fprintf(f, "\n# Streaming standbys (tether pgcluster Options.Replication)\n%s\n", hbaReplication)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("adding a replication line to %s: %w", p, err)
	}
	return nil
}

// queryRow runs one query on a connection of its own.
func queryRow(ctx context.Context, url, sql string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}
