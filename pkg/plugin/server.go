package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

// grpcServer adapts a plugin author's implementation to the Plugin service.
type grpcServer struct {
	pb.UnimplementedPluginServer
	impl   Plugin
	broker *goplugin.GRPCBroker
	life   *lifecycle

	mu       sync.Mutex
	runtimes map[uint32]pb.RuntimeClient // by broker id; dialed once, kept
	calls    map[uint64]*serverCall      // in-flight runs by call id
}

// serverCall is one in-flight Execute or Resume.
type serverCall struct {
	cancel context.CancelCauseFunc
	lease  *callLease
}

// errHostCanceled is the cause a plugin's job context carries when the host
// asked it to stop.
var errHostCanceled = errors.New("canceled by the host")

// Cancel stops an in-flight Execute or Resume. The call itself returns when
// the implementation does.
func (s *grpcServer) Cancel(_ context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	s.mu.Lock()
	c, ok := s.calls[req.GetCallId()]
	s.mu.Unlock()
	if ok {
		c.cancel(errHostCanceled)
	}
	return &pb.CancelResponse{Found: ok}, nil
}

// Renew moves the lease deadline of every in-flight call that has one.
func (s *grpcServer) Renew(_ context.Context, req *pb.RenewRequest) (*pb.RenewResponse, error) {
	received := time.Now()
	validFor := time.Duration(req.GetLeaseValidForMs()) * time.Millisecond
	var n uint32
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if c.lease.renew(received, validFor) { // takes only the lease's own lock
			n++
		}
	}
	return &pb.RenewResponse{Renewed: n}, nil
}

// runtime returns a client for the host's Runtime service at broker id,
// dialing it on first use.
func (s *grpcServer) runtime(id uint32) (pb.RuntimeClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.runtimes[id]; ok {
		return c, nil
	}
	conn, err := s.broker.Dial(id)
	if err != nil {
		return nil, fmt.Errorf("connecting to the host's runtime: %w", err)
	}
	awaitReady(conn, runtimeConnectTimeout)
	c := pb.NewRuntimeClient(conn)
	s.runtimes[id] = c
	return c, nil
}

func (s *grpcServer) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	ctx, done := s.life.begin(ctx)
	defer done()
	info, err := s.impl.Info(ctx)
	if err != nil {
		return &pb.InfoResponse{Error: errToPB(err)}, nil
	}
	return &pb.InfoResponse{
		Name:         info.Name,
		Version:      info.Version,
		Capabilities: Capabilities(s.impl),
	}, nil
}

func (s *grpcServer) Execute(ctx context.Context, req *pb.RunRequest) (*pb.RunResponse, error) {
	return s.run(ctx, req, s.impl.Execute)
}

func (s *grpcServer) Resume(ctx context.Context, req *pb.RunRequest) (*pb.RunResponse, error) {
	r, ok := As[Resumer](s.impl)
	if !ok {
		return &pb.RunResponse{Error: errToPB(Errorf(Permanent, "plugin does not implement Resume"))}, nil
	}
	return s.run(ctx, req, r.Resume)
}

func (s *grpcServer) run(ctx context.Context, req *pb.RunRequest, fn func(context.Context, *Job, Runtime) (*Result, error)) (*pb.RunResponse, error) {
	received := time.Now() // the lease deadline counts on this process's own clock
	ctx, done := s.life.begin(ctx)
	defer done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lease := newCallLease(received, time.Duration(req.GetLeaseValidForMs())*time.Millisecond, func() { cancel(ErrLeaseExpired) })
	defer lease.finish()
	id := req.GetCallId()
	s.mu.Lock()
	s.calls[id] = &serverCall{cancel: cancel, lease: lease}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.calls, id)
		s.mu.Unlock()
	}()
	client, err := s.runtime(req.GetRuntimeBrokerId())
	if err != nil {
		// Nothing ran yet, so the job can safely be tried again.
		return &pb.RunResponse{Error: errToPB(WithClass(Retriable, err))}, nil
	}
	job := jobFromPB(req.GetJob())
	rt := newRemoteRuntime(client, req.GetCallId(), req.GetHandle(), lease.passed)
	if d, ok := As[Describer](s.impl); ok {
		// A copy. What Execute does to its Job cannot change the description.
		described := *job
		rt.describe = func(handle []byte) []Resource { return d.Describe(&described, handle) }
	}
	res, err := fn(ctx, job, rt)
	// Taken at once. A deadline that passes after the plugin returned did not
	// stop anything.
	expired, silent := lease.finish()
	expired = expired && errors.Is(context.Cause(ctx), ErrLeaseExpired)
	// Deliver buffered output before answering, so the host has all of it when
	// the call returns. A failed flush is not the job's failure. It means the
	// host refused the write (lease lost) or went away, and it knows that.
	rt.close()
	if expired {
		// Whatever the plugin returned, the SDK stopped it. The host must
		// count it as neither a success nor the plugin's own failure.
		return &pb.RunResponse{LeaseExpired: true, LeaseSilentMs: leaseToMS(silent), Error: errToPB(err)}, nil
	}
	if err != nil {
		return &pb.RunResponse{Error: errToPB(err)}, nil
	}
	return &pb.RunResponse{Result: resultToPB(res)}, nil
}

