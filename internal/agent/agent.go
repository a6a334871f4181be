// Package agent wires one tether agent process together: database, schema,
// plugins, registration, the claim loop and the HTTP API.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/drain"
	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/migrate"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/internal/ui"
)

// Version is the agent's version, recorded in its registration.
var Version = "dev"

// Options are the knobs of Run that are not configuration.
type Options struct {
	// Hurry, closed by a second signal, cuts the drain's wait short.
	Hurry     <-chan struct{}
	NoMigrate bool
	// Getenv reads the environment (nil = os.Getenv); tests pass their own.
	Getenv func(string) string
	// Started, if set, is called once the API is listening, with its address.
	Started func(addr string)
	// QuietRequests logs the API's request lines at debug (tether dev).
	QuietRequests bool
}

// Run runs an agent until ctx is cancelled, then drains it (see
// internal/drain) and shuts it down.
func Run(ctx context.Context, cfg *config.Config, logger *slog.Logger, opts Options) error {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if cfg.DatabaseURL == "" {
		return errors.New("database_url is not set: set DATABASE_URL or database_url in the config file (or use `tether dev`, which starts a private PostgreSQL)")
	}
	name, err := resolveName(ctx, cfg.Agent.Name, opts.Getenv)
	if err != nil {
		return err
	}
	gen, err := newGeneration()
	if err != nil {
		return err
	}
	log := logger.With("agent", name)
	logDumpable(log)

	// The connection budget does not grow with capacity: the work pool
	// (claiming, the janitor, the jobs' writes, batched), the API's pool,
	// the heartbeat's, and one session each for the name lock and LISTEN
	// (docs/operations.md, "Connection budget").
	// Every new connection says where the database's history is: after a
	// failover, the work pool's hold back until the claim service has
	// checked what the database may have lost (docs/operations.md,
	// "Failover"); the heartbeat's and the API's only report it.
	history := dbhistory.NewTracker()
	pool, err := openPool(ctx, cfg, int32(cfg.DatabaseMaxConns), "database pool", history.AfterConnect(true))
	if err != nil {
		return err
	}
	defer pool.Close()
	st := store.New(pool)
	if !opts.NoMigrate {
		applied, err := migrate.Migrate(ctx, pool, log)
		if err != nil {
			return fmt.Errorf("migrating the database: %w", err)
		}
		if len(applied) > 0 {
			log.Info("applied migrations", "versions", applied)
		}
	}

	// The name lock and LISTEN need a session of their own: they bypass a
	// transaction pooler through database_direct_url.
	lockConn, err := directConfig(cfg)
	if err != nil {
		return err
	}
	lock, err := acquireNameLock(ctx, lockConn, name, cfg.Agent.StaleJob.Std(), log)
	if err != nil {
		return err
	}
	defer lock.close()
	if err := lock.verifySession(ctx); err != nil {
		return err
	}

	m := metrics.New()
	plugins, err := startPlugins(ctx, cfg, log, m)
	if err != nil {
		return err
	}
	defer plugins.Close()

	commands, err := claimCommands(cfg, plugins, log)
	if err != nil {
		return err
	}
	holder := store.Holder{Name: name, Generation: gen}
	// Whatever this name's previous process held is settled before we claim:
	// restart detection takes start-up time, not stale_job.
	if n, err := janitor.ReleasePreviousWith(ctx, pool, janitor.PreviousConfig{
		Holder: holder, Caps: plugins.Info, Commands: sortedKeys(commands), StaleJob: cfg.Agent.StaleJob.Std(),
	}); err != nil {
		return fmt.Errorf("releasing the previous generation's jobs: %w", err)
	} else if n > 0 {
		log.Info("settled jobs of this agent's previous process", "jobs", n)
	}
	reg := store.Registration{
		Holder: holder, Version: Version, Capacity: cfg.Agent.Capacity,
		Commands: sortedKeys(commands), Plugins: pluginsJSON(plugins),
	}
	if _, err := st.RegisterAgent(ctx, reg); err != nil {
		return err
	}
	log.Info("agent registered", "generation", gen, "capacity", cfg.Agent.Capacity, "commands", sortedKeys(commands))

	// Heartbeats get a pool of their own: a connection the jobs' writes
	// hold can never delay a renewal.
	livePool, err := openPool(ctx, cfg, defaults.HeartbeatConns, "the heartbeat's database pool", history.AfterConnect(false))
	if err != nil {
		return err
	}
	defer livePool.Close()

	// The API's followers are woken through the claim service's LISTEN
	// connection: one per agent however many clients follow.
	follow := notify.New()
	svc := claim.New(st, plugins, claim.Config{
		Holder:       holder,
		Registration: reg, // written again if an operator deletes the row
		Capacity:     cfg.Agent.Capacity,
		Commands:     commands,
		PollInterval: cfg.Agent.PollInterval.Std(),
		Keepalive:    cfg.Agent.Keepalive.Std(),
		LogFlush:     cfg.Logs.FlushInterval.Std(),
		LogMaxBytes:  cfg.Logs.MaxBytesPerStream,
		// Stop before the janitor may act: it waits stale_job from the last
		// renewal; we stop early enough for the slowest stop to end a
		// keepalive before that (see config.SelfFenceAfter).
		SelfFenceAfter: cfg.SelfFenceAfter(),
		CleanupTimeout: cfg.Agent.CleanupTimeout.Std(),
		Liveness:       store.New(livePool),
		ListenConnect:  lockConn.listenConnect, // LISTEN is session state: not through a pooler
		History:        history,
		Follow:         follow,
		Logger:         logger,
		Metrics:        m,
	})

	defaults := map[string]json.RawMessage{}
	for name, c := range cfg.Commands {
		if raw, err := c.ContextJSON(); err == nil {
			defaults[name] = raw
		}
	}
	jan := janitor.New(pool, plugins, janitor.Config{
		Holder:         holder,
		StaleJob:       cfg.Agent.StaleJob.Std(),
		OfflineAfter:   cfg.Agent.OfflineAfter.Std(),
		CleanInterval:  cfg.Agent.CleanInterval.Std(),
		AWOLTimeout:    cfg.Agent.AWOLTimeout.Std(),
		Keepalive:      cfg.Agent.Keepalive.Std(),
		CleanupTimeout: cfg.Agent.CleanupTimeout.Std(),
		AgentRetention: cfg.Agent.AgentRetention.Std(),
		Commands:       defaults,
		Logger:         logger,
		Metrics:        m,
	})

	var draining atomic.Bool
	ready := func(context.Context) error {
		if draining.Load() {
			return fmt.Errorf("agent %s is draining", name)
		}
		return plugins.Ready()
	}
	stopping := make(chan struct{})
	apiPool, err := openPool(ctx, cfg, int32(cfg.HTTP.DatabaseMaxConns), "the API's database pool", history.AfterConnect(false))
	if err != nil {
		return err
	}
	defer apiPool.Close()
	srv, ln, err := listen(cfg, store.New(apiPool), ready, stopping, m, logger, follow, opts.QuietRequests)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("API listening", "addr", ln.Addr().String())
	if opts.Started != nil {
		opts.Started(ln.Addr().String())
	}

	runErr := make(chan error, 1)
	// ctx ending starts the drain; the loops run on until it is done.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	go func() { runErr <- svc.Run(runCtx) }()
	janDone := make(chan struct{})
	go func() {
		defer close(janDone)
		if err := jan.Run(runCtx); err != nil {
			log.Error("janitor stopped", "err", err)
		}
	}()
	defer func() { stopRun(); <-janDone }()
	// The second liveness signal: the jobs of an agent whose name lock is
	// free and that stays silent are settled after dead_after, not stale_job.
	if cfg.Agent.LockLiveness() {
		liveness := janitor.NewLiveness(jan, janitor.LivenessConfig{
			Keepalive: cfg.Agent.Keepalive.Std(), DeadAfter: cfg.Agent.DeadAfter.Std(),
		})
		if err := liveness.Start(runCtx); err != nil {
			return fmt.Errorf("starting the liveness check: %w", err)
		}
		defer liveness.Stop()
	}
	lockErr := make(chan error, 1)
	lockDone := make(chan struct{})
	go func() {
		defer close(lockDone)
		lockErr <- lock.watch(runCtx, cfg.Agent.Keepalive.Std())
	}()
	// The lock's connection is closed (deferred above) only after watch
	// stopped using it.
	defer func() { stopRun(); <-lockDone }()

	var result error
	select {
	case <-ctx.Done():
		draining.Store(true) // /readyz fails first, so load balancers move on
		bg := context.WithoutCancel(ctx)
		if err := st.SetAgentState(bg, holder, "draining"); err != nil {
			log.Warn("marking agent draining", "err", err)
		}
		if _, err := drain.Run(bg, svc, opts.Hurry, drain.Config{
			Handoff:         cfg.Drain.Handoff,
			ShutdownTimeout: cfg.Agent.ShutdownTimeout.Std(),
			StopTimeout:     cfg.DrainStopBound(),
			AgentName:       name,
			Logger:          log,
		}); err != nil {
			log.Error("draining", "err", err)
		}
		stopRun()
		result = <-runErr
	case err := <-runErr:
		result = err
	case err := <-lockErr:
		stopRun()
		<-runErr
		result = err
	case err := <-serveErr:
		stopRun()
		<-runErr
		result = fmt.Errorf("serving the API on %s: %w", cfg.HTTP.Listen, err)
	}

	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.HTTP.ShutdownGrace.Std())
	defer cancel()
	close(stopping) // end followed log streams; other requests finish
	if err := srv.Shutdown(shutCtx); err != nil {
		log.Warn("shutting down the API", "err", err)
	}
	if result == nil {
		if err := st.SetAgentState(shutCtx, holder, "stopped"); err != nil {
			log.Warn("marking agent stopped", "err", err)
		}
	}
	log.Info("agent stopped", "err", result)
	return result
}

