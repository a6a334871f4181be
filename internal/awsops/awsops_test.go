package awsops

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/image"
)

func TestLoadFindsCallsByType(t *testing.T) {
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	_, err := os.Stat(goCmd)
	require.NoError(t, err, "the go command of this test's GOROOT")
	uses, err := Load(context.Background(), goCmd, "../..", image.BuildEnv(nil, runtime.GOARCH), image.BuildFlags(),
		"./internal/awsops/testdata/fixture")
	require.NoError(t, err)
	var got []string
	for _, op := range uses.Ops() {
		got = append(got, op.String())
	}
	assert.Equal(t, []string{"ecs.DescribeTasks", "ecs.ListTasks", "ecs.RunTask", "sts.GetCallerIdentity"}, got)
	run := uses[Op{"ecs", "RunTask"}]
	assert.Equal(t, map[string]bool{"Cluster": true, "Tags": true}, run.Sets, "fields set by the literal and by assignment")
	assert.Equal(t, []string{"internal/awsops/testdata/fixture/fixture.go:21"}, run.Calls)
	assert.Empty(t, uses[Op{"ecs", "StopTask"}].Calls, "an input built and never sent is no call")
}
