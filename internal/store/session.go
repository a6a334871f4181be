package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// The statements here are session-level. They run on a dedicated
// connection the caller owns, never on the pool, because what they set up
// (an advisory lock, a LISTEN) lives as long as the session.

// TryNameLock takes the session-level lock on an agent name, if no other
// session holds it.
func TryNameLock(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	if err := conn.QueryRow(ctx, queries.Get("agent_name_lock"), name).Scan(&ok); err != nil {
		return false, fmt.Errorf("taking the agent name lock: %w", err)
	}
	return ok, nil
}

// NameUnlock gives back the agent name lock TryNameLock took on conn.
func NameUnlock(ctx context.Context, conn *pgx.Conn, name string) error {
	u := queries.Named("agent_name_unlock")
	if _, err := conn.Exec(ctx, u.SQL, u.Args(map[string]any{"name": name})...); err != nil {
		return fmt.Errorf("giving back the agent name lock: %w", err)
	}
	return nil
}

// NameLockSession is what the server says about the session of a
// connection that took an agent name lock.
type NameLockSession struct {
	Held       bool    // the name lock is granted to pg_backend_pid()
	BackendPID uint32  // pg_backend_pid()
	ClientAddr *string // inet_client_addr(): nil over a Unix socket
	ClientPort *int32  // inet_client_port()
}

// InspectNameLock asks the server about conn's session and its lock on
// name.
func InspectNameLock(ctx context.Context, conn *pgx.Conn, name string) (NameLockSession, error) {
	var s NameLockSession
	q := queries.Named("agent_name_lock_self")
	if err := conn.QueryRow(ctx, q.SQL, q.Args(map[string]any{"name": name})...).
		Scan(&s.Held, &s.BackendPID, &s.ClientAddr, &s.ClientPort); err != nil {
		return NameLockSession{}, fmt.Errorf("checking the agent name lock's session: %w", err)
	}
	return s, nil
}

// Listen subscribes conn to the channels that wake idle agents and job
// owners (NotifyChannel, CancelChannel). With follow it also subscribes to
// those the API's followers wait on.
func Listen(ctx context.Context, conn *pgx.Conn, follow bool) error {
	if _, err := conn.Exec(ctx, queries.Get("listen")); err != nil {
		return err
	}
	if follow {
		if _, err := conn.Exec(ctx, queries.Get("listen_follow")); err != nil {
			return err
		}
	}
	return nil
}