// logDumpable says whether jobs running as the agent's user can read its
// environment through /proc; main makes the process non-dumpable.
func logDumpable(log *slog.Logger) {
	dumpable, ok, err := Dumpable()
	switch {
	case !ok:
	case err != nil:
		log.Warn("cannot tell whether the agent process is dumpable", "err", err)
	case dumpable:
		log.Warn("the agent process is dumpable: jobs running as its user can read its environment (DATABASE_URL, API tokens) through /proc; run it through `tether`, which makes itself non-dumpable, or run jobs as another user (shell plugin run_as)")
	default:
		log.Debug("the agent process is non-dumpable: jobs running as its user cannot read its environment or memory")
	}
}

// openPool opens a pool on database_url with maxConns connections
// and checks it answers; what names it in errors. Each connection attempt
// is bounded by database_connect_timeout (see PoolConfig).
func openPool(ctx context.Context, cfg *config.Config, maxConns int32, what string, afterConnect func(context.Context, *pgx.Conn) error) (*pgxpool.Pool, error) {
	pc, err := PoolConfig(cfg)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = maxConns // the budget's: a pool_max_conns in the URL does not widen it
	pc.AfterConnect = afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", what, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, ConnectError(pc.ConnConfig, cfg.DatabaseURL, err)
	}
	return pool, nil
}

