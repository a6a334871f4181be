// Command bare is a test plugin with only Execute (no resume, cleanup or
// health capability). It echoes the job's context as its result.
package main

import (
	"context"

	"github.com/tetherjobs/tether/pkg/plugin"
)

type bare struct{}

func (bare) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "bare", Version: "test"}, nil
}

func (bare) Execute(_ context.Context, job *plugin.Job, _ plugin.Runtime) (*plugin.Result, error) {
	return &plugin.Result{Output: job.Context, Message: "bare " + job.ID}, nil
}

func main() {
	plugin.Serve(bare{})
}
