// Package agent wires one tether agent process together. It opens the
// database, schema and plugins, registers, and runs the claim loop and the
// HTTP API.
package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/dbsecret"
	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/drain"
	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/startstop"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/internal/store/migrate"
	"github.com/tetherjobs/tether/internal/ui"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// Options are the knobs of Run that are not configuration.
type Options struct {
	// Hurry, closed by a second signal, cuts the drain's wait short.
	Hurry     <-chan struct{}
	NoMigrate bool
	// Getenv reads the environment (nil = os.Getenv). Tests pass their own.
	Getenv func(string) string
	// Listening, if set, is called once the HTTP port is open (before the
	// database is), with its address: /healthz answers from then on.
	Listening func(addr string)
	// Started, if set, is called once the API is serving, with its address.
	Started func(addr string)
	// QuietRequests logs the API's request lines at debug (tether dev).
	QuietRequests bool
}

// Run runs an agent until ctx is cancelled, then drains it (see
// internal/drain) and shuts it down. It opens the database, starts the
// plugins, registers the agent and starts its services, in that order. What
// a step opened is closed, in reverse order, when Run returns.
//
// The services stop in this order. The drain ends the loops' context, and
// the claim service stops its jobs and returns. The API stops next, and the
// agent is marked stopped. The other loops are waited for last, before the
// pools close.
func Run(ctx context.Context, cfg *config.Config, logger *slog.Logger, opts Options) error {
	a, err := newAgent(ctx, cfg, logger, opts)
	if err != nil {
		return err
	}
	defer a.close()
	for _, step := range []func(context.Context) error{
		a.listen,
		a.openDatabase,
		a.startPlugins,
		a.register,
		a.buildServices,
		a.serveAPI,
		a.startLoops,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return a.shutdown(ctx, a.wait(ctx))
}

// agent is one Run. It holds what its steps open and start.
type agent struct {
	cfg    *config.Config
	opts   Options
	name   string
	holder store.Holder
	log    *slog.Logger // with the agent's name
	logger *slog.Logger // Run's, handed to the services

	// closers run in reverse order when Run returns.
	closers []func()

	history  *dbhistory.Tracker
	pool     *pgxpool.Pool    // the work pool
	secret   *dbsecret.Source // database_secret, read again for new connections; nil when unset
	st       *store.Store     // on the work pool
	lockConn directConn
	lock     *nameLock

	metrics  *metrics.Metrics
	plugins  *pluginhost.Manager
	graces   config.KillGraces // what the plugins reported
	commands map[string]claim.Command
	reg      store.Registration
	// announcedUnhealthy says the agents row names plugins failing their
	// health check. pausedCommands are the commands not claimed for it.
	// Both belong to checkPluginHealth's loop.
	announcedUnhealthy bool
	pausedCommands     []string

	follow   *notify.Hub
	svc      *claim.Service
	jan      *janitor.Service
	draining atomic.Bool
	stopping chan struct{} // closed at shutdown: followed log streams end

	// handler is what the HTTP server serves: api.BootHandler from the
	// start, the API once serveAPI built it. boot is what BootHandler says.
	handler atomic.Pointer[http.Handler]
	bootMu  sync.Mutex
	boot    api.Boot

	// The services. Any of api, claims and lockWatch returning on its own
	// ends Run.
	api       *apiServer
	claims    *startstop.Loop    // svc.Run
	lockWatch *startstop.Loop    // the name lock's watch
	stopRun   context.CancelFunc // ends the loops startLoops started
}

// newAgent resolves the agent's name and generation.
func newAgent(ctx context.Context, cfg *config.Config, logger *slog.Logger, opts Options) (*agent, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	secret, err := DatabaseSecret(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	if cfg.DatabaseURL == "" {
		return nil, errors.New("database_url is not set: set DATABASE_URL or database_url in the config file (or use `tether dev`, which starts a private PostgreSQL)")
	}
	name, err := resolveName(ctx, cfg.Agent.Name, opts.Getenv)
	if err != nil {
		return nil, err
	}
	gen, err := newGeneration()
	if err != nil {
		return nil, err
	}
	log := logger.With("agent", name)
	logDumpable(log)
	return &agent{
		cfg: cfg, opts: opts, name: name, log: log, logger: logger, secret: secret,
		holder:   store.Holder{Name: name, Generation: gen},
		stopping: make(chan struct{}),
		metrics:  metrics.New(),
		boot:     api.Boot{Status: "starting", Detail: "connecting to the database"},
	}, nil
}

// listen opens the HTTP port and serves api.BootHandler on it until
// serveAPI hands it the API: /healthz answers from process start, so a
// container health check does not replace a task that waits for the
// database or a migration, and /readyz says what it waits for.
func (a *agent) listen(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", a.cfg.HTTP.Listen, err)
	}
	var boot http.Handler = api.BootHandler(a.bootState, a.metrics.Handler())
	a.handler.Store(&boot)
	// A slow or idle client holds a connection only this long. Followed log
	// streams last as long as their job. The logs handler lifts the write
	// deadline for them (net/http drops the read deadline itself once a
	// request's body is read).
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			(*a.handler.Load()).ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: a.cfg.HTTP.ReadHeaderTimeout.Std(),
		ReadTimeout:       a.cfg.HTTP.ReadTimeout.Std(),
		WriteTimeout:      a.cfg.HTTP.WriteTimeout.Std(),
		IdleTimeout:       a.cfg.HTTP.IdleTimeout.Std(),
	}
	a.api = newAPIServer(srv, ln, a.stopping, a.cfg.HTTP.ShutdownGrace.Std(), a.log)
	if err := a.api.Start(ctx); err != nil {
		return err
	}
	a.onClose(a.api.Stop)
	a.log.Info("HTTP listening (starting: /healthz answers, /readyz 503 until the API is up)", "addr", ln.Addr().String())
	if a.opts.Listening != nil {
		a.opts.Listening(ln.Addr().String())
	}
	return nil
}

