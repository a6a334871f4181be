// Package migrate applies tether's schema migrations (queries/migrations) to
// a database, safely when several agents start at once.
package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// LockKey is the pg_try_advisory_xact_lock key (bigint form) that serialises
// migrators. Other advisory locks in tether must not use it.
const LockKey int64 = 0x7465_7468_6572_0001 // "tether" + 1

// DB is what migrations need. *pgxpool.Pool and *pgx.Conn both fit.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TooNewError means the database was migrated by a newer tether.
type TooNewError struct {
	Database int // version recorded in the database
	Known    int // highest version this binary has
}

func (e *TooNewError) Error() string {
	return fmt.Sprintf("database schema is at version %d but this tether knows up to %d; upgrade tether", e.Database, e.Known)
}

// Holder is the session holding the migration lock, as pg_locks and
// pg_stat_activity tell (empty text where the database hides it).
type Holder struct {
	PID             int
	ApplicationName string
	ClientAddr      string
	For             time.Duration // how long its transaction (or session) has run
}

// Options are Run's knobs. The zero value is Migrate's.
type Options struct {
	Logger *slog.Logger
	// Waiting, if set, is called each time the lock is found held by
	// another session, with who holds it (nil when it cannot tell).
	Waiting func(*Holder)
}

// While another session holds the lock, it is tried again every lockPoll,
// and the wait is logged at once, then again every lockLogEvery.
const (
	lockPoll     = 500 * time.Millisecond
	lockLogEvery = 15 * time.Second
)

// Migrate applies all pending migrations in one transaction under an advisory
// lock and returns the versions it applied (none when the database is
// current). Concurrent callers wait for each other. The later ones find
// nothing to do.
func Migrate(ctx context.Context, db DB, logger *slog.Logger) (applied []int, err error) {
	return Run(ctx, db, Options{Logger: logger})
}

// Run is Migrate with options. While another session holds the migration
// lock it logs who at once, and again every 15s, and tells o.Waiting.
func Run(ctx context.Context, db DB, o Options) (applied []int, err error) {
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	logger := o.Logger
	migrations, err := queries.Migrations()
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrating: starting transaction: %w", err)
	}
	// After Commit, Rollback does nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := waitForLock(ctx, tx, o); err != nil {
		return nil, err
	}
	for _, name := range []string{"migrate_create_table", "migrate_create_compatible_table"} {
		if _, err := tx.Exec(ctx, queries.Get(name)); err != nil {
			return nil, fmt.Errorf("migrating: creating the schema version tables (%s): %w", name, err)
		}
	}
	current, pending, err := readPlan(ctx, tx, migrations, true)
	if err != nil {
		return nil, err
	}
	for _, m := range pending {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
		record := "migrate_record"
		if m.Compatible {
			record = "migrate_record_compatible"
		}
		if _, err := tx.Exec(ctx, queries.Get(record), m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("recording migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrating: committing: %w", err)
	}
	if len(applied) == 0 {
		logger.Debug("schema is current", "version", current)
	} else {
		logger.Info("schema migrated", "from", current, "to", applied[len(applied)-1], "applied", applied)
	}
	return applied, nil
}

