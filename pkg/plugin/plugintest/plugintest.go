// Package plugintest helps plugin authors test a plugin without an agent or
// PostgreSQL: a fake Runtime that records what the plugin wrote and
// checkpointed, and Run, which drives an implementation both directly and
// through a real go-plugin gRPC connection.
package plugintest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Runtime is a fake plugin.Runtime that records stdout, stderr and
// checkpoints. It is safe for concurrent use.
type Runtime struct {
	mu          sync.Mutex
	stdout      bytes.Buffer
	stderr      bytes.Buffer
	handle      []byte
	checkpoints [][]byte
	described   [][]plugin.Resource
	failWrite   error
	failCkpt    error
	// gated. Output is held from one checkpoint to the next, as the agent
	// holds a resumable plugin's output (see NewGatedRuntime).
	gated   bool
	heldOut bytes.Buffer
	heldErr bytes.Buffer
	// checkpointed is closed and replaced at each checkpoint.
	checkpointed chan struct{}
}

// NewRuntime returns a Runtime whose Handle starts as handle (nil for a
// fresh job; the last checkpoint when testing Resume).
func NewRuntime(handle []byte) *Runtime {
	return &Runtime{handle: handle}
}

// NewGatedRuntime is a Runtime that treats output as the agent treats a
// resumable plugin's. What is written is held until the next Checkpoint,
// which stores it together with the handle, and Detach drops what is held,
// as the agent does when it stops the call to hand the job to another
// agent (whose Resume starts from the last handle and must write the rest
// exactly once). StdoutString and StderrString include what is held (the
// agent stores it when the call returns).
func NewGatedRuntime(handle []byte) *Runtime {
	return &Runtime{handle: handle, gated: true}
}

// Detach drops the output held since the last checkpoint.
func (r *Runtime) Detach() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heldOut.Reset()
	r.heldErr.Reset()
}

// FailWrites makes every later write to Stdout or Stderr fail with err, as
// the agent's does after the job's lease is lost.
func (r *Runtime) FailWrites(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failWrite = err
}

// FailCheckpoints makes every later Checkpoint fail with err.
func (r *Runtime) FailCheckpoints(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failCkpt = err
}

func (r *Runtime) Stdout() io.Writer {
	if r.gated {
		return writer{r, &r.heldOut}
	}
	return writer{r, &r.stdout}
}

func (r *Runtime) Stderr() io.Writer {
	if r.gated {
		return writer{r, &r.heldErr}
	}
	return writer{r, &r.stderr}
}

func (r *Runtime) Checkpoint(_ context.Context, handle []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkpointLocked(handle)
}

// CheckpointDescribed is Checkpoint with the resources the plugin's
// Describer made of handle, as the agent receives them (see Descriptions).
func (r *Runtime) CheckpointDescribed(_ context.Context, handle []byte, resources []plugin.Resource) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkpointLocked(handle); err != nil {
		return err
	}
	r.described = append(r.described, append([]plugin.Resource(nil), resources...))
	return nil
}

// Descriptions are the resources sent with each described checkpoint, in
// order. It is empty when the plugin has no Describer.
func (r *Runtime) Descriptions() [][]plugin.Resource {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]plugin.Resource(nil), r.described...)
}

func (r *Runtime) checkpointLocked(handle []byte) error {
	if r.failCkpt != nil {
		return r.failCkpt
	}
	if err := plugin.CheckHandle(handle); err != nil {
		return err // as the SDK refuses it before it reaches the agent
	}
	h := append([]byte(nil), handle...)
	r.handle = h
	r.stdout.Write(r.heldOut.Bytes())
	r.stderr.Write(r.heldErr.Bytes())
	r.heldOut.Reset()
	r.heldErr.Reset()
	r.checkpoints = append(r.checkpoints, h)
	if r.checkpointed != nil {
		close(r.checkpointed)
		r.checkpointed = nil
	}
	return nil
}

// WaitCheckpoints waits until n checkpoints in all were stored, or ctx
// ends.
func (r *Runtime) WaitCheckpoints(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		if len(r.checkpoints) >= n {
			r.mu.Unlock()
			return nil
		}
		if r.checkpointed == nil {
			r.checkpointed = make(chan struct{})
		}
		ch := r.checkpointed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for checkpoint %d: %w", n, context.Cause(ctx))
		}
	}
}