// bootState is what /readyz says before the API is up.
func (a *agent) bootState() api.Boot {
	a.bootMu.Lock()
	defer a.bootMu.Unlock()
	return a.boot
}

func (a *agent) setBoot(b api.Boot) {
	a.bootMu.Lock()
	defer a.bootMu.Unlock()
	a.boot = b
}

// migrate migrates the schema on a connection of its own, closed after, so
// pg_stat_activity tells a migration from the work pool's traffic. While it
// waits for the migration lock, /readyz says who holds it (migrate.Run logs
// it too).
func (a *agent) migrate(ctx context.Context) error {
	pool, err := a.openPool(ctx, poolMigrate, 1, "the migrations' database connection", a.history.AfterConnect(false))
	if err != nil {
		return err
	}
	defer pool.Close()
	a.setBoot(api.Boot{Status: "migrating", Detail: "migrating the database schema"})
	applied, err := migrate.Run(ctx, pool, migrate.Options{Logger: a.log, Waiting: func(h *migrate.Holder) {
		b := api.Boot{Status: "migrating", Detail: "waiting for the schema migration lock, held by another session"}
		if h != nil {
			b.Detail = fmt.Sprintf("waiting for the schema migration lock, held by pid %d (application %q, client %s) for %s",
				h.PID, h.ApplicationName, h.ClientAddr, h.For.Round(time.Second))
			b.MigrationLock = &wire.MigrationLock{PID: h.PID, ApplicationName: h.ApplicationName,
				ClientAddr: h.ClientAddr, HeldSeconds: h.For.Seconds()}
		}
		a.setBoot(b)
	}})
	if err != nil {
		return fmt.Errorf("migrating the database: %w", err)
	}
	if len(applied) > 0 {
		a.log.Info("applied migrations", "versions", applied)
	}
	a.setBoot(api.Boot{Status: "starting", Detail: "taking the agent's name lock, starting plugins, registering"})
	return nil
}

// onClose adds f to what Run closes when it returns, before what was added
// earlier.
func (a *agent) onClose(f func()) { a.closers = append(a.closers, f) }

func (a *agent) close() {
	for _, f := range slices.Backward(a.closers) {
		f()
	}
}

