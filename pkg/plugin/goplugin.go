package plugin

import (
	"context"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

// PluginKey is the name under which the plugin is dispensed in go-plugin's
// plugin set. A plugin binary serves exactly one plugin.
const PluginKey = "tether"

// Handshake is the go-plugin handshake shared by the agent and every plugin.
// The magic cookie only stops a plugin binary from being run by hand by
// mistake. It is not a security measure.
func Handshake() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "TETHER_PLUGIN",
		MagicCookieValue: "c3a1f7e2-tether-plugin-v1",
	}
}

// PluginSet is the go-plugin plugin set for impl. The host passes a nil impl.
func PluginSet(impl Plugin) goplugin.PluginSet {
	return goplugin.PluginSet{PluginKey: &GRPCPlugin{Impl: impl}}
}

// VersionedPluginSet is the set for impl under each of ProtocolVersions. The
// host offers these versions and the plugin serves them. go-plugin's
// handshake settles on the newest version both have.
func VersionedPluginSet(impl Plugin) map[int]goplugin.PluginSet { return versionedSet(impl, nil) }

// versionedSet is impl under every protocol version this SDK speaks, its
// calls tracked by life (nil: each server its own).
func versionedSet(impl Plugin, life *lifecycle) map[int]goplugin.PluginSet {
	out := map[int]goplugin.PluginSet{}
	for _, v := range ProtocolVersions() {
		out[v] = goplugin.PluginSet{PluginKey: &GRPCPlugin{Impl: impl, life: life}}
	}
	return out
}

// Capabilities lists the optional interfaces impl satisfies. Serve reports
// these in Info, whatever the implementation's own Info says.
func Capabilities(impl Plugin) []string {
	caps := []string{}
	if _, ok := As[Resumer](impl); ok {
		caps = append(caps, CapResume)
	}
	if _, ok := As[Cleaner](impl); ok {
		caps = append(caps, CapCleanup)
	}
	if _, ok := As[HealthChecker](impl); ok {
		caps = append(caps, CapHealth)
	}
	return caps
}

// GRPCPlugin is the go-plugin GRPCPlugin for tether plugins. On the plugin
// side it serves Impl, on the host side it returns a *GRPCClient.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl Plugin

	life *lifecycle // set by Serve; tracks in-flight calls for shutdown
}

// GRPCServer registers the Plugin service for Impl.
func (p *GRPCPlugin) GRPCServer(broker *goplugin.GRPCBroker, s *grpc.Server) error {
	life := p.life
	if life == nil {
		life = newLifecycle()
	}
	pb.RegisterPluginServer(s, &grpcServer{
		impl:     p.Impl,
		broker:   broker,
		life:     life,
		runtimes: map[uint32]pb.RuntimeClient{},
		calls:    map[uint64]*serverCall{},
	})
	return nil
}

// GRPCClient returns the host-side client, a *GRPCClient.
func (p *GRPCPlugin) GRPCClient(_ context.Context, broker *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return newGRPCClient(c, broker), nil
}
