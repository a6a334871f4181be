package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

// GRPCClient is the host side of a plugin connection. It implements Plugin,
// Resumer, Cleaner and HealthChecker whatever the plugin supports. Callers
// check Info's capabilities before calling the optional methods.
//
// Errors from the plugin's work are *Error with the plugin's class. An
// Execute or Resume that the plugin's SDK stopped because its lease deadline
// passed fails with a *LeaseExpiredError (errors.Is ErrLeaseExpired). Any
// other error means the call itself failed (the process crashed, the
// connection broke, or ctx ended. Then it wraps ctx.Err()).
type GRPCClient struct {
	// StopGrace is how long a cancelled Execute or Resume may take to return
	// (0: DefaultStopGrace). Set it before the first call.
	StopGrace time.Duration

	client pb.PluginClient
	broker *goplugin.GRPCBroker

	serveOnce sync.Once
	runtimeID uint32 // broker id of the Runtime service, served once

	nextCall atomic.Uint64
	noRenew  atomic.Bool // the plugin answered Renew with Unimplemented
	mu       sync.Mutex
	calls    map[uint64]Runtime // in-flight Execute/Resume calls by call id
}

// newGRPCClient is the host side of the plugin connection c.
func newGRPCClient(c *grpc.ClientConn, broker *goplugin.GRPCBroker) *GRPCClient {
	return &GRPCClient{client: pb.NewPluginClient(c), broker: broker, calls: map[uint64]Runtime{}}
}

var (
	_ Plugin        = (*GRPCClient)(nil)
	_ Resumer       = (*GRPCClient)(nil)
	_ Cleaner       = (*GRPCClient)(nil)
	_ HealthChecker = (*GRPCClient)(nil)
)

func (c *GRPCClient) Info(ctx context.Context) (Info, error) {
	resp, err := c.client.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return Info{}, callError(ctx, "info", err)
	}
	if err := errFromPB(resp.GetError()); err != nil {
		return Info{}, err
	}
	return Info{Name: resp.GetName(), Version: resp.GetVersion(), Capabilities: resp.GetCapabilities()}, nil
}

func (c *GRPCClient) Execute(ctx context.Context, job *Job, rt Runtime) (*Result, error) {
	return c.run(ctx, "execute", c.client.Execute, job, rt)
}

func (c *GRPCClient) Resume(ctx context.Context, job *Job, rt Runtime) (*Result, error) {
	return c.run(ctx, "resume", c.client.Resume, job, rt)
}

func (c *GRPCClient) Cleanup(ctx context.Context, job *Job) error {
	resp, err := c.client.Cleanup(ctx, &pb.CleanupRequest{Job: jobToPB(job), Handle: job.Handle})
	if err != nil {
		return callError(ctx, "cleanup", err)
	}
	return errFromPB(resp.GetError())
}

func (c *GRPCClient) HealthCheck(ctx context.Context, config json.RawMessage) error {
	resp, err := c.client.HealthCheck(ctx, &pb.HealthCheckRequest{Config: config})
	if err != nil {
		return callError(ctx, "health check", err)
	}
	return errFromPB(resp.GetError())
}

// Validation is a plugin's answer to Validate.
type Validation struct {
	// Checked is false when the plugin predates Validate. Nothing was
	// checked and nothing else was said.
	Checked  bool
	Problems []Problem
	// MaxKillGrace is what the plugin's KillGracer reported (see
	// KillGracer). HasMaxKillGrace is false when it reported nothing.
	MaxKillGrace    time.Duration
	HasMaxKillGrace bool
}

