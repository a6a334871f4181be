// Package pluginhost runs the agent's plugin processes. It discovers plugin
// binaries, starts each once with go-plugin (gRPC, AutoMTLS, optional SHA-256
// pinning, scrubbed environment), shares each process among concurrent jobs,
// and restarts a process that crashed for the next job.
package pluginhost

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// BinaryPrefix starts the file name of every plugin binary:
// tether-plugin-<name>.
const BinaryPrefix = "tether-plugin-"

const (
	defaultStartTimeout = 10 * time.Second
	// exitWait bounds how long a failed call waits to see whether the
	// plugin process died, to tell a crash from a broken connection.
	exitWait = 5 * time.Second
	// renewTimeout bounds one Renew. A live plugin answers at once, and
	// one that does not (stuck, dying) must not hold up the others' next
	// renewal.
	renewTimeout = 2 * time.Second
)

// Config configures a Manager.
type Config struct {
	Dir          string                  // where tether-plugin-<name> binaries live
	Plugins      map[string]PluginConfig // per plugin name; plugins found in Dir need no entry
	Logger       *slog.Logger
	StartTimeout time.Duration // for one process to start and answer Info; default 10s
	// OnCrash is called with the plugin's name each time one of its
	// processes crashes (the next call starts another). nil: nothing.
	OnCrash func(plugin string)
	// HostVersion is the agent's version, told to every plugin process
	// (plugin.HostEnv).
	HostVersion string
	// Only, when not nil, names the plugins to start: those the agent's
	// commands use. Other binaries in Dir are left alone, so a broken or
	// unrelated one cannot stop the agent. nil starts every one found.
	Only []string
}

// PluginConfig is one plugin's section of the agent's config.
type PluginConfig struct {
	SHA256 string // hex SHA-256 the binary must have; empty: not checked
	Env    map[string]string
	// PassEnv names agent environment variables passed through. An entry may
	// end with * as a prefix wildcard. DATABASE_URL, PG* and TETHER_* never
	// pass (config.SecretEnv).
	PassEnv []string
	Config  json.RawMessage // handed to the plugin as Job.Config
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Manager owns the plugin processes. Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	started bool // Start was called
	ready   bool // Start succeeded
	closed  bool
	procs   map[string]*proc
}

// New validates cfg and returns a Manager. Start starts the plugins.
func New(cfg Config) (*Manager, error) {
	if cfg.Dir == "" {
		return nil, errors.New("plugin dir: must be set")
	}
	if cfg.StartTimeout < 0 {
		return nil, fmt.Errorf("plugin start timeout %s: must not be negative", cfg.StartTimeout)
	}
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, defaultStartTimeout)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	for name, pc := range cfg.Plugins {
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("plugins.%s: a plugin name is lower-case letters, digits, - and _", name)
		}
		if pc.SHA256 != "" {
			if b, err := hex.DecodeString(pc.SHA256); err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("plugins.%s.sha256: want 64 hex digits, got %q", name, pc.SHA256)
			}
		}
		if err := validatePassEnv(pc.PassEnv); err != nil {
			return nil, fmt.Errorf("plugins.%s.%w", name, err)
		}
		if len(pc.Config) > 0 && !json.Valid(pc.Config) {
			return nil, fmt.Errorf("plugins.%s.config: not valid JSON", name)
		}
	}
	return &Manager{cfg: cfg, log: cfg.Logger, procs: map[string]*proc{}}, nil
}

// Start discovers the plugin binaries in Dir, starts each once and checks
// that its Info names it. A plugin configured but not found is an error. On
// error every process Start started is stopped.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started || m.closed {
		m.mu.Unlock()
		return errors.New("plugin manager: Start called twice or after Close")
	}
	m.started = true
	m.mu.Unlock()

	found, err := m.discover()
	if err != nil {
		return err
	}
	var errs []error
	for name := range m.cfg.Plugins {
		if _, ok := found[name]; !ok {
			errs = append(errs, fmt.Errorf("plugins.%s: no binary %s%s in plugin dir %s", name, BinaryPrefix, name, m.cfg.Dir))
		}
	}
	names := m.toStart(found)

	procs := map[string]*proc{}
	for _, name := range names {
		pc := m.cfg.Plugins[name]
		p := &proc{
			name:         name,
			path:         found[name],
			cfg:          pc,
			env:          scrubbedEnv(os.Environ(), pc.PassEnv, pc.Env),
			startTimeout: m.cfg.StartTimeout,
			hostVersion:  m.cfg.HostVersion,
			log:          m.log.With("plugin", name),
			onCrash:      m.cfg.OnCrash,
		}
		procs[name] = p
		if _, err := p.acquire(ctx); err != nil {
			errs = append(errs, fmt.Errorf("starting plugin %q: %w", name, err))
		}
	}

	m.mu.Lock()
	m.procs = procs
	if m.closed {
		errs = append(errs, errors.New("plugin manager closed while starting"))
	}
	err = errors.Join(errs...)
	m.ready = err == nil
	m.mu.Unlock()
	if err != nil {
		for _, p := range procs {
			p.close()
		}
	}
	return err
}