func (s *grpcServer) Cleanup(ctx context.Context, req *pb.CleanupRequest) (*pb.CleanupResponse, error) {
	c, ok := As[Cleaner](s.impl)
	if !ok {
		return &pb.CleanupResponse{Error: errToPB(Errorf(Permanent, "plugin does not implement Cleanup"))}, nil
	}
	ctx, done := s.life.begin(ctx)
	defer done()
	job := jobFromPB(req.GetJob())
	job.Handle = req.GetHandle()
	return &pb.CleanupResponse{Error: errToPB(c.Cleanup(ctx, job))}, nil
}

func (s *grpcServer) HealthCheck(ctx context.Context, req *pb.HealthCheckRequest) (*pb.HealthCheckResponse, error) {
	h, ok := As[HealthChecker](s.impl)
	if !ok {
		return &pb.HealthCheckResponse{Error: errToPB(Errorf(Permanent, "plugin does not implement HealthCheck"))}, nil
	}
	ctx, done := s.life.begin(ctx)
	defer done()
	return &pb.HealthCheckResponse{Error: errToPB(h.HealthCheck(ctx, nilIfEmpty(req.GetConfig())))}, nil
}

func (s *grpcServer) Validate(ctx context.Context, req *pb.ValidateRequest) (*pb.ValidateResponse, error) {
	ctx, done := s.life.begin(ctx)
	defer done()
	resp, err := s.validate(ctx, req)
	if err != nil {
		return &pb.ValidateResponse{Error: errToPB(err)}, nil
	}
	if len(resp.Problems) > 0 {
		return resp, nil // the grace of a config with problems means nothing
	}
	if g, ok := As[KillGracer](s.impl); ok {
		d, err := g.MaxKillGrace(nilIfEmpty(req.GetConfig()))
		if err != nil {
			return &pb.ValidateResponse{Error: errToPB(err)}, nil
		}
		ms := leaseToMS(d)
		resp.MaxKillGraceMs = &ms
	}
	return resp, nil
}

// validate runs the implementation's Validator, if it has one.
func (s *grpcServer) validate(ctx context.Context, req *pb.ValidateRequest) (*pb.ValidateResponse, error) {
	resp := &pb.ValidateResponse{}
	v, ok := As[Validator](s.impl)
	if !ok {
		return resp, nil // nothing to check
	}
	contexts := make(map[string]json.RawMessage, len(req.GetContexts()))
	for name, raw := range req.GetContexts() {
		contexts[name] = nilIfEmpty(raw)
	}
	problems, err := v.Validate(ctx, nilIfEmpty(req.GetConfig()), contexts)
	if err != nil {
		return nil, err
	}
	for _, p := range problems {
		resp.Problems = append(resp.Problems, &pb.Problem{Command: p.Command, Field: p.Field, Message: p.Message})
	}
	return resp, nil
}

// lifecycle tracks a plugin process's in-flight calls so that shutdown can
// cancel them and give them a grace period to stop their work.
type lifecycle struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// stop is the implementation's Shutdown, if it has one.
	stop func(context.Context) error
}

func newLifecycle() *lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifecycle{ctx: ctx, cancel: cancel}
}

// begin returns a context cancelled when either ctx (the host's call) or the
// process's lifetime ends, and a func to call when the call is done.
func (l *lifecycle) begin(ctx context.Context) (context.Context, func()) {
	l.wg.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		l.wg.Done()
	}
}