// waitForLock takes the migration lock in tx, trying every lockPoll while
// another session holds it. A blocking pg_advisory_xact_lock would wait
// without a word: on first boot an agent then answered nothing and logged
// nothing until the holder was done.
func waitForLock(ctx context.Context, tx pgx.Tx, o Options) error {
	lock := queries.Named("migrate_lock")
	began := time.Now()
	var nextLog time.Time // zero: the first wait is logged at once
	for waited := false; ; waited = true {
		var got bool
		if err := tx.QueryRow(ctx, lock.SQL, lock.Args(map[string]any{"key": LockKey})...).Scan(&got); err != nil {
			return fmt.Errorf("migrating: taking the migration lock: %w", err)
		}
		if got {
			if waited {
				o.Logger.Info("took the migration lock", "waited", time.Since(began).Round(time.Millisecond))
			}
			return nil
		}
		h, err := lockHolder(ctx, tx)
		if err != nil {
			o.Logger.Warn("reading who holds the migration lock", "err", err)
		}
		if o.Waiting != nil {
			o.Waiting(h)
		}
		if now := time.Now(); !now.Before(nextLog) {
			nextLog = now.Add(lockLogEvery)
			attrs := []any{"waited", now.Sub(began).Round(time.Second)}
			if h != nil {
				attrs = append(attrs, "holder_pid", h.PID, "holder_application", h.ApplicationName,
					"holder_addr", h.ClientAddr, "held_for", h.For.Round(time.Second))
			}
			o.Logger.Warn("waiting for the migration lock: another session is migrating the schema (or holds its lock)", attrs...)
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("migrating: waiting for the migration lock: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// lockHolder returns who holds the migration lock, nil when nobody (it was
// just released) or when the database does not show it.
func lockHolder(ctx context.Context, tx pgx.Tx) (*Holder, error) {
	st := queries.Named("migrate_lock_holder")
	var h Holder
	var secs float64
	err := tx.QueryRow(ctx, st.SQL, st.Args(map[string]any{"key": LockKey})...).Scan(&h.PID, &h.ApplicationName, &h.ClientAddr, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pg_locks: %w", err)
	}
	h.For = time.Duration(secs * float64(time.Second))
	return &h, nil
}

// Status reports the database's schema version and the versions Migrate
// would apply. It changes nothing. A database newer than this binary gives
// a *TooNewError along with its version.
func Status(ctx context.Context, db DB) (current int, pending []int, err error) {
	migrations, err := queries.Migrations()
	if err != nil {
		return 0, nil, err
	}
	var exists, withCompatible bool
	if err := db.QueryRow(ctx, queries.Get("migrate_table_exists")).Scan(&exists); err != nil {
		return 0, nil, fmt.Errorf("reading schema version: %w", err)
	}
	if err := db.QueryRow(ctx, queries.Get("migrate_compatible_table_exists")).Scan(&withCompatible); err != nil {
		return 0, nil, fmt.Errorf("reading schema version: %w", err)
	}
	remaining := migrations
	if exists {
		current, remaining, err = readPlan(ctx, db, migrations, withCompatible)
	}
	for _, m := range remaining {
		pending = append(pending, m.Version)
	}
	return current, pending, err
}

// readPlan reads the versions recorded in the database (the compatible
// ones only when that table exists) and returns plan's answer.
func readPlan(ctx context.Context, db DB, known []queries.Migration, withCompatible bool) (int, []queries.Migration, error) {
	var breaking, compatible int
	if err := db.QueryRow(ctx, queries.Get("migrate_current")).Scan(&breaking); err != nil {
		return 0, nil, fmt.Errorf("migrating: reading schema version: %w", err)
	}
	if withCompatible {
		if err := db.QueryRow(ctx, queries.Get("migrate_current_compatible")).Scan(&compatible); err != nil {
			return 0, nil, fmt.Errorf("migrating: reading schema version (compatible migrations): %w", err)
		}
	}
	return plan(known, breaking, compatible)
}

// plan decides from the highest versions recorded (breaking: in
// tether_schema_migrations; compatible: the compatible migrations') what
// the schema's version is and which known migrations to apply. A database
// whose breaking version is beyond the known ones is too new; one that is
// ahead only by compatible migrations is run on as it is.
func plan(known []queries.Migration, breaking, compatible int) (current int, pending []queries.Migration, err error) {
	current = max(breaking, compatible)
	if breaking > len(known) {
		return current, nil, &TooNewError{Database: breaking, Known: len(known)}
	}
	if current >= len(known) {
		return current, nil, nil
	}
	return current, known[current:], nil
}

// IsTooNew reports whether err says the database is newer than this binary.
func IsTooNew(err error) bool {
	var e *TooNewError
	return errors.As(err, &e)
}