// PoolConfig parses database_url and bounds each connection attempt by
// database_connect_timeout unless the URL (connect_timeout) or
// PGCONNECT_TIMEOUT sets its own bound, so a database that accepts and never
// answers fails the start instead of hanging it.
func PoolConfig(cfg *config.Config) (*pgxpool.Config, error) {
	return poolConfigFor(cfg.DatabaseURL, "database_url", cfg.DatabaseConnectTimeout.Std())
}

// poolConfigFor is PoolConfig for the URL of setting (database_url or
// database_direct_url, named in errors).
func poolConfigFor(databaseURL, setting string, connectTimeout time.Duration) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx's parse errors quote the string, password redaction being
		// best effort there: say what is wrong without echoing it.
		return nil, fmt.Errorf("%s: cannot be parsed as a postgres:// URL or key=value connection string (value not shown: it may hold a password); check its syntax, and percent-encode special characters in the password", setting)
	}
	applyConnectTimeout(&pc.ConnConfig.Config, connectTimeout)
	return pc, nil
}

func applyConnectTimeout(c *pgconn.Config, d time.Duration) {
	if c.ConnectTimeout == 0 && d > 0 {
		c.ConnectTimeout = d
	}
}

// ConnectError describes a failed first connection: where to, with the
// URL redacted, and whether the connect timeout ran out. pgx's own message
// names the user and database, never the password.
func ConnectError(c *pgx.ConnConfig, databaseURL string, err error) error {
	return connectErrorFor(c, "database_url", databaseURL, err)
}

// connectErrorFor is ConnectError for the URL of setting.
func connectErrorFor(c *pgx.ConnConfig, setting, databaseURL string, err error) error {
	where := c.Host
	if !strings.HasPrefix(where, "/") { // not a Unix socket directory
		where = net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
	}
	if c.ConnectTimeout > 0 && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("connecting to the database at %s (%s %s): timed out after %s: check that the host and port are a PostgreSQL server and that it is up (database_connect_timeout sets this bound): %w",
			where, setting, config.RedactURL(databaseURL), c.ConnectTimeout, err)
	}
	return fmt.Errorf("connecting to the database at %s (%s %s): %w", where, setting, config.RedactURL(databaseURL), err)
}