// openDatabase opens the work pool, migrates the schema and takes the
// agent's name lock.
//
// The connection budget does not grow with capacity. It is the work pool
// (claiming, the janitor, the jobs' writes, batched), the API's pool, the
// heartbeat's, and one session each for the name lock and LISTEN
// (docs/operations.md, "Connection budget"). Every new connection says
// where the database's history is. After a failover, the work pool's hold
// back until the claim service has checked what the database may have lost
// (docs/operations.md, "Failover"). The heartbeat's and the API's only
// report it.
func (a *agent) openDatabase(ctx context.Context) error {
	a.history = dbhistory.NewTracker()
	pool, err := a.openPool(ctx, poolWork, int32(a.cfg.DatabaseMaxConns), "database pool", a.history.AfterConnect(true))
	if err != nil {
		return err
	}
	a.onClose(pool.Close)
	a.pool, a.st = pool, store.New(pool, a.txIdle())
	if !a.opts.NoMigrate {
		if err := a.migrate(ctx); err != nil {
			return err
		}
	}
	// The name lock and LISTEN need a session of their own. They bypass a
	// transaction pooler through database_direct_url.
	if a.lockConn, err = directConfig(a.cfg, a.name); err != nil {
		return err
	}
	lock, err := acquireNameLock(ctx, a.lockConn, a.name, a.cfg.Agent.StaleJob.Std(), a.log)
	if err != nil {
		return err
	}
	a.onClose(lock.close)
	a.lock = lock
	return lock.verifySession(ctx)
}

// startPlugins starts the plugins, picks the commands this agent runs, has
// the plugins check their settings and checks the self-fence arithmetic with
// the kill graces they report.
func (a *agent) startPlugins(ctx context.Context) error {
	plugins, commands, graces, err := startPlugins(ctx, a.cfg, a.log, a.metrics)
	if err != nil {
		return err
	}
	a.onClose(plugins.Close)
	a.plugins, a.commands, a.graces = plugins, commands, graces
	if err := a.cfg.CheckKillGraces(graces); err != nil {
		return fmt.Errorf("invalid timings with the kill graces the plugins report:\n%w", err)
	}
	a.log.Info("drain fits the stop timeout", "stop_timeout", a.cfg.Drain.StopTimeout.Std(),
		"drain_max", a.cfg.DrainTotal(graces), "shutdown_timeout", a.cfg.Agent.ShutdownTimeout.Std(),
		"stop_bound", a.cfg.DrainStopBound(graces), "http_shutdown_grace", a.cfg.HTTP.ShutdownGrace.Std())
	a.metrics.Known(metrics.Agent{
		Version: Version(), Capacity: a.cfg.Agent.Capacity,
		Commands: sortedKeys(a.commands), Plugins: sortedKeys(plugins.Infos()),
	})
	return nil
}

// register settles whatever this name's previous process held, so restart
// detection takes start-up time, not stale_job, then registers the agent.
func (a *agent) register(ctx context.Context) error {
	if n, err := janitor.ReleasePreviousWith(ctx, a.pool, janitor.PreviousConfig{
		Holder: a.holder, Caps: a.plugins.Info, Commands: sortedKeys(a.commands), StaleJob: a.cfg.Agent.StaleJob.Std(),
	}); err != nil {
		return fmt.Errorf("releasing the previous generation's jobs: %w", err)
	} else if n > 0 {
		a.log.Info("settled jobs of this agent's previous process", "jobs", n)
	}
	a.reg = store.Registration{
		Holder: a.holder, Version: Version(), Capacity: a.cfg.Agent.Capacity,
		Commands: sortedKeys(a.commands), Plugins: pluginsJSON(a.plugins),
		CommandSpecs: commandSpecs(a.cfg, a.commands),
		Timings: store.Timings{
			Keepalive: a.cfg.Agent.Keepalive.Std(), DeadAfter: a.cfg.Agent.DeadAfter.Std(),
			StaleJob: a.cfg.Agent.StaleJob.Std(), SelfFenceAfter: a.cfg.SelfFenceAfter(a.graces),
		},
	}
	if _, err := a.st.RegisterAgent(ctx, a.reg); err != nil {
		return err
	}
	a.log.Info("agent registered", "generation", a.holder.Generation, "capacity", a.cfg.Agent.Capacity, "commands", sortedKeys(a.commands))
	return nil
}

