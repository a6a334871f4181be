package plugin

import (
	"crypto/sha256"
	"io"
	"os/exec"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// Process describes one plugin process as a host starts it.
type Process struct {
	// Path is the plugin binary.
	Path string
	// Env is the process's whole environment. Nothing of the host's own
	// environment is added; go-plugin adds only its handshake variables
	// (the TETHER_PLUGIN cookie and PLUGIN_*).
	Env []string
	// SHA256, when set, pins the binary: go-plugin hashes it right before it
	// runs it and refuses a mismatch (goplugin.ErrChecksumsDoNotMatch).
	SHA256 []byte
	// StartTimeout bounds the handshake; 0 means go-plugin's default (1m).
	StartTimeout time.Duration
	// Stderr receives the process's own stderr (go-plugin's JSON logs,
	// panics); nil discards it.
	Stderr io.Writer
	// SyncStdout and SyncStderr receive what the plugin writes to
	// os.Stdout and os.Stderr, forwarded by go-plugin; nil discards it.
	SyncStdout, SyncStderr io.Writer
	// Logger is go-plugin's own logger on the host side; nil means
	// go-plugin's default (stderr).
	Logger hclog.Logger
}

// ClientConfig returns the go-plugin client configuration of p: the tether
// handshake, gRPC only, AutoMTLS, a multiplexed broker and no inherited
// environment. The agent (internal/pluginhost) and plugintest.StartBinary
// both start plugin binaries with it, so tests run a plugin exactly as
// production does. Pass it to goplugin.NewClient; an exec.Cmd is built per
// call, so call it once per process start.
func ClientConfig(p Process) *goplugin.ClientConfig {
	cmd := exec.Command(p.Path)
	cmd.Env = p.Env
	var secure *goplugin.SecureConfig
	if len(p.SHA256) > 0 {
		secure = &goplugin.SecureConfig{Checksum: p.SHA256, Hash: sha256.New()}
	}
	return &goplugin.ClientConfig{
		HandshakeConfig:  Handshake(),
		Plugins:          PluginSet(nil),
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		// Each call serves Runtime under its own broker id; multiplexed, that
		// is a stream on the existing connection instead of a new socket per
		// job (5x the throughput of no-op jobs).
		GRPCBrokerMultiplex: true,
		// The environment is exactly Env: without this go-plugin appends the
		// host's whole environment (the agent's database URL and tokens).
		SkipHostEnv:  true,
		StartTimeout: p.StartTimeout,
		Stderr:       p.Stderr,
		SyncStdout:   p.SyncStdout,
		SyncStderr:   p.SyncStderr,
		Logger:       p.Logger,
	}
}
