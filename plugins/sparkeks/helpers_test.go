package main

// Helpers of the Simulator-backed tests (kube_test.go) and the operator
// tests (operator_test.go) alike.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// pluginConfig is the plugin's config for the cluster of kubeconfig,
// polling every 100 ms.
func pluginConfig(t *testing.T, kubeconfig string) json.RawMessage {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"kubeconfig": kubeconfig, "poll_interval": "100ms"})
	require.NoError(t, err)
	return cfg
}

// jobFor is a Spark SQL job against the cluster of kubeconfig. conf is its
// spark_conf (the Simulator's or the kubelet stand-in's tether.sim.* keys
// script the driver), extra more of its context.
func jobFor(t *testing.T, kubeconfig string, conf map[string]string, extra map[string]any) *plugin.Job {
	t.Helper()
	ctx := map[string]any{
		"image": "spark:3.5.3", "main_application_file": "local:///opt/tether/spark_sql.py",
		"query": "SELECT 1", "spark_conf": conf,
	}
	for k, v := range extra {
		ctx[k] = v
	}
	raw, err := json.Marshal(ctx)
	require.NoError(t, err)
	return &plugin.Job{ID: uuid.NewString(), Command: "spark-sql", Attempt: 1, Config: pluginConfig(t, kubeconfig), Context: raw}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// executeOK runs the job to its end and requires it succeeded.
func executeOK(t *testing.T, ctx context.Context, c plugintest.Client, job *plugin.Job) (*plugin.Result, *plugintest.Runtime) {
	t.Helper()
	rt := plugintest.NewRuntime(nil)
	res, err := c.Execute(ctx, job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	return res, rt
}

// requireClass requires err to be an error of class.
func requireClass(t *testing.T, err error, class plugin.ErrorClass) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, class, plugin.ClassOf(err), "%v", err)
}

// executeSubmitted runs Execute in a plugin process of its own until the
// handle records the application's UID, and returns the runtime and where
// the call's error will come.
func executeSubmitted(t *testing.T, ctx context.Context, job *plugin.Job) (*plugintest.Runtime, <-chan error) {
	t.Helper()
	rt := plugintest.NewRuntime(nil)
	errc := make(chan error, 1)
	go func() { _, err := connect(t).Execute(ctx, job, rt); errc <- err }()
	require.Eventually(t, func() bool { return strings.Contains(string(rt.Handle()), `"uid"`) }, 20*time.Second, 20*time.Millisecond)
	return rt, errc
}

// executeUntilSubmitted runs Execute in a plugin process until the handle
// records the application's UID, then cancels the call, as losing the agent
// would, and returns the runtime holding the handle.
func executeUntilSubmitted(t *testing.T, ctx context.Context, job *plugin.Job) *plugintest.Runtime {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	rt, errc := executeSubmitted(t, runCtx, job)
	cancel()
	<-errc
	return rt
}

// requireAdopted requires the handle of attempt 2 to say it adopted
// attempt 1's application.
func requireAdopted(t *testing.T, rt *plugintest.Runtime) {
	t.Helper()
	var h map[string]any
	require.NoError(t, json.Unmarshal(rt.Handle(), &h))
	require.EqualValues(t, 1, h["adopted_attempt"])
	require.EqualValues(t, 2, h["job_attempt"])
}
