package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

// GRPCClient is the host side of a plugin connection. It implements Plugin,
// Resumer, Cleaner and HealthChecker whatever the plugin supports; callers
// check Info's capabilities before calling the optional methods.
//
// Errors from the plugin's work are *Error with the plugin's class. Any other
// error means the call itself failed (the process crashed, the connection
// broke, or ctx ended; then it wraps ctx.Err()).
type GRPCClient struct {
	client pb.PluginClient
	broker *goplugin.GRPCBroker

	serveOnce sync.Once
	runtimeID uint32 // broker id of the Runtime service, served once

	nextCall atomic.Uint64
	mu       sync.Mutex
	calls    map[uint64]Runtime // in-flight Execute/Resume calls by call id
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
	resp, err := c.client.Cleanup(ctx, &pb.CleanupRequest{Job: jobToPB(job)})
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

type runFunc func(context.Context, *pb.RunRequest, ...grpc.CallOption) (*pb.RunResponse, error)

// run routes the plugin's Runtime requests for this call to rt while it lasts.
func (c *GRPCClient) run(ctx context.Context, op string, call runFunc, job *Job, rt Runtime) (*Result, error) {
	c.serveOnce.Do(c.serveRuntime)
	id := c.nextCall.Add(1)
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[uint64]Runtime{}
	}
	c.calls[id] = rt
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}()

	resp, err := call(ctx, &pb.RunRequest{Job: jobToPB(job), Handle: rt.Handle(), RuntimeBrokerId: c.runtimeID, CallId: id})
	if err != nil {
		return nil, callError(ctx, op, err)
	}
	if err := errFromPB(resp.GetError()); err != nil {
		return nil, err
	}
	return resultFromPB(resp.GetResult()), nil
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

// callError describes a failed call; when ctx ended, the error wraps ctx.Err()
// so callers can tell cancellation from a broken plugin.
func callError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("plugin %s: %w", op, ctxErr)
	}
	return fmt.Errorf("plugin %s: %w", op, err)
}

// runtimeServer serves the host's Runtime to the plugin, routing each request
// to its call's Runtime.
type runtimeServer struct {
	pb.UnimplementedRuntimeServer
	c *GRPCClient
}

func (s *runtimeServer) Write(_ context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	rt, err := s.c.runtime(req.GetCallId())
	if err != nil {
		return &pb.WriteResponse{Error: errToPB(err)}, nil
	}
	w := rt.Stdout()
	if req.GetStream() == pb.Stream_STREAM_STDERR {
		w = rt.Stderr()
	}
	if _, err := w.Write(req.GetData()); err != nil {
		return &pb.WriteResponse{Error: errToPB(err)}, nil
	}
	return &pb.WriteResponse{}, nil
}

func (s *runtimeServer) Checkpoint(ctx context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	rt, err := s.c.runtime(req.GetCallId())
	if err != nil {
		return &pb.CheckpointResponse{Error: errToPB(err)}, nil
	}
	return &pb.CheckpointResponse{Error: errToPB(rt.Checkpoint(ctx, req.GetHandle()))}, nil
}