// buildServices opens the heartbeat's pool and builds the claim service and
// the janitor.
func (a *agent) buildServices(ctx context.Context) error {
	cfg := a.cfg
	// Heartbeats get a pool of their own, so a connection the jobs' writes
	// hold can never delay a renewal.
	livePool, err := a.openPool(ctx, poolHeartbeat, defaults.HeartbeatConns, "the heartbeat's database pool", a.history.AfterConnect(false))
	if err != nil {
		return err
	}
	a.onClose(livePool.Close)

	// The API's followers are woken through the claim service's LISTEN
	// connection. There is one per agent however many clients follow.
	a.follow = notify.New()
	a.svc = claim.New(a.st, a.plugins, claim.Config{
		Holder:       a.holder,
		Registration: a.reg, // written again if an operator deletes the row
		Capacity:     cfg.Agent.Capacity,
		Commands:     a.commands,
		PollInterval: cfg.Agent.PollInterval.Std(),
		Keepalive:    cfg.Agent.Keepalive.Std(),
		LogFlush:     cfg.Logs.FlushInterval.Std(),
		LogMaxBytes:  cfg.Logs.MaxBytesPerStream,
		// 0: sized from the capacity (claim.DefaultLogBufferBudget).
		LogBufferBudget: cfg.Logs.BufferBudget,
		// Stop before the janitor may act. It waits stale_job from the last
		// renewal. We stop early enough for the slowest stop to end a
		// keepalive before that (see config.SelfFenceAfter).
		SelfFenceAfter: cfg.SelfFenceAfter(a.graces),
		CleanupTimeout: cfg.Agent.CleanupTimeout.Std(),
		Liveness:       store.New(livePool, a.txIdle()),
		ListenConnect:  a.lockConn.listenConnect, // LISTEN is session state: not through a pooler
		History:        a.history,
		Follow:         a.follow,
		Logger:         a.logger,
		Metrics:        a.metrics,
	})

	contexts := map[string]json.RawMessage{}
	for name, c := range cfg.Commands {
		if raw, err := c.ContextJSON(); err == nil {
			contexts[name] = raw
		}
	}
	a.jan = janitor.New(a.pool, a.plugins, janitor.Config{
		Holder:         a.holder,
		StaleJob:       cfg.Agent.StaleJob.Std(),
		OfflineAfter:   cfg.Agent.OfflineAfter.Std(),
		CleanInterval:  cfg.Agent.CleanInterval.Std(),
		AWOLTimeout:    cfg.Agent.AWOLTimeout.Std(),
		Keepalive:      cfg.Agent.Keepalive.Std(),
		CleanupTimeout: cfg.Agent.CleanupTimeout.Std(),
		AgentRetention: cfg.Agent.AgentRetention.Std(),
		Commands:       contexts,
		Logger:         a.logger,
		Metrics:        a.metrics,
	})
	return nil
}

// serveAPI opens the API's pool and serves the API on the port listen
// opened.
func (a *agent) serveAPI(ctx context.Context) error {
	ready := func(context.Context) error {
		if a.draining.Load() {
			return fmt.Errorf("agent %s is draining", a.name)
		}
		if err := a.plugins.Ready(); err != nil {
			return err
		}
		return unhealthyError(a.plugins.Unhealthy(), a.commands)
	}
	apiPool, err := a.openPool(ctx, poolAPI, int32(a.cfg.HTTP.DatabaseMaxConns), "the API's database pool", a.history.AfterConnect(false))
	if err != nil {
		return err
	}
	a.onClose(apiPool.Close)
	h := apiHandler(a.cfg, store.New(apiPool, a.txIdle()), ready, a.stopping, a.metrics, a.logger, a.follow, a.opts.QuietRequests)
	a.handler.Store(&h)
	addr := a.api.Addr()
	a.log.Info("API listening", "addr", addr)
	if a.opts.Started != nil {
		a.opts.Started(addr)
	}
	return nil
}