func startPlugins(ctx context.Context, cfg *config.Config, log *slog.Logger, met *metrics.Metrics) (*pluginhost.Manager, error) {
	dir := cfg.PluginDir
	if dir == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the plugin directory (set plugin_dir): %w", err)
		}
		dir = filepath.Dir(exe)
	}
	pcs := make(map[string]pluginhost.PluginConfig, len(cfg.Plugins))
	for name, p := range cfg.Plugins {
		raw, err := p.ConfigJSON()
		if err != nil {
			return nil, fmt.Errorf("plugins.%s.config: %w", name, err)
		}
		pcs[name] = pluginhost.PluginConfig{SHA256: p.SHA256, Env: p.Env, PassEnv: p.PassEnv, Config: raw}
	}
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, Plugins: pcs, Logger: log,
		OnCrash: func(plugin string) { met.PluginRestarts.WithLabelValues(plugin).Inc() }})
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	if err := m.Start(ctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("starting plugins from %s: %w", dir, err)
	}
	// Each plugin checks its config and its commands' contexts now, so a
	// bad setting fails the start instead of every job.
	contexts := map[string]map[string]json.RawMessage{}
	for name, c := range cfg.Commands {
		if _, ok := m.Info(c.Plugin); !ok {
			continue // claimCommands leaves it to other agents
		}
		raw, err := c.ContextJSON()
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("commands.%s.context: %w", name, err)
		}
		if contexts[c.Plugin] == nil {
			contexts[c.Plugin] = map[string]json.RawMessage{}
		}
		contexts[c.Plugin][name] = raw
	}
	if err := m.Validate(ctx, contexts); err != nil {
		m.Close()
		return nil, fmt.Errorf("invalid plugin settings:\n%w", err)
	}
	return m, nil
}

// claimCommands returns the configured commands whose plugin is loaded here.
// A command whose plugin is missing is left to other agents, with a warning.
func claimCommands(cfg *config.Config, plugins *pluginhost.Manager, log *slog.Logger) (map[string]claim.Command, error) {
	out := map[string]claim.Command{}
	for name, c := range cfg.Commands {
		if _, ok := plugins.Info(c.Plugin); !ok {
			log.Warn("command's plugin is not loaded here; other agents may run it", "command", name, "plugin", c.Plugin)
			continue
		}
		raw, err := c.ContextJSON()
		if err != nil {
			return nil, fmt.Errorf("commands.%s.context: %w", name, err)
		}
		out[name] = claim.Command{Plugin: c.Plugin, Context: raw}
	}
	return out, nil
}

func pluginsJSON(m *pluginhost.Manager) json.RawMessage {
	type entry struct {
		Version      string   `json:"version"`
		Capabilities []string `json:"capabilities"`
	}
	out := map[string]entry{}
	for name, info := range m.Infos() {
		out[name] = entry{Version: info.Version, Capabilities: info.Capabilities}
	}
	b, _ := json.Marshal(out)
	return b
}

func listen(cfg *config.Config, st *store.Store, ready func(context.Context) error, stopping <-chan struct{}, m *metrics.Metrics, logger *slog.Logger, follow *notify.Hub, quiet bool) (*http.Server, net.Listener, error) {
	var console http.Handler
	if cfg.HTTP.ConsoleOn() {
		console = ui.Handler()
	}
	handler := api.New(api.Options{
		Store:          st,
		Commands:       cfg.Commands,
		Defaults:       &cfg.Defaults,
		Ready:          ready,
		Stopping:       stopping,
		Tokens:         cfg.HTTP.Tokens,
		ListenAddr:     cfg.HTTP.Listen,
		AllowedHosts:   cfg.HTTP.AllowedHosts,
		StaleJob:       cfg.Agent.StaleJob.Std(),
		MaxBodyBytes:   cfg.HTTP.MaxBodyBytes,
		Logger:         logger,
		Metrics:        m.Handler(),
		RequestMetrics: m,
		Follow:         follow,
		QuietRequests:  quiet,
		Console:        console,
	})
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	// A slow or idle client holds a connection only this long. Followed
	// log streams last as long as their job: the logs handler lifts the
	// write deadline for them (net/http drops the read deadline itself once
	// a request's body is read).
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout.Std(),
		ReadTimeout:       cfg.HTTP.ReadTimeout.Std(),
		WriteTimeout:      cfg.HTTP.WriteTimeout.Std(),
		IdleTimeout:       cfg.HTTP.IdleTimeout.Std(),
	}
	return srv, ln, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
