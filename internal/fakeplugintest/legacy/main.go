// Command legacy is a test plugin that speaks the protocol as it was before
// Validate existed. It serves the Plugin service directly, without
// pkg/plugin's server, so Validate answers codes.Unimplemented. It answers
// Info and nothing else.
package main

import (
	"context"
	"errors"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

type server struct{ pb.UnimplementedPluginServer }

func (server) Info(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
	return &pb.InfoResponse{Name: "legacy", Version: "test"}, nil
}

type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterPluginServer(s, server{})
	return nil
}

func (grpcPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("legacy is a plugin, not a host")
}

func main() {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: plugin.Handshake(),
		Plugins:         goplugin.PluginSet{plugin.PluginKey: grpcPlugin{}},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}
