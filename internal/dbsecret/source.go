package dbsecret

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Refresh is how old the copy of the secret may be when a new database
// connection is made before the secret is read again. A rotation reaches new
// connections within it; connections already open are kept (PostgreSQL does
// not end sessions when a role's password changes).
const Refresh = 10 * time.Second

// Source is the database URL made from the secret, read again for new
// connections (BeforeConnect) once the copy is older than refresh.
type Source struct {
	c       Getter
	id      string
	base    string // database_url before the secret
	refresh time.Duration
	log     *slog.Logger
	now     func() time.Time

	mu     sync.Mutex
	url    string
	readAt time.Time
}

// NewSource reads the secret once: an agent whose secret cannot be read
// does not start.
func NewSource(ctx context.Context, c Getter, secretID, databaseURL string, refresh time.Duration, log *slog.Logger) (*Source, error) {
	s := &Source{c: c, id: secretID, base: databaseURL, refresh: refresh, log: log, now: time.Now}
	u, err := Resolve(ctx, c, secretID, databaseURL)
	if err != nil {
		return nil, err
	}
	s.url, s.readAt = u, s.now()
	return s, nil
}

// URL is the database URL from the latest read.
func (s *Source) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// current reads the secret again when the copy is older than refresh. A
// failed read keeps the copy (and is logged): Secrets Manager being
// unreachable must not stop connections a valid password would open.
func (s *Source) current(ctx context.Context) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.now().Sub(s.readAt) < s.refresh {
		return s.url
	}
	u, err := Resolve(ctx, s.c, s.id, s.base)
	if err != nil {
		// Not again before refresh has passed: a Secrets Manager that hangs
		// would hold up every connection.
		s.readAt = s.now()
		s.log.Warn("reading the database secret again; using the last value read", "err", err)
		return s.url
	}
	if u != s.url {
		s.log.Info("database secret changed: new connections use its new value", "secret", s.id)
	}
	s.url, s.readAt = u, s.now()
	return s.url
}

// BeforeConnect is a pgxpool BeforeConnect: it gives a new connection the
// user name and password of the secret's current value. Host, port and
// database stay those the pool was made with.
func (s *Source) BeforeConnect(ctx context.Context, cc *pgx.ConnConfig) error {
	pc, err := pgx.ParseConfig(s.current(ctx))
	if err != nil {
		return fmt.Errorf("database_secret %s: the URL it makes does not parse (value not shown)", s.id)
	}
	cc.User, cc.Password = pc.User, pc.Password
	return nil
}
