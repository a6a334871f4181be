package api

import (
	"net/http"

	wire "github.com/tetherjobs/tether/pkg/api"
)

// Boot is what an agent is doing before its API is up.
type Boot struct {
	Status string // "starting" or "migrating"
	Detail string // what it waits for
	// MigrationLock is who holds the migration lock it waits for, if known.
	MigrationLock *wire.MigrationLock
}

// BootHandler answers while the agent starts, before New's handler takes
// over: /healthz is 200 (the process is up: a container health check must
// not replace a task that waits for a migration), /readyz 503 with
// state's status and detail, /metrics from metrics (if set), and anything
// else 503.
func BootHandler(state func() Boot, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, wire.Status{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		b := state()
		writeJSON(w, http.StatusServiceUnavailable, wire.Status{Status: b.Status, Error: b.Detail, MigrationLock: b.MigrationLock})
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		b := state()
		writeJSON(w, http.StatusServiceUnavailable, wire.Error{Error: "agent is starting (" + b.Detail + "): try again shortly"})
	})
	return mux
}