// startLoops starts the claim service, the janitor's services, the liveness
// check and the name lock's watch, in that order. ctx ending starts the
// drain. The loops run on until it is done. Run stops them all when it
// returns.
func (a *agent) startLoops(ctx context.Context) error {
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	a.stopRun = stopRun
	a.claims = startstop.New("claim service", a.svc.Run)
	a.lockWatch = startstop.New("name lock watch", func(ctx context.Context) error {
		return a.lock.watch(ctx, a.cfg.Agent.Keepalive.Std())
	})
	loops := []startstop.Service{a.claims, a.jan.PassLoop(), a.jan.CleanupWorker()}
	// The second liveness signal. The jobs of an agent whose name lock is
	// free and that stays silent are settled after dead_after, not stale_job.
	if a.cfg.Agent.LockLiveness() {
		loops = append(loops, janitor.NewLiveness(a.jan, janitor.LivenessConfig{
			Keepalive: a.cfg.Agent.Keepalive.Std(), DeadAfter: a.cfg.Agent.DeadAfter.Std(),
		}))
	}
	loops = append(loops, a.lockWatch, startstop.Timer("plugin health", 0, a.checkPluginHealth))
	// The lock's connection is closed (by openDatabase's closer) only after
	// the watch stopped using it.
	a.onClose(func() {
		stopRun()
		startstop.StopAll(loops...)
	})
	return startstop.StartAll(runCtx, loops...)
}

// txIdle bounds idling inside the agent's transactions by its keepalive: a
// frozen agent holds its jobs' rows no longer than that, well inside the
// stale_job after which other agents' janitors act on them.
func (a *agent) txIdle() store.Option { return store.TxIdle(a.cfg.Agent.Keepalive.Std()) }

// checkPluginHealth runs the plugins' health checks once, exports their
// outcome, stops claiming the commands of the failing ones (and claims
// again once they pass), announces them in the agents row, and returns when
// to check again.
func (a *agent) checkPluginHealth(ctx context.Context) time.Duration {
	said := map[string]string{} // the failing plugins, with their checks' errors
	for _, h := range a.plugins.CheckHealth(ctx, pluginhost.HealthTimeout) {
		ok := 0.0
		if h.Err == nil {
			ok = 1
		} else {
			said[h.Plugin] = h.Err.Error()
		}
		a.metrics.PluginHealthy.WithLabelValues(h.Plugin).Set(ok)
	}
	if ctx.Err() != nil {
		return a.cfg.Agent.HealthInterval.Std() // stopping: a cancelled check says nothing of the plugin
	}
	paused := a.svc.SetUnhealthy(said)
	// Announced while any fails (a re-registered row starts empty) and once
	// more when all pass again.
	if len(said) > 0 || a.announcedUnhealthy {
		if err := a.st.SetUnhealthyPlugins(ctx, a.holder, said); err != nil {
			a.log.Warn("announcing plugin health", "err", err)
		} else {
			a.announcedUnhealthy = len(said) > 0
		}
	}
	if !slices.Equal(paused, a.pausedCommands) {
		if len(paused) > 0 {
			a.log.Warn("not claiming jobs of commands whose plugin fails its health check", "commands", paused)
		} else {
			a.log.Info("claiming jobs of every command again: their plugins pass their health checks")
		}
		a.pausedCommands = paused
	}
	return a.cfg.Agent.HealthInterval.Std()
}

// unhealthyError names each plugin whose latest health check failed, with
// the commands it serves here. nil when none failed.
func unhealthyError(bad map[string]error, commands map[string]claim.Command) error {
	byPlugin := map[string][]string{}
	for c, cmd := range commands {
		byPlugin[cmd.Plugin] = append(byPlugin[cmd.Plugin], c)
	}
	var errs []error
	for _, name := range sortedKeys(bad) {
		cmds := byPlugin[name]
		slices.Sort(cmds)
		errs = append(errs, fmt.Errorf("plugin %q (commands %s) is unhealthy: %w", name, strings.Join(cmds, ", "), bad[name]))
	}
	return errors.Join(errs...)
}

// wait runs until ctx ends or a drain is requested through the database
// (then drains) or a service fails, and returns why the agent stops (nil
// after a drain).
func (a *agent) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		a.drain(ctx)
		a.stopRun()
		return a.claims.Wait()
	case <-a.svc.DrainRequested():
		// As on SIGTERM: an operator asked for it through the database.
		a.log.Info("drain requested through the database (tether agent drain): draining")
		a.drain(ctx)
		a.stopRun()
		return a.claims.Wait()
	case <-a.claims.Done():
		return a.claims.Wait()
	case <-a.lockWatch.Done():
		a.stopRun()
		_ = a.claims.Wait()
		return a.lockWatch.Wait()
	case <-a.api.Done():
		a.stopRun()
		_ = a.claims.Wait()
		return fmt.Errorf("serving the API on %s: %w", a.cfg.HTTP.Listen, a.api.Err())
	}
}

