package ecs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// leasedRuntime is a host whose lease on the job is good for validFor and
// never renewed: an agent frozen right after the call.
type leasedRuntime struct {
	*plugintest.Runtime
	validFor time.Duration
}

func (r leasedRuntime) LeaseDeadline() time.Duration { return r.validFor }

// When the SDK stops a watch at its lease deadline, the task is left
// running, as on any cancel. Another agent resumes it, or Cleanup stops it.
func TestLeaseExpiryLeavesTaskRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	c := plugintest.Connect(t, e.p)
	job := e.job("echo started; sleep 60", nil)
	rt := leasedRuntime{plugintest.NewRuntime(nil), 3 * time.Second}
	call := runAsync(func() (*plugin.Result, error) { return c.Execute(context.Background(), job, rt) })
	require.Eventually(t, func() bool { return strings.Contains(rt.StdoutString(), "started") }, 10*time.Second, 10*time.Millisecond)
	call.wait(t, 10*time.Second)
	require.ErrorIs(t, call.err, plugin.ErrLeaseExpired)
	arn := lastHandle(t, rt.Runtime).arn(0)
	task, ok := e.describe(t, arn)
	require.True(t, ok)
	require.Equal(t, "RUNNING", aws.ToString(task.DesiredStatus), "a watch stopped at its lease deadline leaves the task alone")
}