func (r *Runtime) Handle() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handle
}

// StdoutString is everything written to Stdout.
func (r *Runtime) StdoutString() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdout.String() + r.heldOut.String()
}

// StderrString is everything written to Stderr.
func (r *Runtime) StderrString() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String() + r.heldErr.String()
}

// Checkpoints are the handles checkpointed, in order.
func (r *Runtime) Checkpoints() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.checkpoints...)
}

type writer struct {
	r   *Runtime
	buf *bytes.Buffer
}

func (w writer) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	if w.r.failWrite != nil {
		return 0, w.r.failWrite
	}
	return w.buf.Write(p)
}

// Client is how a test calls a plugin: the host's view of it.
type Client interface {
	plugin.Plugin
	plugin.Resumer
	plugin.Cleaner
	plugin.HealthChecker
	// Validate checks a config and the commands' default contexts as the
	// agent does at start, with the longest stop time the plugin reports.
	Validate(ctx context.Context, config json.RawMessage, contexts map[string]json.RawMessage) (plugin.Validation, error)
}

// Direct returns a Client that calls impl in-process, behaving like the host
// does over gRPC: Info's capabilities come from the interfaces impl
// satisfies, and optional methods impl lacks fail with a permanent error.
func Direct(impl plugin.Plugin) Client {
	return direct{impl}
}

type direct struct{ impl plugin.Plugin }

func (d direct) Info(ctx context.Context) (plugin.Info, error) {
	info, err := d.impl.Info(ctx)
	if err != nil {
		return plugin.Info{}, err
	}
	info.Capabilities = plugin.Capabilities(d.impl)
	return info, nil
}

func (d direct) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	res, err := d.impl.Execute(ctx, job, d.describing(job, rt))
	return orEmpty(ctx, "execute", res, err)
}

func (d direct) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	r, ok := plugin.As[plugin.Resumer](d.impl)
	if !ok {
		return nil, plugin.Errorf(plugin.Permanent, "plugin does not implement Resume")
	}
	res, err := r.Resume(ctx, job, d.describing(job, rt))
	return orEmpty(ctx, "resume", res, err)
}

func (d direct) Cleanup(ctx context.Context, job *plugin.Job) error {
	c, ok := plugin.As[plugin.Cleaner](d.impl)
	if !ok {
		return plugin.Errorf(plugin.Permanent, "plugin does not implement Cleanup")
	}
	return c.Cleanup(ctx, job)
}

func (d direct) HealthCheck(ctx context.Context, config json.RawMessage) error {
	h, ok := plugin.As[plugin.HealthChecker](d.impl)
	if !ok {
		return plugin.Errorf(plugin.Permanent, "plugin does not implement HealthCheck")
	}
	return h.HealthCheck(ctx, config)
}

func (d direct) Validate(ctx context.Context, config json.RawMessage, contexts map[string]json.RawMessage) (plugin.Validation, error) {
	v := plugin.Validation{Checked: true}
	if val, ok := plugin.As[plugin.Validator](d.impl); ok {
		problems, err := val.Validate(ctx, config, contexts)
		if err != nil {
			return v, err
		}
		v.Problems = problems
	}
	if len(v.Problems) > 0 {
		return v, nil // the grace of a config with problems means nothing
	}
	if g, ok := plugin.As[plugin.KillGracer](d.impl); ok {
		grace, err := g.MaxKillGrace(config)
		if err != nil {
			return v, err
		}
		v.MaxKillGrace, v.HasMaxKillGrace = grace, true
	}
	return v, nil
}

// describing mirrors the SDK: when the plugin is a Describer and the host
// records descriptions, each checkpoint carries what Describe made of it.
func (d direct) describing(job *plugin.Job, rt plugin.Runtime) plugin.Runtime {
	desc, ok := plugin.As[plugin.Describer](d.impl)
	dc, ok2 := rt.(plugin.DescribedCheckpointer)
	if !ok || !ok2 {
		return rt
	}
	j := *job
	return describingRuntime{Runtime: rt, dc: dc, describe: func(h []byte) []plugin.Resource { return desc.Describe(&j, h) }}
}