// Validate asks the plugin to check config and the commands' contexts, and
// how long its jobs may take to stop. A plugin built before Validate existed
// answers Unimplemented. That is no problem found, and Checked is false so
// the caller can say nothing was checked.
func (c *GRPCClient) Validate(ctx context.Context, config json.RawMessage, contexts map[string]json.RawMessage) (Validation, error) {
	req := &pb.ValidateRequest{Config: config, Contexts: make(map[string][]byte, len(contexts))}
	for name, raw := range contexts {
		req.Contexts[name] = raw
	}
	resp, err := c.client.Validate(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		return Validation{}, nil
	}
	if err != nil {
		return Validation{}, callError(ctx, "validate", err)
	}
	if err := errFromPB(resp.GetError()); err != nil {
		return Validation{Checked: true}, err
	}
	v := Validation{Checked: true}
	for _, p := range resp.GetProblems() {
		v.Problems = append(v.Problems, Problem{Command: p.GetCommand(), Field: p.GetField(), Message: p.GetMessage()})
	}
	if resp.MaxKillGraceMs != nil {
		v.MaxKillGrace = time.Duration(resp.GetMaxKillGraceMs()) * time.Millisecond
		v.HasMaxKillGrace = true
	}
	return v, nil
}

// Renew tells the plugin process that the leases of its in-flight calls
// are good for validFor from now (see LeaseDeadliner). It sends nothing
// when no call is in flight. A plugin built before Renew existed answers
// Unimplemented. supported is then false, and later calls send nothing
// either (that plugin cannot stop its work when its agent freezes).
func (c *GRPCClient) Renew(ctx context.Context, validFor time.Duration) (supported bool, err error) {
	if c.noRenew.Load() {
		return false, nil
	}
	if validFor <= 0 || c.InFlight() == 0 {
		return true, nil
	}
	_, err = c.client.Renew(ctx, &pb.RenewRequest{LeaseValidForMs: leaseToMS(validFor)})
	if status.Code(err) == codes.Unimplemented {
		c.noRenew.Store(true)
		return false, nil
	}
	if err != nil {
		return true, callError(ctx, "renew", err)
	}
	return true, nil
}

// InFlight is how many Execute and Resume calls are in flight.
func (c *GRPCClient) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// DefaultStopGrace bounds how long the host waits for a cancelled call to
// return: above the shell plugin's default kill_grace (10s).
const DefaultStopGrace = 30 * time.Second

// answerWait bounds how long the host waits for the answer of a call the
// plugin says has already returned.
const answerWait = time.Second

type runFunc func(context.Context, *pb.RunRequest, ...grpc.CallOption) (*pb.RunResponse, error)

// run routes the plugin's Runtime requests for this call to rt while it lasts.
func (c *GRPCClient) run(ctx context.Context, op string, call runFunc, job *Job, rt Runtime) (*Result, error) {
	c.serveOnce.Do(c.serveRuntime)
	id := c.nextCall.Add(1)
	c.mu.Lock()
	c.calls[id] = rt
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}()

	// ctx ending does not cut the call. The plugin is asked to stop (Cancel)
	// and the call returns when it has, so the job's end is recorded only
	// once its work has really stopped. A plugin that does not return within
	// StopGrace, or that cannot be asked, is cut off.
	callCtx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	returned := make(chan struct{})
	defer close(returned)
	go c.cancelOnDone(ctx, callCtx, cut, returned, id)

	req := &pb.RunRequest{Job: jobToPB(job), Handle: rt.Handle(), RuntimeBrokerId: c.runtimeID, CallId: id}
	if ld, ok := rt.(LeaseDeadliner); ok {
		req.LeaseValidForMs = leaseToMS(ld.LeaseDeadline())
	}
	resp, err := call(callCtx, req)
	if err != nil {
		return nil, callError(ctx, op, err)
	}
	if resp.GetLeaseExpired() {
		return nil, &LeaseExpiredError{
			Op:         op,
			Silent:     time.Duration(resp.GetLeaseSilentMs()) * time.Millisecond,
			PluginSaid: resp.GetError().GetMessage(), // "" without an error
		}
	}
	if err := errFromPB(resp.GetError()); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			// Stopped because we asked. Keep the plugin's class and say why.
			return nil, fmt.Errorf("%w (%w)", err, ctxErr)
		}
		return nil, err
	}
	return resultFromPB(resp.GetResult()), nil
}

