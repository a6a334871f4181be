// Package api is tether's HTTP API, served by every agent: submit, inspect,
// cancel and follow jobs, list agents, and health and readiness probes.
// Request and response bodies are JSON, except job logs (raw bytes or NDJSON)
// and followed event streams (NDJSON).
// Errors are {"error": "...", "field": "...", "code": "..."}.
package api

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/store"
)

// Options configure the API handler.
type Options struct {
	Store *store.Store
	// Commands that may be submitted, by name.
	Commands map[string]config.Command
	// Defaults are the global lifecycle defaults the commands' limits
	// override. A zero value is replaced by the built-in defaults.
	Defaults *config.Defaults
	// Ready reports whether this agent can do work (plugins started, not
	// draining). nil means always ready. /readyz also pings the database.
	Ready func(context.Context) error
	// Tokens enable bearer-token auth on /api/ when non-empty. The token's
	// name is the submitter of the jobs submitted with it.
	Tokens []config.Token
	// MaxBodyBytes limits request bodies. 0 means 1 MiB.
	MaxBodyBytes int64
	Logger       *slog.Logger // nil means slog.Default()
	// QuietRequests logs each answered request at debug instead of info
	// (server errors stay errors). `tether dev` sets it, since there the
	// job's output is what a newcomer reads.
	QuietRequests bool
	// Metrics is served at GET /metrics when non-nil.
	Metrics http.Handler
	// RequestMetrics counts every request by route pattern and status
	// code when non-nil.
	RequestMetrics *metrics.Metrics
	// LogPollInterval is how often a followed log or event stream polls
	// the database while notifications are not arriving (Follow nil, or its
	// LISTEN connection down). 0 means 250ms.
	LogPollInterval time.Duration
	// Follow delivers the NOTIFYs that wake followers at once (the claim
	// service's LISTEN connection feeds it). Nil: followers only poll, every
	// LogPollInterval.
	Follow *notify.Hub
	// FollowPollInterval is the fallback poll of a follower while Follow is
	// live, in case a notification is lost. 0 means 5s.
	FollowPollInterval time.Duration
	// Stopping, when closed, ends followed log streams, so a graceful
	// shutdown is not held by clients tailing a long job. Nil: never.
	Stopping <-chan struct{}
	// StaleJob, Keepalive and DeadAfter are the agent's own: GET
	// /api/v1/commands and GET /api/v1/agents judge the other agents by the
	// larger of these and theirs (internal/fleet.Classify). StaleJob 0
	// means DefaultStaleJob; Keepalive 0 DefaultKeepalive, DeadAfter 0
	// 2 × Keepalive.
	StaleJob  time.Duration
	Keepalive time.Duration
	DeadAfter time.Duration
	// AnnouncedTTL is how long what live agents announce of their commands
	// is reused by submits (a read costs several times a submit). 0 means
	// DefaultAnnouncedTTL.
	AnnouncedTTL time.Duration
	// ListenAddr is the agent's http.listen. When its host is a name, that
	// name is an allowed Host.
	ListenAddr string
	// AllowedHosts is http.allowed_hosts: the Host header values answered
	// besides IP literals, localhost, *.localhost and ListenAddr's name. An
	// entry is a name (any port), a name:port, or "*" (any Host). Empty
	// with Tokens set means any Host. A page rebinding a name to the agent
	// cannot send a bearer token.
	AllowedHosts []string
	// Console serves the web console at GET / and GET /ui/ (internal/ui).
	// nil means none. It serves static files. Its data comes from /api/v1
	// under the same auth, so it is served without a token.
	Console http.Handler
}

// Defaults for zero Options fields.
const (
	DefaultMaxBodyBytes    = 1 << 20
	DefaultLogPollInterval = 250 * time.Millisecond
	DefaultStaleJob        = 120 * time.Second // agent.stale_job's default
)

// DefaultFollowPollInterval is a follower's fallback poll while NOTIFY
// works. A lost notification delays it at most this long.
const DefaultFollowPollInterval = 5 * time.Second

