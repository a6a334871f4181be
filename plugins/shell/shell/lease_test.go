package shell

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// leasedRuntime is a host whose job's lease is good for validFor, and that
// never renews it: an agent frozen right after the call.
type leasedRuntime struct {
	*plugintest.Runtime
	validFor time.Duration
}

func (r leasedRuntime) LeaseDeadline() time.Duration { return r.validFor }

// When the SDK stops a call at its lease deadline, the shell plugin stops
// the job's group as on any cancel. SIGTERM, SIGKILL after kill_grace, and
// every process gone before the call returns.
func TestLeaseExpiryKillsTheGroupAfterItsGrace(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	c := plugintest.Connect(t, New())
	const validFor, grace = 800 * time.Millisecond, 300 * time.Millisecond
	begin := time.Now()
	done := make(chan execResult, 1)
	go func() {
		res, err := c.Execute(context.Background(), e.job(t, map[string]any{
			"script": stubbornScript, "working_dir": dir, "kill_grace": grace.String(),
		}), leasedRuntime{plugintest.NewRuntime(nil), validFor})
		done <- execResult{res, err, time.Now()}
	}()
	leader := readPID(t, filepath.Join(dir, "leader.pid"))
	gc := readPID(t, filepath.Join(dir, "gc.pid"))
	gcSleep := readPID(t, filepath.Join(dir, "sleep.pid"))

	r := waitResult(t, done, 10*time.Second)
	if !errors.Is(r.err, plugin.ErrLeaseExpired) {
		t.Fatalf("Execute: %v, want a lease expiry", r.err)
	}
	var le *plugin.LeaseExpiredError
	if !errors.As(r.err, &le) || !strings.Contains(le.PluginSaid, plugin.ErrLeaseExpired.Error()) || !strings.Contains(le.PluginSaid, "SIGKILL") {
		t.Errorf("the plugin said %q, want its lease named as the cause and SIGKILL after the grace", le.PluginSaid)
	}
	// Deadline (valid_for less 10 %) plus the whole grace. SIGKILL did not
	// come early.
	if took := r.at.Sub(begin); took < validFor-validFor/10+grace {
		t.Errorf("Execute returned %s after the call, before the deadline and the %s grace", took, grace)
	}
	for name, pid := range map[string]int{"leader": leader, "grandchild sh": gc, "grandchild sleep": gcSleep} {
		if alive(pid) {
			t.Errorf("%s (pid %d) is still alive after Execute returned", name, pid)
		}
	}
	if members, _ := groupMembers(leader); len(members) != 0 {
		t.Errorf("process group %d still has members %v", leader, members)
	}
}
