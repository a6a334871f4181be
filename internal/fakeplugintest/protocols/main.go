// Command protocols is a test plugin that serves the protocol versions named
// in TETHER_TEST_PROTOCOLS ("2", "1,2"), as a plugin built with another SDK
// would. Under each it is the bare plugin: Info and an Execute that
// answers at once.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/tetherjobs/tether/pkg/plugin"
)

type protocols struct{}

func (protocols) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "protocols", Version: "test"}, nil
}

func (protocols) Execute(context.Context, *plugin.Job, plugin.Runtime) (*plugin.Result, error) {
	return &plugin.Result{Message: "ran"}, nil
}

func main() {
	sets := map[int]goplugin.PluginSet{}
	for _, f := range strings.Split(os.Getenv("TETHER_TEST_PROTOCOLS"), ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "protocols: TETHER_TEST_PROTOCOLS %q: %v\n", os.Getenv("TETHER_TEST_PROTOCOLS"), err)
			os.Exit(1)
		}
		sets[v] = plugin.PluginSet(protocols{})
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  plugin.Handshake(),
		VersionedPlugins: sets,
		GRPCServer:       goplugin.DefaultGRPCServer,
	})
}