// toStart returns the names of the found plugins to start, sorted: all of
// them, or those in cfg.Only.
func (m *Manager) toStart(found map[string]string) []string {
	names := make([]string, 0, len(found))
	for name := range found {
		if m.cfg.Only != nil && !slices.Contains(m.cfg.Only, name) {
			m.log.Info("plugin not started: no command of this agent uses it", "plugin", name)
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// KillGraces are the longest stop times the plugins reported through
// Validate (plugin.KillGracer), by plugin name. A plugin that reported none
// is absent.
type KillGraces map[string]time.Duration

// Validate asks every started plugin to check its config and the default
// contexts of the commands that use it (contexts: plugin name → command name
// → context JSON), through the plugin's own Validate. Each problem becomes an
// error naming its key, plugins.<name>.config.<field> or
// commands.<command>.context.<field>, with the plugin's message. A plugin
// built before Validate existed has nothing checked (logged at debug). It
// returns the longest stop time each plugin reported.
func (m *Manager) Validate(ctx context.Context, contexts map[string]map[string]json.RawMessage) (KillGraces, error) {
	m.mu.Lock()
	procs := m.procs
	m.mu.Unlock()
	for name := range contexts {
		if _, ok := procs[name]; !ok {
			return nil, fmt.Errorf("validating plugin settings: plugin %q is not started", name)
		}
	}
	graces := KillGraces{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(procs)) {
		v, err := procs[name].validate(ctx, contexts[name])
		if err != nil {
			errs = append(errs, err)
		}
		if v.HasMaxKillGrace {
			graces[name] = v.MaxKillGrace
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return graces, nil
}

func (p *proc) validate(ctx context.Context, contexts map[string]json.RawMessage) (plugin.Validation, error) {
	inst, err := p.acquire(ctx)
	if err != nil {
		return plugin.Validation{}, fmt.Errorf("plugin %s: validating its settings: %w", p.name, err)
	}
	// Validation checks shape and values only. It has no reason to be slow.
	vctx, cancel := context.WithTimeout(ctx, p.startTimeout)
	defer cancel()
	v, err := inst.rpc.Validate(vctx, p.cfg.Config, contexts)
	if err != nil {
		return plugin.Validation{}, fmt.Errorf("plugin %s: validating its settings: %w", p.name, err)
	}
	if !v.Checked {
		p.log.Debug("plugin does not implement Validate; its settings are checked only when a job runs")
		return v, nil
	}
	problems := v.Problems
	sort.Slice(problems, func(i, j int) bool {
		return problems[i].Key(p.name) < problems[j].Key(p.name)
	})
	errs := make([]error, 0, len(problems))
	for _, pr := range problems {
		errs = append(errs, fmt.Errorf("%s: %s (refused by plugin %s)", pr.Key(p.name), pr.Message, p.name))
	}
	return v, errors.Join(errs...)
}

func (m *Manager) discover() (map[string]string, error) {
	entries, err := os.ReadDir(m.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading plugin dir: %w", err)
	}
	found := map[string]string{}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
		if !ok {
			continue
		}
		path := filepath.Join(m.cfg.Dir, e.Name())
		fi, err := os.Stat(path) // follows symlinks
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			m.log.Warn("skipping plugin file: not an executable file", "path", path)
			continue
		}
		if !nameRE.MatchString(name) {
			m.log.Warn("skipping plugin file: name is not tether-plugin-<lower-case name>", "path", path)
			continue
		}
		found[name] = path
	}
	return found, nil
}

// Info returns the Info the named plugin reported at its last start.
func (m *Manager) Info(name string) (plugin.Info, bool) {
	p, err := m.proc(name)
	if err != nil {
		return plugin.Info{}, false
	}
	return p.getInfo(), true
}

// Infos returns every started plugin's Info by name.
func (m *Manager) Infos() map[string]plugin.Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]plugin.Info, len(m.procs))
	for name, p := range m.procs {
		out[name] = p.getInfo()
	}
	return out
}