// drain marks the agent draining and hands off or stops its jobs.
func (a *agent) drain(ctx context.Context) {
	a.draining.Store(true) // /readyz fails first, so load balancers move on
	bg := context.WithoutCancel(ctx)
	if err := a.st.SetAgentState(bg, a.holder, "draining"); err != nil {
		a.log.Warn("marking agent draining", "err", err)
	}
	if _, err := drain.Run(bg, a.svc, a.opts.Hurry, drain.Config{
		Handoff:         a.cfg.Drain.Handoff,
		ShutdownTimeout: a.cfg.Agent.ShutdownTimeout.Std(),
		StopTimeout:     a.cfg.DrainStopBound(a.graces),
		AgentName:       a.name,
		Logger:          a.log,
	}); err != nil {
		a.log.Error("draining", "err", err)
	}
}

// shutdown stops the API and, after a clean stop, marks the agent stopped.
// It returns result.
func (a *agent) shutdown(ctx context.Context, result error) error {
	// The API's shutdown and the stopped mark share http.shutdown_grace.
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.HTTP.ShutdownGrace.Std())
	defer cancel()
	a.api.Stop()
	if result == nil {
		if err := a.st.SetAgentState(shutCtx, a.holder, "stopped"); err != nil {
			a.log.Warn("marking agent stopped", "err", err)
		}
	}
	a.log.Info("agent stopped", "err", result)
	return result
}

// logDumpable says whether jobs running as the agent's user can read its
// environment through /proc. main makes the process non-dumpable.
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

// openPool opens the pool named pool on database_url with maxConns
// connections and checks it answers. what names it in errors. Each
// connection attempt is bounded by database_connect_timeout (see
// PoolConfig), and each says its agent and pool in application_name.
func (a *agent) openPool(ctx context.Context, pool string, maxConns int32, what string, afterConnect func(context.Context, *pgx.Conn) error) (*pgxpool.Pool, error) {
	cfg := a.cfg
	pc, err := PoolConfig(cfg)
	if err != nil {
		return nil, err
	}
	SetApplicationName(&pc.ConnConfig.Config, a.name, pool)
	pc.MaxConns = maxConns // the budget's: a pool_max_conns in the URL does not widen it
	pc.MinConns = 0
	pc.MaxConnIdleTime = defaults.ConnMaxIdleTime
	pc.AfterConnect = afterConnect
	if a.secret != nil {
		pc.BeforeConnect = a.secret.BeforeConnect
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", what, err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, ConnectError(pc.ConnConfig, cfg.DatabaseURL, err)
	}
	return p, nil
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
		// pgx's parse errors quote the string, password redaction being best
		// effort there. Say what is wrong without echoing it.
		return nil, fmt.Errorf("%s: cannot be parsed as a postgres:// URL or key=value connection string (value not shown: it may hold a password); check its syntax, and percent-encode special characters in the password", setting)
	}
	// The URL's connect_timeout or PGCONNECT_TIMEOUT wins. Validation keeps
	// database_connect_timeout positive, and a zero one sets no bound.
	pc.ConnConfig.ConnectTimeout = cmp.Or(pc.ConnConfig.ConnectTimeout, connectTimeout)
	return pc, nil
}

// ConnectError describes a failed first connection. It says where to, with
// the URL redacted, and whether the connect timeout ran out. pgx's own
// message names the user and database, never the password.
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

// startPlugins starts the plugins found in plugin_dir and has each check
// its config and its commands' default contexts, so a bad setting fails the
// start instead of every job. It returns the commands the agent runs
// (claimCommands) and the kill graces the plugins report.
func startPlugins(ctx context.Context, cfg *config.Config, log *slog.Logger, met *metrics.Metrics) (*pluginhost.Manager, map[string]claim.Command, config.KillGraces, error) {
	m, dir, err := newPluginManager(cfg, log, met)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := m.Start(ctx); err != nil {
		m.Close()
		return nil, nil, nil, fmt.Errorf("starting plugins from %s: %w", dir, err)
	}
	commands, err := claimCommands(cfg, m, log)
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	graces, err := m.Validate(ctx, pluginContexts(commands))
	if err != nil {
		m.Close()
		return nil, nil, nil, fmt.Errorf("invalid plugin settings:\n%w", err)
	}
	return m, commands, graces, nil
}

