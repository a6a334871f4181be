package plugin

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

func TestLeaseMargin(t *testing.T) {
	assert.Equal(t, 30*time.Millisecond, leaseMargin(300*time.Millisecond), "10 %")
	assert.Equal(t, time.Second, leaseMargin(100*time.Second), "capped")
	assert.Equal(t, uint64(0), leaseToMS(0), "no deadline")
	assert.Equal(t, uint64(1), leaseToMS(-time.Second), "already passed: stop at once")
	assert.Equal(t, uint64(1), leaseToMS(time.Microsecond))
	assert.Equal(t, uint64(1500), leaseToMS(1500*time.Millisecond))
}

// oldServer is a plugin built before Renew existed: Execute blocks until
// released. Its Renew answers what an older SDK answers (Unimplemented),
// counted.
type oldServer struct {
	pb.UnimplementedPluginServer
	release chan struct{}
	renews  atomic.Int32
}

func (s *oldServer) Execute(ctx context.Context, _ *pb.RunRequest) (*pb.RunResponse, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return &pb.RunResponse{Result: &pb.Result{Message: "old"}}, nil
}

func (s *oldServer) Renew(context.Context, *pb.RenewRequest) (*pb.RenewResponse, error) {
	s.renews.Add(1)
	return nil, status.Error(codes.Unimplemented, "method Renew not implemented")
}

type oldPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	srv *oldServer
}

func (p *oldPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterPluginServer(s, p.srv)
	return nil
}

func (p *oldPlugin) GRPCClient(_ context.Context, broker *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return newGRPCClient(c, broker), nil
}

type leasedRuntime struct{}

func (leasedRuntime) Stdout() io.Writer                        { return io.Discard }
func (leasedRuntime) Stderr() io.Writer                        { return io.Discard }
func (leasedRuntime) Checkpoint(context.Context, []byte) error { return nil }
func (leasedRuntime) Handle() []byte                           { return nil }
func (leasedRuntime) LeaseDeadline() time.Duration             { return 50 * time.Millisecond }

// A new host and an older plugin. The plugin ignores the deadline, answers
// Renew with Unimplemented once, and is not asked again.
func TestRenewOnOlderPlugin(t *testing.T) {
	srv := &oldServer{release: make(chan struct{})}
	client, _ := goplugin.TestPluginGRPCConn(t, true, goplugin.PluginSet{PluginKey: &oldPlugin{srv: srv}})
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(PluginKey)
	require.NoError(t, err)
	c := raw.(*GRPCClient)

	done := make(chan error, 1)
	go func() {
		_, err := c.Execute(context.Background(), &Job{ID: "old"}, leasedRuntime{})
		done <- err
	}()
	require.Eventually(t, func() bool { return c.InFlight() == 1 }, 5*time.Second, time.Millisecond)
	for range 3 {
		supported, err := c.Renew(context.Background(), time.Second)
		require.NoError(t, err)
		assert.False(t, supported)
	}
	assert.Equal(t, int32(1), srv.renews.Load(), "asked once, then never again")
	close(srv.release)
	select {
	case err := <-done:
		require.NoError(t, err, "an older plugin's call is unaffected by the deadline it cannot read")
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return")
	}
}
