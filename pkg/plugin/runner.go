package plugin

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
)

// pipeGrace is how long a plugin's stdout and stderr are still read after
// the plugin process (and its process group) is gone. A process that left
// the group may hold the pipes open for ever. go-plugin reads them until EOF
// before it reports the exit, so past this they are closed under it.
const pipeGrace = 2 * time.Second

// Exit reports how a plugin process started through NewClientConfig ended.
type Exit struct {
	done chan struct{}

	// Set before done is closed.
	state    *os.ProcessState
	err      error // from starting or waiting
	byHost   bool  // the host killed it (go-plugin's Kill, a failed start)
	startErr bool
}

func newExit() *Exit { return &Exit{done: make(chan struct{})} }

// Done is closed when the process has exited (or could not be started).
func (e *Exit) Done() <-chan struct{} { return e.done }

// Started reports whether the process was started at all. Valid once Done
// is closed.
func (e *Exit) Started() bool { return !e.startErr }

// ByHost reports whether the host killed the process, as opposed to the
// process exiting on its own. Valid once Done is closed.
func (e *Exit) ByHost() bool { return e.byHost }

// String says how the process ended, as in "exited with status 1", "was
// killed by signal killed", "could not be started: ...". Valid once Done is
// closed.
func (e *Exit) String() string {
	switch {
	case e.startErr:
		return fmt.Sprintf("could not be started: %v", e.err)
	case e.state == nil:
		return fmt.Sprintf("ended without an exit status: %v", e.err)
	}
	// The zero WaitStatus (a platform without one) is no signal.
	if ws, _ := e.state.Sys().(syscall.WaitStatus); ws.Signaled() {
		return "was killed by signal " + ws.Signal().String()
	}
	return "exited with status " + strconv.Itoa(e.state.ExitCode())
}

// procRunner is the go-plugin runner for plugin binaries (ClientConfig's
// RunnerFunc). go-plugin's own runner (internal/cmdrunner) is replaced for
// two reasons, both from go-plugin v1.8.0's client.go. Start only learns
// that the process exited (doneCtx) after its stdout and stderr readers hit
// EOF and only then calls cmd.Wait, and Kill waits for those readers
// (clientWaitGroup) — so a plugin whose child inherited the pipes hangs the
// start, and the Kill after it, until that child exits. Here the process runs
// in its own process group. When it exits the whole group is killed, and the
// pipes are closed pipeGrace later whoever still holds them, so the handshake
// fails at once ("Failed to read any lines from plugin's stdout") and Kill
// returns.
type procRunner struct {
	path   string
	env    []string
	sha256 []byte
	exit   *Exit

	cmd            *exec.Cmd
	pid            int
	stdout, stderr *os.File

	mu             sync.Mutex
	reaped, killed bool // the leader is being reaped; Kill was called first
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) Start(context.Context) error {
	err := r.start()
	if err != nil {
		r.exit.err, r.exit.startErr = err, true
		close(r.exit.done)
	}
	return err
}

func (r *procRunner) start() error {
	if len(r.sha256) > 0 {
		// Right before the exec, as go-plugin's own SecureConfig check would.
		sc := &goplugin.SecureConfig{Checksum: r.sha256, Hash: sha256.New()}
		ok, err := sc.Check(r.path)
		if err != nil {
			return fmt.Errorf("verifying the checksum of %s: %w", r.path, err)
		}
		if !ok {
			return goplugin.ErrChecksumsDoNotMatch
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("creating the plugin's stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fmt.Errorf("creating the plugin's stderr pipe: %w", err)
	}
	// No stdin. A plugin has nothing to read from the agent's terminal.
	cmd := exec.Command(r.path)
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = groupAttr()
	startErr := cmd.Start()
	// The child has its own copies. Ours must go so readers see EOF.
	outW.Close()
	errW.Close()
	if startErr != nil {
		outR.Close()
		errR.Close()
		return startErr
	}
	r.cmd, r.pid, r.stdout, r.stderr = cmd, cmd.Process.Pid, outR, errR
	go r.wait()
	return nil
}

// wait follows the process to its end, then kills what is left of its
// group and, after pipeGrace, closes the pipes.
func (r *procRunner) wait() {
	// Wait for the exit without reaping where the platform allows it. While
	// the leader is an unreaped zombie its pid, the group's id, cannot be
	// reused, so the group kill below cannot hit a stranger.
	waitNoReap(r.pid)
	r.mu.Lock()
	killLeftovers(r.cmd.Process)
	r.reaped = true
	r.mu.Unlock()
	err := r.cmd.Wait()
	r.mu.Lock()
	// Killed by the host only if it died of the host's SIGKILL: a process
	// that exited with a status did so on its own, even if Kill came while
	// it was exiting.
	r.exit.state, r.exit.err = r.cmd.ProcessState, err
	// Signal is -1 unless the process died of one.
	ws, _ := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	r.exit.byHost = r.killed && ws.Signal() == syscall.SIGKILL
	r.mu.Unlock()
	close(r.exit.done)
	time.AfterFunc(pipeGrace, func() {
		_ = r.stdout.Close()
		_ = r.stderr.Close()
	})
}

func (r *procRunner) Wait(context.Context) error {
	<-r.exit.done
	return r.exit.err
}

// Kill kills the process and every process in its group.
func (r *procRunner) Kill(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.reaped {
		return nil
	}
	r.killed = true
	killGroup(r.cmd.Process)
	return nil
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.path }
func (r *procRunner) ID() string            { return strconv.Itoa(r.pid) }

func (r *procRunner) Diagnose(context.Context) string {
	return "A tether plugin is a binary whose main calls plugin.Serve; it must print go-plugin's handshake line first on its stdout."
}

// The plugin runs on this host. Addresses need no translation.
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
