package kubetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a child process of the stack (spark-operator,
// kube-controller-manager) whose output goes to a log file. It can be
// killed and started again.
type Process struct {
	Name string
	Log  string // the log file; restarts append to it

	path string
	args []string
	env  []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func newProcess(name, path, log string, args, env []string) *Process {
	return &Process{Name: name, Log: log, path: path, args: args, env: env}
}

// Start starts the process. It must not be running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.Name)
	}
	out, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		err := cmd.Wait()
		out.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}(p.done)
	return nil
}

// Running says whether the process is running (started and not exited).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill kills the process (SIGKILL) and waits for it.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

// Stop asks the process to end (SIGTERM), killing it after 10 s.
func (p *Process) Stop() error { return p.signal(syscall.SIGTERM, 10*time.Second) }

// Restart stops the process and starts it again.
func (p *Process) Restart() error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start()
}

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", p.Name, err)
	}
	if grace > 0 {
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
	return nil
}

// LogTail is the end of the process's log (the last 8 KB), for a failing
// test to show.
func (p *Process) LogTail() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	const keep = 8 << 10
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}
