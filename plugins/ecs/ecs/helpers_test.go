package ecs

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func TestMain(m *testing.M) {
	// Static credentials and no shared files or instance metadata. The
	// plugin gets AWS_* from the agent's pass_env the same way.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_REGION":                  "us-east-1",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	os.Unsetenv("AWS_ENDPOINT_URL")
	os.Unsetenv("AWS_PROFILE")
	os.Exit(m.Run())
}

// env is one emulator and one plugin talking to it.
type env struct {
	em  *emulator.Emulator
	url string
	p   *Plugin
}

func newEnv(t *testing.T, opts emulator.Options) *env {
	t.Helper()
	if opts.StopTimeout == 0 {
		opts.StopTimeout = time.Second
	}
	em := emulator.New(opts)
	url, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = em.Close() })
	return &env{em: em, url: url, p: New()}
}

// job is a job whose single container runs script under sh, logging to
// awslogs. extra keys go into the job's context.
func (e *env) job(script string, extra map[string]any) *plugin.Job {
	ctx := map[string]any{
		"poll_interval": "50ms",
		// The kind emulator delivers log events at once, and shows a
		// stream with its first event.
		"log_settle":      "50ms",
		"log_stream_wait": "200ms",
		"task_definition_template": map[string]any{
			"family": "tether-test",
			"containerDefinitions": []any{map[string]any{
				"name":    "app",
				"image":   "busybox",
				"command": []string{"sh", "-c", script},
				"logConfiguration": map[string]any{
					"logDriver": "awslogs",
					"options": map[string]string{
						"awslogs-group":         "/tether/test",
						"awslogs-stream-prefix": "job",
						"awslogs-region":        "us-east-1",
					},
				},
			}},
		},
	}
	for k, v := range extra {
		ctx[k] = v
	}
	rawCtx, _ := json.Marshal(ctx)
	rawCfg, _ := json.Marshal(map[string]any{"endpoint": e.url, "region": "us-east-1", "api_rates": testRates})
	return &plugin.Job{ID: uuid.NewString(), Command: "ecs-test", Attempt: 1, Context: rawCtx, Config: rawCfg}
}

// testRates lift the process's API budgets for tests that want ECS's
// answers at once. The budget tests set their own.
var testRates = map[string]float64{
	"describe_tasks": 200, "get_log_events": 200, "run_task": 200, "stop_task": 200,
	"list_tasks": 200, "describe_task_definition": 200, "register_task_definition": 200,
}

// ecsClient is the plugin's own client for e, for looking at the emulator.
func (e *env) ecsClient(t *testing.T) *ecs.Client {
	t.Helper()
	cl, err := e.p.clients.get(context.Background(), "us-east-1", e.url)
	require.NoError(t, err)
	return cl.ecs
}

func (e *env) describe(t *testing.T, arn string) (types.Task, bool) {
	t.Helper()
	out, err := e.ecsClient(t).DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Tasks: []string{arn}})
	require.NoError(t, err)
	if len(out.Tasks) == 0 {
		return types.Task{}, false
	}
	return out.Tasks[0], true
}

// lastHandle decodes rt's latest checkpoint.
func lastHandle(t *testing.T, rt *plugintest.Runtime) *Handle {
	t.Helper()
	raw := rt.Handle()
	require.NotEmpty(t, raw, "no checkpoint")
	h, err := decodeHandle(raw)
	require.NoError(t, err)
	return h
}

// runAsync runs Execute or Resume in the background.
type call struct {
	done chan struct{}
	res  *plugin.Result
	err  error
}

func runAsync(f func() (*plugin.Result, error)) *call {
	c := &call{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.res, c.err = f()
	}()
	return c
}

func (c *call) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		t.Fatalf("call did not return within %s", d)
	}
}

// quiesce waits until rt has stopped changing (over gRPC, the plugin side
// may still be finishing a write when the host's call has returned).
func quiesce(t *testing.T, rt *plugintest.Runtime) {
	t.Helper()
	last, stable := "", 0
	require.Eventually(t, func() bool {
		now := rt.StdoutString() + "\x00" + rt.StderrString() + "\x00" + string(rt.Handle())
		if now == last {
			stable++
		} else {
			last, stable = now, 0
		}
		return stable >= 5
	}, 10*time.Second, 50*time.Millisecond)
}

// lines counts the lines of s.
func lines(s string) map[string]int {
	m := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if l != "" {
			m[l]++
		}
	}
	return m
}
