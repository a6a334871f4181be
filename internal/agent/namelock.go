package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/store"
)

// nameLock holds the session advisory lock on this agent's name. It needs its
// own connection straight to PostgreSQL. Through a transaction-pooling proxy
// the session (and so the lock) would not be this process's. It connects to
// database_direct_url when set, and verifySession checks it at start.
type nameLock struct {
	conn *pgx.Conn
	dc   directConn
	name string
	log  *slog.Logger
}

// acquireNameLock takes the lock, waiting up to wait for a previous holder:
// a killed process's lock is freed when its connection closes, so a restart
// under the same name gets it at once, while a second live process never does.
func acquireNameLock(ctx context.Context, dc directConn, name string, wait time.Duration, log *slog.Logger) (*nameLock, error) {
	l := &nameLock{dc: dc, name: name, log: log}
	deadline := time.Now().Add(wait)
	warn := sync.OnceFunc(func() {
		log.Warn("another process holds this agent name; waiting for it to exit", "name", name, "up_to", wait)
	})
	for {
		ok, err := l.try(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			return l, nil
		}
		if time.Now().After(deadline) {
			l.close()
			return nil, fmt.Errorf("agent name %q is held by another live process (waited %s): agent names must be unique per process; set a distinct agent.name (TETHER_AGENT_NAME) for each agent", name, wait)
		}
		warn()
		select {
		case <-ctx.Done():
			l.close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (l *nameLock) try(ctx context.Context) (bool, error) {
	if !l.connected() {
		conn, err := l.dc.connect(ctx, poolLock, "connecting for the agent name lock")
		if err != nil {
			return false, err
		}
		l.conn = conn
	}
	ok, err := store.TryNameLock(ctx, l.conn, l.name)
	if err != nil {
		l.close()
		return false, err
	}
	return ok, nil
}

// watch keeps the lock. When its connection drops (a database restart), it
// reconnects and takes the lock again. It returns an error only when another
// process took the name meanwhile. The agent must then stop.
func (l *nameLock) watch(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if l.connected() {
			if err := l.conn.Ping(ctx); err == nil {
				continue
			}
			l.close()
		}
		ok, err := l.try(ctx)
		switch {
		case err != nil:
			l.log.Debug("agent name lock: database unreachable; retrying", "err", err)
		case !ok:
			return fmt.Errorf("agent name %q was taken by another process while the database was unreachable: agent names must be unique per process", l.name)
		default:
			l.log.Info("agent name lock retaken after reconnecting")
		}
	}
}

// connected reports whether the lock's connection is open.
func (l *nameLock) connected() bool { return l.conn != nil && !l.conn.IsClosed() }

func (l *nameLock) close() {
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.conn.Close(ctx)
		cancel()
		l.conn = nil
	}
}
