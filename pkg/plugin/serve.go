package plugin

import (
	"context"
	"fmt"
	"os"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
)

// Shutdowner is implemented by plugins with local work that must not outlive
// the plugin process (the shell plugin's process groups). Serve calls Shutdown
// when the host goes away, with a deadline inside ShutdownGrace. It should
// stop that work, harder as the deadline nears, and return.
type Shutdowner interface {
	Shutdown(ctx context.Context) error
}

// ShutdownGrace is how long a plugin's in-flight calls get to return after
// their contexts are cancelled because the host went away.
const ShutdownGrace = 5 * time.Second

// Serve runs impl as a tether plugin. Call it from the plugin binary's main.
// It returns when the host has closed the plugin, and main should then return.
//
// The standard loggers (log, slog's default, hclog's default) are routed to
// the agent's log at their levels, with their fields (see LogLevelEnv).
//
// Info's Capabilities are filled from the optional interfaces impl satisfies
// (Resumer, Cleaner, HealthChecker).
//
// When the host goes away (it closes the plugin, or its process dies), every
// in-flight call's context is cancelled and the calls get ShutdownGrace to
// return before the process exits. On Linux the process asks for a
// parent-death signal. Everywhere it also watches its parent process id.
// SIGTERM and SIGINT while the host lives are ignored. The host decides when
// its plugins stop (a rollout drains jobs first).
func Serve(impl Plugin) {
	if err := CheckWrapped(impl); err != nil {
		// Before the handshake: the agent reports this line as the reason
		// the plugin did not start.
		fmt.Fprintln(os.Stderr, "tether plugin:", err)
		os.Exit(1)
	}
	life := newLifecycle()
	if s, ok := As[Shutdowner](impl); ok {
		life.stop = s.Shutdown
	}
	watchHost(life)
	// Taken before go-plugin points os.Stderr at the host's output stream.
	logger := newPluginLogger(os.Getenv(LogLevelEnv), os.Stderr)
	routeLogs(logger)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: versionedSet(impl, life),
		GRPCServer:       goplugin.DefaultGRPCServer,
		// JSON on the process's real stderr, which the host parses into its log.
		Logger: logger,
	})
	life.shutdown(ShutdownGrace)
}
