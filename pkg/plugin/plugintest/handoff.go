package plugintest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// NewPlugin returns a fresh value of the plugin under test, as a new plugin
// process starts: nothing of an earlier value's memory carries over.
type NewPlugin func() plugin.Plugin

// Moved is how a job left its first plugin value in HandOff and Crash.
type Moved struct {
	// Result and Err are what Resume on the fresh value returned.
	Result *plugin.Result
	Err    error
	// Runtime holds what the agent stored of the job across both calls:
	// its output (each line once, when the plugin is right) and its last
	// handle.
	Runtime *Runtime
}

// handOffWait bounds each wait of HandOff and Crash.
const handOffWait = time.Minute

// HandOff runs job as a rolling deploy hands it to another agent. Execute
// runs on one plugin value, over gRPC, until it has checkpointed
// checkpoints times. The agent then stops the call and drops the output
// held since the last checkpoint, and Resume runs from the last handle on a
// fresh value from newPlugin, over a connection of its own. A plugin that
// keeps state in memory, or writes a line before and after a hand-off,
// fails here though it passes Run.
func HandOff(t *testing.T, newPlugin NewPlugin, job *plugin.Job, checkpoints int) Moved {
	t.Helper()
	return move(t, newPlugin, job, checkpoints, false)
}

// Crash is HandOff with the first value's process killed instead: its
// connection is cut without its call being stopped first, and Resume starts
// on the fresh value at once, while the first may still be winding down, as
// remote work outlives a crashed process.
func Crash(t *testing.T, newPlugin NewPlugin, job *plugin.Job, checkpoints int) Moved {
	t.Helper()
	return move(t, newPlugin, job, checkpoints, true)
}

func move(t *testing.T, newPlugin NewPlugin, job *plugin.Job, checkpoints int, crash bool) Moved {
	t.Helper()
	if checkpoints < 1 {
		t.Fatalf("plugintest: a job moves after at least one checkpoint, got %d", checkpoints)
	}
	rt := NewGatedRuntime(nil)
	first, cut := connect(t, newPlugin())
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := first.Execute(ctx, job, rt)
		done <- err
	}()
	wait, cancel := context.WithTimeout(context.Background(), handOffWait)
	defer cancel()
	if err := firstCheckpoints(wait, rt, checkpoints, done); err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	if crash {
		cut()
	} else {
		stop()
		select {
		case <-done:
		case <-wait.Done():
			t.Fatalf("plugintest: Execute did not return within %s of its cancellation", handOffWait)
		}
	}
	rt.Detach()
	res, err := Connect(t, newPlugin()).Resume(wait, job, rt)
	return Moved{Result: res, Err: err, Runtime: rt}
}

// firstCheckpoints waits until rt holds n checkpoints. It fails when
// Execute returns first.
func firstCheckpoints(ctx context.Context, rt *Runtime, n int, done <-chan error) error {
	got := make(chan error, 1)
	go func() { got <- rt.WaitCheckpoints(ctx, n) }()
	select {
	case err := <-got:
		return err
	case err := <-done:
		return fmt.Errorf("Execute returned (err %v) before its checkpoint %d: nothing to hand off", err, n)
	}
}
