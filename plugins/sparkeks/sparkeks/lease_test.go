package sparkeks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// When the SDK stops a watch at its lease deadline, the application and
// its ConfigMap are left alone, as on any cancel. Another agent resumes
// the job, or Cleanup deletes them.
func TestLeaseExpiryLeavesApplication(t *testing.T) {
	e := newEnv(t)
	c := plugintest.Connect(t, e.p)
	job := newJob(t, nil)
	rt := leasedRuntime{plugintest.NewRuntime(nil), 2 * time.Second}
	ch := background(func() (*plugin.Result, error) { return c.Execute(context.Background(), job, rt) })
	app := e.waitApp(t, job)
	e.setStatus(t, job, "RUNNING", "", "")
	o := wait(t, ch)
	require.ErrorIs(t, o.err, plugin.ErrLeaseExpired)
	assert.Equal(t, app.GetUID(), e.app(t, job).GetUID(), "the application is left running")
	_, err := e.configMap(job)
	assert.NoError(t, err)
}