// Ready returns nil when Start succeeded and no plugin's latest (re)start
// failed.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return errors.New("plugins: closed")
	case !m.ready:
		return errors.New("plugins: not started")
	}
	var errs []error
	for name, p := range m.procs {
		if err := p.lastError(); err != nil {
			errs = append(errs, fmt.Errorf("plugin %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close kills every plugin process. Calls in flight fail.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	procs := m.procs
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.close)
	}
	wg.Wait()
}

// Execute runs job through the named plugin, with Job.Config set from the
// plugin's config. A crash of the plugin process fails the call with a
// retriable *plugin.Error whose message starts "plugin <name> crashed".
func (m *Manager) Execute(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	var res *plugin.Result
	err := m.call(ctx, name, "", job, func(c *plugin.GRPCClient, j *plugin.Job) error {
		var err error
		res, err = c.Execute(ctx, j, rt)
		return err
	})
	return res, err
}

// Resume reattaches job through the named plugin, which must have the resume
// capability.
func (m *Manager) Resume(ctx context.Context, name string, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	var res *plugin.Result
	err := m.call(ctx, name, plugin.CapResume, job, func(c *plugin.GRPCClient, j *plugin.Job) error {
		var err error
		res, err = c.Resume(ctx, j, rt)
		return err
	})
	return res, err
}

// Cleanup asks the named plugin, which must have the cleanup capability, to
// remove job's remote work.
func (m *Manager) Cleanup(ctx context.Context, name string, job *plugin.Job) error {
	return m.call(ctx, name, plugin.CapCleanup, job, func(c *plugin.GRPCClient, j *plugin.Job) error {
		return c.Cleanup(ctx, j)
	})
}

// Renew tells every live plugin process with calls in flight that their
// leases are good for validFor from now: one message per process, sent
// concurrently, each bounded by renewTimeout (and ctx). It returns when all
// have answered or given up. A process built with an SDK older than Renew
// is told once, then skipped. That is logged once per process.
func (m *Manager) Renew(ctx context.Context, validFor time.Duration) {
	m.mu.Lock()
	procs := slices.Collect(maps.Values(m.procs))
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, renewTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range procs {
		inst := p.running()
		if inst == nil || inst.noRenew.Load() || inst.rpc.InFlight() == 0 {
			continue
		}
		wg.Go(func() { p.renew(ctx, inst, validFor) })
	}
	wg.Wait()
}

func (p *proc) renew(ctx context.Context, inst *instance, validFor time.Duration) {
	supported, err := inst.rpc.Renew(ctx, validFor)
	switch {
	case err != nil:
		p.log.Warn("renewing the plugin's lease deadlines failed; it stops its jobs at their deadline if no later renewal reaches it",
			"valid_for", validFor.Round(time.Millisecond), "err", err)
	case !supported && !inst.noRenew.Swap(true):
		p.log.Warn("plugin cannot fence itself: it was built with a tether SDK older than Renew; "+
			"if this agent freezes, its jobs run on while other agents may take them over; rebuild it with the current SDK",
			"version", p.getInfo().Version, "path", p.path)
	}
}

// running is the process currently running, if it lives. It is nil otherwise.
// It starts nothing.
func (p *proc) running() *instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || p.cur.client.Exited() {
		return nil
	}
	return p.cur
}

func (m *Manager) proc(name string) (*proc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("plugin manager closed")
	}
	p, ok := m.procs[name]
	if !ok {
		return nil, fmt.Errorf("unknown plugin %q", name)
	}
	return p, nil
}

