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
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/drain"
	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/migrate"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
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

	// Room for the listener, the log flusher, claiming, the API, and the
	// final writes of every job at once.
	pool, err := openPool(ctx, cfg, int32(cfg.Agent.Capacity+8), "database pool")
	if err != nil {
		return err
	}
	defer pool.Close()
	st := store.New(pool)
	if err := st.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to the database (database_url %s): %w", config.RedactURL(cfg.DatabaseURL), err)
	}
	if !opts.NoMigrate {
		applied, err := migrate.Migrate(ctx, pool, log)
		if err != nil {
			return fmt.Errorf("migrating the database: %w", err)
		}
		if len(applied) > 0 {
			log.Info("applied migrations", "versions", applied)
		}
	}

	lock, err := acquireNameLock(ctx, cfg.DatabaseURL, name, cfg.Agent.StaleJob.Std(), log)
	if err != nil {
		return err
	}
	defer lock.close()

	plugins, err := startPlugins(ctx, cfg, log)
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
	if _, err := st.RegisterAgent(ctx, store.Registration{
		Holder: holder, Version: Version, Capacity: cfg.Agent.Capacity,
		Commands: sortedKeys(commands), Plugins: pluginsJSON(plugins),
	}); err != nil {
		return err
	}
	log.Info("agent registered", "generation", gen, "capacity", cfg.Agent.Capacity, "commands", sortedKeys(commands))

	// Heartbeats get a pool of their own: a connection the jobs' writes
	// hold can never delay a renewal.
	livePool, err := openPool(ctx, cfg, 2, "the heartbeat's database pool")
	if err != nil {
		return err
	}
	defer livePool.Close()

	m := metrics.New()
	svc := claim.New(st, plugins, claim.Config{
		Holder:       holder,
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
	srv, ln, err := listen(cfg, st, ready, stopping, m, logger)
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

// openPool opens a pool on database_url with at least maxConns
// connections; what names it in errors.
func openPool(ctx context.Context, cfg *config.Config, maxConns int32, what string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", err)
	}
	pc.MaxConns = max(pc.MaxConns, maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", what, err)
	}
	return pool, nil
}

func startPlugins(ctx context.Context, cfg *config.Config, log *slog.Logger) (*pluginhost.Manager, error) {
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
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, Plugins: pcs, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	if err := m.Start(ctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("starting plugins from %s: %w", dir, err)
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

func listen(cfg *config.Config, st *store.Store, ready func(context.Context) error, stopping <-chan struct{}, m *metrics.Metrics, logger *slog.Logger) (*http.Server, net.Listener, error) {
	handler := api.New(api.Options{
		Store:        st,
		Commands:     cfg.Commands,
		Defaults:     &cfg.Defaults,
		Ready:        ready,
		Stopping:     stopping,
		Tokens:       cfg.HTTP.Tokens,
		StaleJob:     cfg.Agent.StaleJob.Std(),
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
		Logger:       logger,
		Metrics:      m.Handler(),
	})
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
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
