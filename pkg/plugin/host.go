package plugin

import (
	"io"
	"os/exec"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
)

// Process describes one plugin process as a host starts it.
type Process struct {
	// Path is the plugin binary.
	Path string
	// Env is the process's whole environment. Nothing of the host's own
	// environment is added. go-plugin adds only its handshake variables
	// (the TETHER_PLUGIN cookie and PLUGIN_*).
	Env []string
	// SHA256, when set, pins the binary. It is hashed right before it runs
	// and a mismatch is refused (goplugin.ErrChecksumsDoNotMatch).
	SHA256 []byte
	// StartTimeout bounds the handshake. 0 means go-plugin's default (1m).
	StartTimeout time.Duration
	// Stderr receives the process's own stderr (go-plugin's JSON logs,
	// panics). nil discards it.
	Stderr io.Writer
	// SyncStdout and SyncStderr receive what the plugin writes to
	// os.Stdout and os.Stderr, forwarded by go-plugin. nil discards it.
	SyncStdout, SyncStderr io.Writer
	// Logger is go-plugin's own logger on the host side. nil means
	// go-plugin's default (stderr).
	Logger hclog.Logger
}

// ClientConfig returns the go-plugin client configuration of p: the tether
// handshake, gRPC only, AutoMTLS, a multiplexed broker and no inherited
// environment. The agent (internal/pluginhost) and plugintest.StartBinary
// both start plugin binaries with it, so tests run a plugin exactly as
// production does. Pass it to goplugin.NewClient. Call it once per process
// start.
func ClientConfig(p Process) *goplugin.ClientConfig {
	cfg, _ := NewClientConfig(p)
	return cfg
}

// NewClientConfig is ClientConfig, and also returns the process's Exit, to
// tell a plugin that exited before its handshake from one that never
// answered.
//
// The process runs in a process group of its own (on Linux). When it exits,
// what is left of the group is killed and its stdout and stderr are closed
// soon after, so neither the handshake nor Kill waits on a child that
// inherited them (see procRunner). StartTimeout bounds a plugin that never
// completes the handshake.
func NewClientConfig(p Process) (*goplugin.ClientConfig, *Exit) {
	exit := newExit()
	return &goplugin.ClientConfig{
		HandshakeConfig: Handshake(),
		// Every version this agent speaks: go-plugin hands the list to the
		// plugin (PLUGIN_PROTOCOL_VERSIONS), which answers with the newest
		// one it serves too.
		VersionedPlugins: VersionedPluginSet(nil),
		// go-plugin builds the environment (Env, then its handshake, AutoMTLS
		// and socket variables) and hands it over in cmd.Env. The checksum
		// is checked by the runner right before the exec. go-plugin's own
		// SecureConfig check needs Cmd, which excludes RunnerFunc.
		RunnerFunc: func(_ hclog.Logger, cmd *exec.Cmd, _ string) (runner.Runner, error) {
			env := append(append([]string{}, p.Env...), cmd.Env...)
			return &procRunner{path: p.Path, env: env, sha256: p.SHA256, exit: exit}, nil
		},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		// Each call serves Runtime under its own broker id. Multiplexed, that
		// is a stream on the existing connection instead of a new socket per
		// job (5x the throughput of no-op jobs).
		GRPCBrokerMultiplex: true,
		// The environment is exactly Env. Without this go-plugin appends the
		// host's whole environment (the agent's database URL and tokens).
		SkipHostEnv:  true,
		StartTimeout: p.StartTimeout,
		Stderr:       p.Stderr,
		SyncStdout:   p.SyncStdout,
		SyncStderr:   p.SyncStderr,
		Logger:       p.Logger,
	}, exit
}
