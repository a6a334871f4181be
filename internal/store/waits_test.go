package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// rowQuerier is a pool or a single connection.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// awaitLockWaits waits until n sessions of this database whose statement
// matches like (a LIKE pattern) wait for a lock, or fails the test after
// within. It polls pg_stat_activity. Another session's lock wait happens
// inside the server, and no event of the store marks it.
func awaitLockWaits(t *testing.T, db rowQuerier, like string, n int, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var waiting int
	for {
		err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, like).Scan(&waiting)
		if err == nil && waiting == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d sessions running %q waiting for a lock: not within %s (last count %d, err %v)", n, like, within, waiting, err)
		case <-tick.C:
		}
	}
}