// cancelOnDone forwards the end of ctx to the plugin as a Cancel of call id,
// then cuts the call if it has not returned within the stop grace.
func (c *GRPCClient) cancelOnDone(ctx, callCtx context.Context, cut context.CancelFunc, returned <-chan struct{}, id uint64) {
	select {
	case <-returned:
		return
	case <-ctx.Done():
	}
	askCtx, cancel := context.WithTimeout(callCtx, 5*time.Second)
	resp, err := c.client.Cancel(askCtx, &pb.CancelRequest{CallId: id})
	cancel()
	if err != nil {
		cut() // an older plugin, or a broken connection: stop waiting at once
		return
	}
	grace := c.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	if !resp.GetFound() {
		// The call had already returned in the plugin (its SDK stopped it
		// at its lease deadline, say). Its answer is on the way, ahead of
		// this one on the same connection. Do not cut it off.
		grace = answerWait
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-returned:
	case <-t.C:
		cut()
	}
}

// serveRuntime serves the Runtime service to the plugin through the broker
// until the connection closes.
func (c *GRPCClient) serveRuntime() {
	c.runtimeID = c.broker.NextId()
	go c.broker.AcceptAndServe(c.runtimeID, func(opts []grpc.ServerOption) *grpc.Server {
		s := grpc.NewServer(opts...)
		pb.RegisterRuntimeServer(s, &runtimeServer{c: c})
		return s
	})
}

func (c *GRPCClient) runtime(callID uint64) (Runtime, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rt, ok := c.calls[callID]
	if !ok {
		return nil, Errorf(Permanent, "runtime: call %d has returned; its job takes no more output", callID)
	}
	return rt, nil
}

// callError describes a failed call. When ctx ended, the error wraps ctx.Err()
// so callers can tell cancellation from a broken plugin.
func callError(ctx context.Context, op string, err error) error {
	return fmt.Errorf("plugin %s: %w", op, cmp.Or(ctx.Err(), err))
}

// runtimeServer serves the host's Runtime to the plugin, routing each request
// to its call's Runtime.
type runtimeServer struct {
	pb.UnimplementedRuntimeServer
	c *GRPCClient
}

// contextWriter is an output stream that may hold a write back (the host's
// output budget: back-pressure on a plugin that writes faster than its
// output is stored). It is given the Write call's context, whose deadline
// is the plugin's: it must answer before that.
type contextWriter interface {
	WriteContext(ctx context.Context, p []byte) (int, error)
}

func (s *runtimeServer) Write(ctx context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	rt, err := s.c.runtime(req.GetCallId())
	if err != nil {
		return &pb.WriteResponse{Error: errToPB(err)}, nil
	}
	w := rt.Stdout()
	if req.GetStream() == pb.Stream_STREAM_STDERR {
		w = rt.Stderr()
	}
	if cw, ok := w.(contextWriter); ok {
		_, err = cw.WriteContext(ctx, req.GetData())
	} else {
		_, err = w.Write(req.GetData())
	}
	if err != nil {
		return &pb.WriteResponse{Error: errToPB(err)}, nil
	}
	return &pb.WriteResponse{}, nil
}

func (s *runtimeServer) Checkpoint(ctx context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	rt, err := s.c.runtime(req.GetCallId())
	if err != nil {
		return &pb.CheckpointResponse{Error: errToPB(err)}, nil
	}
	if dc, ok := rt.(DescribedCheckpointer); ok && req.GetDescribed() {
		return &pb.CheckpointResponse{Error: errToPB(dc.CheckpointDescribed(ctx, req.GetHandle(), capResources(resourcesFromPB(req.GetResources()))))}, nil
	}
	return &pb.CheckpointResponse{Error: errToPB(rt.Checkpoint(ctx, req.GetHandle()))}, nil
}
