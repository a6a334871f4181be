package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/gobuild"
	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// The real binary, started through go-plugin with a scrubbed environment
// plus the AWS_* variables an agent's pass_env would give it.

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-ecs-bin-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "tether-plugin-ecs")
	out, err := gobuild.Command(context.Background(), "go", binPath, ".").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		panic("building the plugin: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func connect(t *testing.T, endpoint string) plugintest.Client {
	t.Helper()
	return plugintest.StartBinary(t, binPath, []string{
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1",
		"AWS_ENDPOINT_URL=" + endpoint, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	})
}

func TestBinaryRunsAJob(t *testing.T) {
	em := emulator.New(emulator.Options{})
	url, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = em.Close() })
	c := connect(t, url)

	info, err := c.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, "ecs", info.Name)
	require.True(t, info.Has(plugin.CapResume) && info.Has(plugin.CapCleanup) && info.Has(plugin.CapHealth), "%+v", info)
	require.NoError(t, c.HealthCheck(context.Background(), nil), "endpoint from AWS_ENDPOINT_URL")

	jobCtx, _ := json.Marshal(map[string]any{
		"poll_interval": "50ms",
		"task_definition_template": map[string]any{
			"family": "tether-binary-test",
			"containerDefinitions": []any{map[string]any{
				"name": "app", "image": "busybox", "command": []string{"sh", "-c", "echo from-ecs"},
				"logConfiguration": map[string]any{"logDriver": "awslogs", "options": map[string]string{
					"awslogs-group": "/tether/test", "awslogs-stream-prefix": "bin",
				}},
			}},
		},
	})
	rt := plugintest.NewRuntime(nil)
	job := &plugin.Job{ID: "0b7a2c4e-8f1d-4c3a-9e55-2f6f2d1a7b90", Command: "demo", Attempt: 1, Context: jobCtx}
	res, err := c.Execute(context.Background(), job, rt)
	require.NoError(t, err)
	require.Equal(t, "1 ECS task(s) succeeded", res.Message)
	require.Equal(t, "from-ecs\n", rt.StdoutString())
	require.NotEmpty(t, rt.Handle())
}