func (m *Manager) call(ctx context.Context, name, capability string, job *plugin.Job, fn func(*plugin.GRPCClient, *plugin.Job) error) error {
	if job == nil {
		return errors.New("plugin call: nil job")
	}
	p, err := m.proc(name)
	if err != nil {
		return err
	}
	if capability != "" && !p.getInfo().Has(capability) {
		return &plugin.Error{Class: plugin.Permanent, Message: fmt.Sprintf("plugin %s does not support %s (it lacks the %q capability)", name, capability, capability)}
	}
	inst, err := p.acquire(ctx)
	if err != nil {
		// Nothing ran, so trying again later (perhaps elsewhere) is safe.
		return &plugin.Error{Class: plugin.Retriable, Message: fmt.Sprintf("plugin %s unavailable: %v", name, err)}
	}
	j := *job
	j.Config = p.cfg.Config
	err = fn(inst.rpc, &j)
	if err == nil {
		return nil
	}
	var pe *plugin.Error
	if errors.As(err, &pe) || errors.Is(err, plugin.ErrLeaseExpired) {
		return err // the plugin's own answer, class intact; or its SDK stopped it
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return err
	}
	if inst.waitExit(ctx) {
		return p.crashed(inst)
	}
	return &plugin.Error{Class: plugin.Retriable, Broken: true, Message: fmt.Sprintf("plugin %s: call failed: %v", name, err)}
}

// proc is one plugin: its binary and config, and the process currently
// running it (restarted after a crash).
type proc struct {
	name, path   string
	cfg          PluginConfig
	env          []string
	startTimeout time.Duration
	hostVersion  string
	log          *slog.Logger
	onCrash      func(plugin string) // nil: nothing

	mu        sync.Mutex
	info      plugin.Info
	cur       *instance
	lastErr   error
	unhealthy error // the latest health check's failure (CheckHealth)
	closed    bool
}

type instance struct {
	client *goplugin.Client
	rpc    *plugin.GRPCClient
	stderr *tail
	// noRenew is set once the process answered Renew with Unimplemented.
	noRenew atomic.Bool
}

func (p *proc) getInfo() plugin.Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info
}

func (p *proc) lastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// acquire returns the running process, starting one if there is none or the
// last one exited. Callers wait for a start in progress.
func (p *proc) acquire(ctx context.Context) (*instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("plugin stopped")
	}
	if p.cur != nil {
		if !p.cur.client.Exited() {
			return p.cur, nil
		}
		p.cur.client.Kill() // reap what is left of the exited process
		p.cur = nil
	}
	inst, info, err := p.launch(ctx)
	if err != nil {
		p.lastErr = err
		return nil, err
	}
	p.cur, p.info, p.lastErr = inst, info, nil
	p.log.Info("plugin process started", "version", info.Version, "capabilities", info.Capabilities, "protocol", inst.client.NegotiatedVersion(), "path", p.path)
	return inst, nil
}