// shutdown cancels every in-flight call and waits up to grace for them to
// return. It reports whether they all did.
func (l *lifecycle) shutdown(grace time.Duration) bool {
	l.cancel()
	if l.stop != nil {
		// Leave a little of the grace for the calls to return after the
		// implementation has stopped its work.
		ctx, cancel := context.WithTimeout(context.Background(), grace*9/10)
		_ = l.stop(ctx)
		cancel()
	}
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Output is sent to the host in chunks of at most maxChunk bytes, and at most
// flushDelay after it was written, so a job's logs stream while it runs
// without one RPC per write.
const (
	maxChunk     = 32 << 10
	flushDelay   = 100 * time.Millisecond
	writeTimeout = 30 * time.Second
)

var errRuntimeClosed = errors.New("runtime closed: the job's call has returned")

// remoteRuntime is the plugin side of Runtime for one call.
type remoteRuntime struct {
	client pb.RuntimeClient
	callID uint64
	// describe is the plugin's Describer for this call's job. It is nil when it
	// has none.
	describe func(handle []byte) []Resource
	// leasePassed is done once the call's lease deadline passed.
	leasePassed context.Context

	mu     sync.Mutex
	handle []byte

	stdout, stderr *chunkWriter
}

func newRemoteRuntime(client pb.RuntimeClient, callID uint64, handle []byte, leasePassed context.Context) *remoteRuntime {
	r := &remoteRuntime{client: client, callID: callID, handle: nilIfEmpty(handle), leasePassed: leasePassed}
	r.stdout = &chunkWriter{send: r.sender(pb.Stream_STREAM_STDOUT)}
	r.stderr = &chunkWriter{send: r.sender(pb.Stream_STREAM_STDERR)}
	return r
}

func (r *remoteRuntime) sender(stream pb.Stream) func([]byte) error {
	return func(data []byte) error {
		// Output has no caller context (io.Writer), and the final flush runs
		// after the job's context may be cancelled. Bound it by a timeout,
		// and by a short grace once the lease deadline passed (a frozen
		// host never answers. A live one answers at once).
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		ctx, stop := cutAfterLease(ctx, r.leasePassed)
		defer stop()
		resp, err := r.client.Write(ctx, &pb.WriteRequest{CallId: r.callID, Stream: stream, Data: data})
		if err != nil {
			return fmt.Errorf("writing job output: %w", err)
		}
		return errFromPB(resp.GetError())
	}
}

func (r *remoteRuntime) Stdout() io.Writer { return r.stdout }
func (r *remoteRuntime) Stderr() io.Writer { return r.stderr }

func (r *remoteRuntime) Checkpoint(ctx context.Context, handle []byte) error {
	if err := CheckHandle(handle); err != nil {
		return err
	}
	// A frozen host cannot answer. Past the deadline the handle is not ours
	// to store, even for a plugin that checkpoints on an uncancelled context.
	if r.leasePassed.Err() != nil {
		return fmt.Errorf("checkpointing: %w", ErrLeaseExpired)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(r.leasePassed, func() { cancel(ErrLeaseExpired) })()
	// Output written before a checkpoint reaches the host before it. The
	// wait for it ends with ctx (the flush goes on, bounded by its own
	// timeout). Past the lease deadline nothing waits for a frozen host.
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		_ = r.stdout.flush()
		_ = r.stderr.flush()
	}()
	select {
	case <-flushed:
	case <-ctx.Done():
		return fmt.Errorf("checkpointing: %w", context.Cause(ctx))
	}
	req := &pb.CheckpointRequest{CallId: r.callID, Handle: handle}
	if r.describe != nil {
		req.Resources, req.Described = resourcesToPB(capResources(r.describe(handle))), true
	}
	resp, err := r.client.Checkpoint(ctx, req)
	if errors.Is(context.Cause(ctx), ErrLeaseExpired) {
		return fmt.Errorf("checkpointing: %w", ErrLeaseExpired)
	}
	if err != nil {
		return fmt.Errorf("checkpointing: %w", err)
	}
	if err := errFromPB(resp.GetError()); err != nil {
		return err
	}
	r.mu.Lock()
	r.handle = append([]byte(nil), handle...)
	r.mu.Unlock()
	return nil
}

func (r *remoteRuntime) Handle() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handle
}

// close flushes buffered output. Later writes fail.
func (r *remoteRuntime) close() {
	_ = r.stdout.close()
	_ = r.stderr.close()
}

// chunkWriter buffers writes and hands them to send in order, in chunks.
type chunkWriter struct {
	send func([]byte) error

	sendMu sync.Mutex // held while taking the buffer and sending it: keeps order

	mu     sync.Mutex
	buf    []byte
	timer  *time.Timer
	err    error // first send error; later writes return it
	closed bool
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return 0, errRuntimeClosed
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return 0, err
	}
	w.buf = append(w.buf, p...)
	full := len(w.buf) >= maxChunk
	if !full && w.timer == nil {
		w.timer = time.AfterFunc(flushDelay, func() { _ = w.flush() })
	}
	w.mu.Unlock()
	if full {
		// Flushing in the writer's goroutine pushes back on a fast writer.
		if err := w.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *chunkWriter) flush() error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.mu.Lock()
	data := w.buf
	w.buf = nil
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), maxChunk)
		if err := w.send(data[:n]); err != nil {
			// Only flush sets err, under sendMu, and it was nil above.
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			return err
		}
		data = data[n:]
	}
	return nil
}

func (w *chunkWriter) close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return w.flush()
}

// runtimeConnectTimeout bounds how long the first use of the host's Runtime
// waits for its connection.
const runtimeConnectTimeout = 10 * time.Second

// awaitReady connects conn and waits (at most d) until it is ready. The
// host serves Runtime with go-plugin's AcceptAndServe on a goroutine of its
// own, so a plugin that dials at once can knock before the host's listener
// is registered ("no listener for id"). gRPC then reconnects by itself, and
// this wait turns that race into a short delay instead of a failed first
// call (a checkpoint, say). Past d the call goes ahead and reports what it
// meets.
func awaitReady(conn *grpc.ClientConn, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready, connectivity.Shutdown:
			return
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}
