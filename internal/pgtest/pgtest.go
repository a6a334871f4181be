// Package pgtest gives each test its own migrated PostgreSQL database.
//
// With DATABASE_URL set, databases are created on that server. Otherwise one
// throwaway cluster is started per test binary from the installed server
// binaries. Either way a template database is migrated once per test binary
// and every test gets a CREATE DATABASE … TEMPLATE copy, dropped when the test
// ends. Packages using it should stop the cluster after their tests:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/pgcluster"
	"github.com/tetherjobs/tether/internal/store/migrate"
)

const setupTimeout = 2 * time.Minute

// server is the one database server of a test binary. A test helper may hold
// it in a package variable. It is started lazily, once, and stopped by Main.
type server struct {
	once     sync.Once
	err      error
	cluster  *pgcluster.Cluster // nil when DATABASE_URL is used
	baseURL  string             // any database on the server; others are derived from it
	admin    *pgxpool.Pool      // for CREATE/DROP DATABASE
	template string
	prefix   string   // random per test binary: parallel binaries may share DATABASE_URL
	settings []string // RunWith's, for the cluster this binary starts
	seq      atomic.Int64
}

var shared server

// Main runs the tests and then stops the cluster (or drops the template on
// DATABASE_URL's server), so no postgres process outlives the test binary.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain with cleanup of its own.
func Run(m *testing.M) int {
	code := m.Run()
	shared.shutdown()
	return code
}

// RunWith is Run with more settings for the binary's own cluster
// (pgcluster.Options.Settings). They do not apply to DATABASE_URL's server.
func RunWith(m *testing.M, settings ...string) int {
	shared.settings = settings
	return Run(m)
}

// DB returns a pool on a fresh migrated database, closed and dropped when the
// test ends.
func DB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := URL(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatalf("pgtest: opening pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before URL's drop: cleanups are LIFO
	return pool
}

// URL returns the URL of a fresh migrated database, dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	s := get(t)
	return s.createDB(t, s.template)
}

// EmptyURL returns the URL of a fresh database without tether's schema
// (cloned from template0), dropped when the test ends: for migration tests.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return get(t).createDB(t, "template0")
}

// Cluster returns the test binary's shared cluster, or nil when DATABASE_URL
// is used. Stopping it disturbs every test of the binary. A test that stops
// the server should use StartCluster.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	return get(t).cluster
}

// StartCluster starts a cluster of the test's own, even when DATABASE_URL
// is set, and returns it with the URL of a migrated database "tether" on
// it. It is stopped and removed when the test ends. It is for outage tests.
// The test may StopServer and StartServer it freely.
func StartCluster(t testing.TB) (*pgcluster.Cluster, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	c := startOwn(t, ctx, pgcluster.Options{Fast: true})
	return c, c.URL("tether")
}

// startOwn starts a cluster with a migrated database "tether", stopped and
// removed when the test ends.
func startOwn(t testing.TB, ctx context.Context, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	stopAtCleanup(t, c)
	if err := createAndMigrate(ctx, c.URL("postgres"), c.URL("tether"), "tether"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return c
}

func stopAtCleanup(t testing.TB, c *pgcluster.Cluster) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("pgtest: stopping cluster: %v", err)
		}
	})
}

func get(t testing.TB) *server {
	t.Helper()
	shared.once.Do(shared.setup)
	if shared.err != nil {
		t.Fatalf("pgtest: %v", shared.err)
	}
	return &shared
}

func (s *server) setup() {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	s.prefix = randomHex(4)
	if env := os.Getenv("DATABASE_URL"); env != "" {
		s.baseURL = env
		s.template = "tether_template_" + s.prefix
	} else {
		c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Settings: s.settings})
		if err != nil {
			s.err = err
			return
		}
		s.cluster = c
		s.baseURL = c.URL("postgres")
		s.template = "tether_template"
	}
	admin, err := pgxpool.New(ctx, s.baseURL)
	if err != nil {
		s.err = fmt.Errorf("connecting to %s: %w", redact(s.baseURL), err)
		return
	}
	s.admin = admin
	tmplURL, err := withDatabase(s.baseURL, s.template)
	if err != nil {
		s.err = err
		return
	}
	if err := createAndMigrate(ctx, s.baseURL, tmplURL, s.template); err != nil {
		s.err = err
		return
	}
	// No connections to the template from now on. CREATE DATABASE …
	// TEMPLATE fails while anyone is connected to it.
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
		ident(s.template))); err != nil {
		s.err = fmt.Errorf("sealing template database: %w", err)
	}
}

// createAndMigrate creates database name (via adminURL) and migrates it (via dbURL).
func createAndMigrate(ctx context.Context, adminURL, dbURL, name string) error {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", redact(adminURL), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return fmt.Errorf("creating database %s (the DATABASE_URL role needs CREATEDB): %w", name, err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", redact(dbURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := migrate.Migrate(ctx, conn, nil); err != nil {
		return fmt.Errorf("migrating database %s: %w", name, err)
	}
	return nil
}

func (s *server) createDB(t testing.TB, template string) string {
	t.Helper()
	name := fmt.Sprintf("tether_test_%s_%d", s.prefix, s.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", ident(name), ident(template))); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE: a test may leave connections open (or have stopped the
		// server it ran on, in which case there is nothing to drop).
		if _, err := s.admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", ident(name))); err != nil {
			t.Logf("pgtest: dropping database %s: %v", name, err)
		}
	})
	u, err := withDatabase(s.baseURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

func (s *server) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.admin != nil {
		if s.cluster == nil {
			// On a shared server, leave nothing behind.
			_, _ = s.admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH IS_TEMPLATE false", ident(s.template)))
			if _, err := s.admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", ident(s.template))); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: dropping template database %s: %v\n", s.template, err)
			}
		}
		s.admin.Close()
	}
	if s.cluster != nil {
		if err := s.cluster.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping cluster: %v\n", err)
		}
	}
}

// withDatabase returns connection string base pointing at database name.
func withDatabase(base, name string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("parsing DATABASE_URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// keyword=value form. A later keyword overrides an earlier one.
	return base + " dbname=" + name, nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return "the database"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