type server struct {
	opts         Options
	log          *slog.Logger
	commandNames []string
	hosts        hostPolicy
	announced    *announced // what live agents announce, for submits of commands not configured here
}

// New returns the API handler.
func New(opts Options) http.Handler {
	opts.MaxBodyBytes = orDefault(opts.MaxBodyBytes, DefaultMaxBodyBytes)
	opts.LogPollInterval = orDefault(opts.LogPollInterval, DefaultLogPollInterval)
	opts.FollowPollInterval = orDefault(opts.FollowPollInterval, DefaultFollowPollInterval)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.Defaults = cmp.Or(opts.Defaults, &config.Default().Defaults)
	opts.StaleJob = orDefault(opts.StaleJob, DefaultStaleJob)
	opts.Keepalive = orDefault(opts.Keepalive, defaults.Keepalive)
	opts.DeadAfter = orDefault(opts.DeadAfter, 2*opts.Keepalive)
	opts.AnnouncedTTL = orDefault(opts.AnnouncedTTL, DefaultAnnouncedTTL)
	s := &server{opts: opts, log: opts.Logger, hosts: newHostPolicy(opts.AllowedHosts, opts.ListenAddr, len(opts.Tokens) > 0),
		announced: newAnnounced(opts.Store, opts.StaleJob, opts.AnnouncedTTL), commandNames: slices.Sorted(maps.Keys(opts.Commands))}

	mux := &routes{mux: http.NewServeMux()}
	auth := s.authenticate
	post := func(h http.HandlerFunc) http.Handler { return auth(s.stateChanging(h)) }
	mux.Handle("POST /api/v1/jobs", post(s.submit))
	mux.Handle("GET /api/v1/jobs", auth(s.listJobs))
	mux.Handle("GET /api/v1/jobs/{id}", auth(withJob(s.getJob)))
	mux.Handle("POST /api/v1/jobs/{id}/cancel", post(withJob(s.cancel)))
	mux.Handle("POST /api/v1/jobs/{id}/requeue", post(withJob(s.requeue)))
	mux.Handle("GET /api/v1/jobs/{id}/logs", auth(withJob(s.logDownload(s.logs))))
	mux.Handle("GET /api/v1/jobs/{id}/attempts", auth(withJob(s.attempts)))
	mux.Handle("GET /api/v1/jobs/counts", auth(s.jobCounts))
	mux.Handle("GET /api/v1/jobs/{id}/events", auth(withJob(s.events)))
	mux.Handle("GET /api/v1/agents", auth(s.agents))
	mux.Handle("POST /api/v1/agents/{name}/drain", post(s.drainAgent))
	mux.Handle("GET /api/v1/commands", auth(s.commands))
	mux.Handle("GET /api/v1/cleanups", auth(s.cleanups))
	mux.Handle("GET /api/v1/openapi.json", auth(s.openAPIHandler()))
	mux.Handle("GET /healthz", http.HandlerFunc(s.healthz))
	mux.Handle("GET /readyz", http.HandlerFunc(s.readyz))
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.Console != nil {
		mux.Handle("GET /{$}", opts.Console)
		mux.Handle("GET /ui/", opts.Console)
	}
	if opts.RequestMetrics != nil {
		opts.RequestMetrics.KnownRoutes(append(mux.patterns, metrics.UnmatchedRoute))
	}
	return s.logRequests(s.checkHost(checkQueryText(jsonRouteErrors(mux.mux))))
}

// orDefault is v, or def when v is unset (zero or negative).
func orDefault[T int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// routes is the API's mux and the patterns registered on it, the route
// label's values.
type routes struct {
	mux      *http.ServeMux
	patterns []string
}

func (r *routes) Handle(pattern string, h http.Handler) {
	r.mux.Handle(pattern, h)
	r.patterns = append(r.patterns, pattern)
}

// checkQueryText refuses a query string PostgreSQL could not compare:
// invalid UTF-8 or NUL in any parameter (400 naming it).
func checkQueryText(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r.URL.Query()); err != nil {
			badRequest(w, err.Field, "%s", err.Msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}
