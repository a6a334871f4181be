package agent

import (
	"cmp"

	"github.com/jackc/pgx/v5/pgconn"
)

// The pools and sessions an agent opens, as application_name names them
// (docs/operations.md, "Connections").
const (
	poolWork      = "work"      // claiming, the janitor, the jobs' writes
	poolHeartbeat = "heartbeat" // the heartbeat's own pool
	poolAPI       = "api"       // the HTTP API and the console
	poolLock      = "lock"      // the name lock's session
	poolListen    = "listen"    // the LISTEN session
	poolMigrate   = "migrate"   // schema migrations at start, closed after
)

// appNamePrefix starts every application_name tether sets, unless the
// connection string gives one of its own.
const appNamePrefix = "tether"

// SetApplicationName makes c report application_name <prefix>/<who>/<pool>
// to the server (pg_stat_activity), so a backend tells which agent and pool
// it belongs to. The prefix is tether, or the application_name database_url
// (or PGAPPNAME) gave, so an operator's own name stays in front. PostgreSQL
// keeps the first 63 bytes. c comes from pgx's ParseConfig, which always
// makes RuntimeParams.
func SetApplicationName(c *pgconn.Config, who, pool string) {
	prefix := cmp.Or(c.RuntimeParams["application_name"], appNamePrefix)
	c.RuntimeParams["application_name"] = prefix + "/" + who + "/" + pool
}