type describingRuntime struct {
	plugin.Runtime
	dc       plugin.DescribedCheckpointer
	describe func([]byte) []plugin.Resource
}

func (r describingRuntime) Checkpoint(ctx context.Context, handle []byte) error {
	rs := r.describe(handle)
	if len(rs) > plugin.MaxResources {
		rs = rs[:plugin.MaxResources]
	}
	return r.dc.CheckpointDescribed(ctx, handle, rs)
}

// orEmpty mirrors the wire. A nil result with no error arrives as an empty one,
// an error arrives without a result, and a call whose ctx ended fails with
// ctx's error whatever the plugin returned.
func orEmpty(ctx context.Context, op string, res *plugin.Result, err error) (*plugin.Result, error) {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, fmt.Errorf("plugin %s: %w", op, ctxErr)
	}
	if err != nil {
		return nil, err
	}
	if res == nil {
		return &plugin.Result{}, nil
	}
	return res, nil
}

// Connect serves impl over a real go-plugin gRPC connection inside the test
// process (no plugin binary) and returns the host's client for it. The
// connection is closed when the test ends.
func Connect(t testing.TB, impl plugin.Plugin) Client {
	t.Helper()
	c, _ := connect(t, impl)
	return c
}

// connect is Connect, also returning a func that cuts the connection.
func connect(t testing.TB, impl plugin.Plugin) (Client, func()) {
	t.Helper()
	// Multiplexed broker, as the agent runs plugins.
	client, server := goplugin.TestPluginGRPCConn(t, true, plugin.PluginSet(impl))
	var once sync.Once
	cut := func() {
		// Close shuts the server down through go-plugin's controller.
		once.Do(func() { _ = client.Close(); _ = server })
	}
	t.Cleanup(cut)
	raw, err := client.Dispense(plugin.PluginKey)
	if err != nil {
		t.Fatalf("dispensing plugin: %v", err)
	}
	c, ok := raw.(*plugin.GRPCClient)
	if !ok {
		t.Fatalf("dispensed %T, want *plugin.GRPCClient", raw)
	}
	return c, cut
}

// StartBinary starts a built plugin binary the way the agent does, with the
// agent's own go-plugin configuration (plugin.ClientConfig: gRPC, AutoMTLS,
// multiplexed broker), and returns the host's client for it. env is the
// process's whole environment. Nothing of the test process's environment
// reaches the plugin (go-plugin adds only its handshake variables). The
// process is killed when the test ends.
func StartBinary(t testing.TB, path string, env []string) Client {
	t.Helper()
	client := goplugin.NewClient(plugin.ClientConfig(plugin.Process{Path: path, Env: env}))
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("starting plugin %s: %v", path, err)
	}
	raw, err := rpc.Dispense(plugin.PluginKey)
	if err != nil {
		t.Fatalf("dispensing plugin %s: %v", path, err)
	}
	c, ok := raw.(*plugin.GRPCClient)
	if !ok {
		t.Fatalf("dispensed %T, want *plugin.GRPCClient", raw)
	}
	return c
}

// Run runs f twice as subtests. "direct" calls impl in-process and "grpc"
// calls it through a real go-plugin gRPC connection, so a test proves the
// plugin behaves the same across the process boundary (error classes, output,
// checkpoints, handles).
func Run(t *testing.T, impl plugin.Plugin, f func(t *testing.T, c Client)) {
	t.Helper()
	if err := plugin.CheckWrapped(impl); err != nil {
		t.Fatalf("plugintest: %v", err) // Serve refuses it too
	}
	t.Run("direct", func(t *testing.T) { f(t, Direct(impl)) })
	t.Run("grpc", func(t *testing.T) { f(t, Connect(t, impl)) })
}

// Error returns err's class and message, failing the test if err is nil.
func Error(t testing.TB, err error) (plugin.ErrorClass, string) {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error, got nil")
	}
	return plugin.ClassOf(err), err.Error()
}
