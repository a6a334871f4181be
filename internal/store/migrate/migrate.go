// Package migrate applies tether's schema migrations (queries/migrations) to
// a database, safely when several agents start at once.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// LockKey is the pg_advisory_xact_lock key (bigint form) that serialises
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

// Migrate applies all pending migrations in one transaction under an advisory
// lock and returns the versions it applied (none when the database is
// current). Concurrent callers wait for each other. The later ones find
// nothing to do.
func Migrate(ctx context.Context, db DB, logger *slog.Logger) (applied []int, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	migrations, err := queries.Migrations()
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrating: starting transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, queries.Get("migrate_lock"), LockKey); err != nil {
		return nil, fmt.Errorf("migrating: taking the migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, queries.Get("migrate_create_table")); err != nil {
		return nil, fmt.Errorf("migrating: creating tether_schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, queries.Get("migrate_current")).Scan(&current); err != nil {
		return nil, fmt.Errorf("migrating: reading schema version: %w", err)
	}
	if current > len(migrations) {
		return nil, &TooNewError{Database: current, Known: len(migrations)}
	}
	for _, m := range migrations[current:] {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, queries.Get("migrate_record"), m.Version, m.Name); err != nil {
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

// Status reports the database's schema version and the versions Migrate
// would apply. It changes nothing. A database newer than this binary gives
// a *TooNewError along with its version.
func Status(ctx context.Context, db DB) (current int, pending []int, err error) {
	migrations, err := queries.Migrations()
	if err != nil {
		return 0, nil, err
	}
	var exists bool
	if err := db.QueryRow(ctx, queries.Get("migrate_table_exists")).Scan(&exists); err != nil {
		return 0, nil, fmt.Errorf("reading schema version: %w", err)
	}
	if exists {
		if err := db.QueryRow(ctx, queries.Get("migrate_current")).Scan(&current); err != nil {
			return 0, nil, fmt.Errorf("reading schema version: %w", err)
		}
	}
	if current > len(migrations) {
		return current, nil, &TooNewError{Database: current, Known: len(migrations)}
	}
	for _, m := range migrations[current:] {
		pending = append(pending, m.Version)
	}
	return current, pending, nil
}

// IsTooNew reports whether err says the database is newer than this binary.
func IsTooNew(err error) bool {
	var e *TooNewError
	return errors.As(err, &e)
}
