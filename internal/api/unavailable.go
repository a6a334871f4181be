package api

import (
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	wire "github.com/tetherjobs/tether/pkg/api"
)

// retryAfterUnavailable is the Retry-After of a database_unavailable answer,
// in seconds: about a reconnect of the pool.
const retryAfterUnavailable = 5

// unavailableCodes are the SQLSTATEs that say the server is going away or
// not taking this connection, rather than that the request was wrong:
// admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
// (class 08, connection_exception, is matched by its prefix).
var unavailableCodes = []string{"57P01", "57P02", "57P03", "53300"}

// databaseUnavailable reports whether err says the database could not be
// reached or the connection to it was lost: a refused or timed-out connect,
// a connection cut mid-request, a server shutting down. Retrying later (or
// on another agent, once the database is back) can help, unlike the other
// errors, which are this agent's fault or the data's.
func databaseUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || slices.Contains(unavailableCodes, pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// unavailable answers 503 database_unavailable with Retry-After.
func unavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterUnavailable))
	writeError(w, http.StatusServiceUnavailable, wire.CodeDatabaseUnavailable, "",
		"database unavailable: this agent cannot reach PostgreSQL; try again shortly (the agent's log has the details)")
}
