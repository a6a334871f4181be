package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/store"
)

// directConn is where the session-bound connections go (the agent name lock
// and LISTEN). That is database_direct_url, else database_url. A transaction
// pooler in front of PostgreSQL breaks both, so they may bypass it while the
// pools keep using it.
type directConn struct {
	cc      *pgx.ConnConfig // as parsed: each session copies it
	setting string          // the setting the URL came from, for messages
	url     string
	agent   string // the agent's name, for application_name
}

// directConfig parses cfg.DirectURL() with the pool's connect-timeout rules.
// agent is the agent's name, which the sessions report in application_name.
func directConfig(cfg *config.Config, agent string) (directConn, error) {
	setting := "database_url"
	if cfg.DatabaseDirectURL != "" {
		setting = "database_direct_url"
	}
	pc, err := poolConfigFor(cfg.DirectURL(), setting, cfg.DatabaseConnectTimeout.Std())
	if err != nil {
		return directConn{}, err
	}
	return directConn{cc: pc.ConnConfig, setting: setting, url: cfg.DirectURL(), agent: agent}, nil
}

// connect opens one session, named pool in application_name. what says
// what it is for.
func (d directConn) connect(ctx context.Context, pool, what string) (*pgx.Conn, error) {
	cc := d.cc.Copy()
	SetApplicationName(&cc.Config, d.agent, pool)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, connectErrorFor(d.cc, d.setting, d.url, err))
	}
	return conn, nil
}

// listenConnect opens the claim loop's LISTEN connection.
func (d directConn) listenConnect(ctx context.Context) (*pgx.Conn, error) {
	return d.connect(ctx, poolListen, "connecting for notifications (LISTEN)")
}

// session is what the server says about the name-lock connection's session,
// and what the connection itself knows.
type session struct {
	held       bool    // the name lock is granted to pg_backend_pid()
	backendPID uint32  // pg_backend_pid()
	keyPID     uint32  // the pid in the server's BackendKeyData at connect
	clientAddr *string // inet_client_addr(): nil over a Unix socket
	clientPort *int32  // inet_client_port()
	local      net.Addr
}

// errNotDirect marks a lock connection that does not reach PostgreSQL
// directly. The agent must not start on it.
var errNotDirect = errors.New("the agent name lock needs a direct session with PostgreSQL")

// judgeSession decides whether the lock is really this process's session. A
// pooler answers the startup itself, so the backend key it hands out is its
// own invention, never the pid of the server session that runs our
// statements. In transaction mode the lock can land on a server session other
// clients share. A mismatch of addresses alone is not fatal. NAT (a
// Kubernetes pod reaching RDS) and TCP forwarders (cloud-sql-proxy, an SSH
// tunnel) keep one server session per connection, which is all the lock
// needs. Such a mismatch is returned as a note to log.
func judgeSession(s session) (note string, err error) {
	if !s.held {
		return "", fmt.Errorf("%w: the lock was taken but pg_locks does not show it granted to this connection's backend (pid %d), so another session holds it: a transaction pooler ran the statements on a shared server connection", errNotDirect, s.backendPID)
	}
	if s.keyPID != s.backendPID {
		return "", fmt.Errorf("%w: the server that answered the connection announced backend pid %d but the statements ran in pid %d, so something between (a pooler such as PgBouncer or RDS Proxy) hands them to server connections it shares", errNotDirect, s.keyPID, s.backendPID)
	}
	tcp, ok := s.local.(*net.TCPAddr)
	if !ok || s.clientAddr == nil || s.clientPort == nil {
		// Unix socket (or a server that does not say). pg_locks and the
		// backend pid are all there is to check.
		return "", nil
	}
	// An address that does not parse (nil) equals no socket's address.
	if net.ParseIP(*s.clientAddr).Equal(tcp.IP) && int(*s.clientPort) == tcp.Port {
		return "", nil
	}
	seen := net.JoinHostPort(*s.clientAddr, strconv.Itoa(int(*s.clientPort)))
	return fmt.Sprintf("the server sees this agent's lock connection coming from %s, not from its own %s: a NAT or TCP forwarder is in between; the lock's session is still this process's own", seen, tcp), nil
}

// verifySession checks, right after taking the lock, that it is held by this
// process's own server session (see judgeSession). On failure it gives the
// lock back, best effort. Through a pooler it would otherwise stay with a
// pooled server connection.
func (l *nameLock) verifySession(ctx context.Context) error {
	s, err := inspectSession(ctx, l.conn, l.name)
	if err != nil {
		return err
	}
	note, err := judgeSession(s)
	if err != nil {
		if uerr := store.NameUnlock(ctx, l.conn, l.name); uerr != nil {
			l.log.Warn("giving back the agent name lock after the session check failed", "err", uerr)
		}
		return l.notDirect(err)
	}
	if note != "" {
		l.log.Info(note)
	}
	return nil
}

// inspectSession asks the server about conn's session and its lock on name.
func inspectSession(ctx context.Context, conn *pgx.Conn, name string) (session, error) {
	seen, err := store.InspectNameLock(ctx, conn, name)
	if err != nil {
		return session{}, err
	}
	return session{
		held: seen.Held, backendPID: seen.BackendPID, clientAddr: seen.ClientAddr, clientPort: seen.ClientPort,
		keyPID: conn.PgConn().PID(), local: conn.PgConn().Conn().LocalAddr(),
	}, nil
}

// notDirect explains how to fix a lock connection that is not direct.
func (l *nameLock) notDirect(err error) error {
	fix := "set database_direct_url to PostgreSQL itself (e.g. port 5432 instead of PgBouncer's 6432); database_url may keep going through the pooler"
	if l.dc.setting == "database_direct_url" {
		fix = "point database_direct_url at PostgreSQL itself, not at a pooler (e.g. port 5432 instead of PgBouncer's 6432)"
	}
	return fmt.Errorf("%w (%s %s). tether holds a session-level advisory lock on the agent's name for the process's lifetime, and other agents read its release as this agent's death; a pooler in transaction mode (PgBouncer, RDS Proxy) shares server sessions between clients, so the lock would be nobody's. The lock and LISTEN connections use database_direct_url when set, else database_url: %s",
		err, l.dc.setting, config.RedactURL(l.dc.url), fix)
}
