package pgtest

import (
	"context"
	"testing"

	"github.com/tetherjobs/tether/internal/pgcluster"
)

// StartReplicated starts a primary with a migrated database "tether" and one
// streaming hot standby of it, both of the test's own (even when DATABASE_URL
// is set), and returns them with a URL of "tether" that lists both servers
// with target_session_attrs=read-write. Each new connection on it reaches
// whichever is the primary (pgcluster.MultiHostURL). The standby is a base
// backup taken after the migration, so it has the schema too. With sync the
// standby is synchronous. The primary's commits wait for it, and block while
// it is stopped. Both are stopped and removed when the test ends, the standby
// first.
//
// For failover tests, stop the standby while the primary commits, stop the
// primary, start the standby and Promote it, and the asynchronous standby
// has lost those commits. WaitReplayed before stopping the primary makes a
// failover that loses nothing.
func StartReplicated(t testing.TB, sync bool) (primary, standby *pgcluster.Cluster, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	primary = startOwn(t, ctx, pgcluster.Options{Fast: true, Replication: true})
	standby, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Synchronous: sync})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	stopAtCleanup(t, standby) // cleanups are LIFO: before the primary's
	return primary, standby, pgcluster.MultiHostURL("tether", primary, standby)
}