// newPluginManager returns the manager of the plugins in plugin_dir (the
// executable's directory by default), with their settings, and that
// directory.
func newPluginManager(cfg *config.Config, log *slog.Logger, met *metrics.Metrics) (*pluginhost.Manager, string, error) {
	dir := cfg.PluginDir
	if dir == "" {
		var err error
		if dir, err = executableDir(os.Executable, os.Args[0]); err != nil {
			return nil, "", fmt.Errorf("finding the plugin directory (set plugin_dir): %w", err)
		}
	}
	pcs := make(map[string]pluginhost.PluginConfig, len(cfg.Plugins))
	for name, p := range cfg.Plugins {
		raw, err := p.ConfigJSON()
		if err != nil {
			return nil, "", fmt.Errorf("plugins.%s.config: %w", name, err)
		}
		pcs[name] = pluginhost.PluginConfig{SHA256: p.SHA256, Env: p.Env, PassEnv: p.PassEnv, Config: raw}
	}
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, Plugins: pcs, Logger: log, Only: commandPlugins(cfg), HostVersion: Version(),
		OnCrash: func(plugin string) { met.PluginRestarts.WithLabelValues(plugin).Inc() }})
	if err != nil {
		return nil, "", fmt.Errorf("plugins: %w", err)
	}
	return m, dir, nil
}

// commandPlugins names the plugins the configured commands use, the only
// ones the agent starts (never nil).
func commandPlugins(cfg *config.Config) []string {
	out := []string{}
	for _, c := range cfg.Commands {
		out = append(out, c.Plugin)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// pluginContexts returns the default context of every command the agent
// runs (claimCommands), by plugin and command name, for Validate.
func pluginContexts(commands map[string]claim.Command) map[string]map[string]json.RawMessage {
	contexts := map[string]map[string]json.RawMessage{}
	for name, c := range commands {
		if contexts[c.Plugin] == nil {
			contexts[c.Plugin] = map[string]json.RawMessage{}
		}
		contexts[c.Plugin][name] = c.Context
	}
	return contexts
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

// commandSpecs is what this agent announces of the commands it serves, so
// that any agent accepts their submits as this one would.
func commandSpecs(cfg *config.Config, served map[string]claim.Command) map[string]store.CommandSpec {
	out := make(map[string]store.CommandSpec, len(served))
	for name := range served {
		out[name] = api.SpecOf(cfg.Commands[name], cfg.Defaults)
	}
	return out
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

func apiHandler(cfg *config.Config, st *store.Store, ready func(context.Context) error, stopping <-chan struct{}, m *metrics.Metrics, logger *slog.Logger, follow *notify.Hub, quiet bool) http.Handler {
	var console http.Handler
	if cfg.HTTP.ConsoleOn() {
		console = ui.Handler()
	}
	return api.New(api.Options{
		Store:          st,
		Commands:       cfg.Commands,
		Defaults:       &cfg.Defaults,
		Ready:          ready,
		Stopping:       stopping,
		Tokens:         cfg.HTTP.Tokens,
		ListenAddr:     cfg.HTTP.Listen,
		AllowedHosts:   cfg.HTTP.AllowedHosts,
		StaleJob:       cfg.Agent.StaleJob.Std(),
		Keepalive:      cfg.Agent.Keepalive.Std(),
		DeadAfter:      cfg.Agent.DeadAfter.Std(),
		MaxBodyBytes:   cfg.HTTP.MaxBodyBytes,
		Logger:         logger,
		Metrics:        m.Handler(),
		RequestMetrics: m,
		Follow:         follow,
		QuietRequests:  quiet,
		Console:        console,
	})
}

// sortedKeys is never nil: an empty map gives an empty list.
func sortedKeys[V any](m map[string]V) []string {
	out := slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
	slices.Sort(out)
	return out
}

// executableDir is the directory of the running executable. Where
// /proc/self/exe cannot be read (a sandbox or chroot without /proc), an
// absolute argv[0], as a container's entrypoint gives, says it as well.
func executableDir(executable func() (string, error), argv0 string) (string, error) {
	exe, err := executable()
	if err == nil {
		return filepath.Dir(exe), nil
	}
	if filepath.IsAbs(argv0) {
		return filepath.Dir(argv0), nil
	}
	return "", err
}