func (p *proc) launch(ctx context.Context) (*instance, plugin.Info, error) {
	var want []byte
	if p.cfg.SHA256 != "" {
		want, _ = hex.DecodeString(p.cfg.SHA256) // validated by New
		got, err := fileSHA256(p.path)
		if err != nil {
			return nil, plugin.Info{}, err
		}
		if hex.EncodeToString(got) != strings.ToLower(p.cfg.SHA256) {
			return nil, plugin.Info{}, fmt.Errorf("binary %s has sha256 %x, but plugins.%s.sha256 is %s: refusing to run it", p.path, got, p.name, p.cfg.SHA256)
		}
		// go-plugin checks again right before it runs the binary.
	}

	stderr := &tail{}
	pluginOutput := func(stream string) io.Writer {
		return &lineWriter{fn: func(line string) {
			if stream == "stderr" {
				stderr.add(line)
			}
			p.log.Info("plugin output", "stream", stream, "line", line)
		}}
	}
	ccfg, exit := plugin.NewClientConfig(plugin.Process{
		Path:         p.path,
		Env:          hostEnv(p.env, p.log, p.hostVersion),
		SHA256:       want,
		StartTimeout: p.startTimeout,
		// The process's own stderr carries go-plugin's JSON logs, and panics.
		Stderr: &lineWriter{fn: stderr.add},
		// os.Stdout/os.Stderr inside the plugin, forwarded by go-plugin.
		SyncStdout: pluginOutput("stdout"),
		SyncStderr: pluginOutput("stderr"),
		// What the plugin logged, and go-plugin's own messages.
		Logger: newHostLogger(p.log),
	})
	client := goplugin.NewClient(ccfg)
	fail := func(err error) (*instance, plugin.Info, error) {
		client.Kill()
		return nil, plugin.Info{}, err
	}
	conn, err := client.Client()
	if err != nil {
		if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
			return fail(fmt.Errorf("binary %s does not match plugins.%s.sha256: refusing to run it", p.path, p.name))
		}
		// Kill returns once the process is gone and its stderr is read (the
		// runner cuts pipes a leftover child holds), so the tail is whole.
		client.Kill()
		if strings.Contains(err.Error(), "incompatible API version with plugin") {
			// go-plugin's words (an untyped error) when the plugin's
			// answer names a version the agent did not offer.
			return nil, plugin.Info{}, fmt.Errorf("binary %s speaks none of this agent's protocol versions %v (%v): rebuild it with a tether SDK that serves one of them, or run an agent that speaks its version", p.path, plugin.ProtocolVersions(), err)
		}
		return nil, plugin.Info{}, handshakeError(p.path, err, exit, stderr)
	}
	raw, err := conn.Dispense(plugin.PluginKey)
	if err != nil {
		return fail(fmt.Errorf("dispensing: %w", err))
	}
	rpc, ok := raw.(*plugin.GRPCClient)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, want *plugin.GRPCClient", raw))
	}
	// Other callers wait on this start. One caller's cancellation must not
	// fail it for all.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.startTimeout)
	defer cancel()
	info, err := rpc.Info(ictx)
	if err != nil {
		return fail(fmt.Errorf("calling Info: %w", err))
	}
	if info.Name != p.name {
		return fail(fmt.Errorf("binary %s reports plugin name %q, want %q (rename the binary or fix the plugin)", p.path, info.Name, p.name))
	}
	return &instance{client: client, rpc: rpc, stderr: stderr}, info, nil
}

// handshakeError says why a plugin process did not complete go-plugin's
// handshake. It exited on its own (with its status), or it printed something
// else, or it said nothing within the start timeout. Call it after
// client.Kill, which returns once the process has exited and its stderr has
// been read.
func handshakeError(path string, err error, exit *plugin.Exit, stderr *tail) error {
	select {
	case <-exit.Done():
		switch {
		case !exit.Started():
			return fmt.Errorf("running %s: %w", path, err)
		case !exit.ByHost():
			return fmt.Errorf("binary %s %s before the handshake; its stderr: %s", path, exit, stderrReport(stderr))
		}
	default:
	}
	return fmt.Errorf("binary %s did not complete the handshake: %w; its stderr: %s", path, err, stderrReport(stderr))
}

func stderrReport(t *tail) string {
	if r := t.report(); r != "" {
		return "\n" + r
	}
	return "(empty)"
}

// crashed reports inst's crash (or its stop by Close). The error for every
// call that was in flight on it. The next call starts a new process.
func (p *proc) crashed(inst *instance) error {
	p.mu.Lock()
	first := p.cur == inst
	if first {
		p.cur = nil
	}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return &plugin.Error{Class: plugin.Retriable, Broken: true, Message: fmt.Sprintf("plugin %s was stopped: the agent is shutting down its plugins", p.name)}
	}
	report := inst.stderr.report()
	if first {
		p.log.Error("plugin process crashed; it will be restarted for the next job", "stderr", report)
		inst.client.Kill() // reap its goroutines and sockets
		if p.onCrash != nil {
			p.onCrash(p.name)
		}
	}
	msg := fmt.Sprintf("plugin %s crashed", p.name)
	if report != "" {
		msg += "; last stderr lines:\n" + report
	}
	return &plugin.Error{Class: plugin.Retriable, Broken: true, Message: msg}
}

// waitExit reports whether the process exits within exitWait. A call that
// failed because the process died sees the failure a moment before go-plugin
// sees the exit.
func (i *instance) waitExit(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, exitWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !i.client.Exited() {
		select {
		case <-ctx.Done():
			return i.client.Exited()
		case <-tick.C:
		}
	}
	return true
}

func (p *proc) close() {
	p.mu.Lock()
	p.closed = true
	inst := p.cur
	p.cur = nil
	p.mu.Unlock()
	if inst != nil {
		inst.client.Kill()
	}
}

func fileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hashing plugin binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("hashing plugin binary %s: %w", path, err)
	}
	return h.Sum(nil), nil
}
