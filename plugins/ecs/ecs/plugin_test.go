package ecs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func TestInfo(t *testing.T) {
	plugintest.Run(t, New(), func(t *testing.T, c plugintest.Client) {
		info, err := c.Info(context.Background())
		require.NoError(t, err)
		require.Equal(t, "ecs", info.Name)
		for _, capability := range []string{plugin.CapResume, plugin.CapCleanup, plugin.CapHealth} {
			require.True(t, info.Has(capability), capability)
		}
	})
}

func TestExecuteSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo hello; echo world >&2", nil)
		rt := plugintest.NewRuntime(nil)
		res, err := c.Execute(context.Background(), job, rt)
		require.NoError(t, err)
		require.Equal(t, "1 ECS task(s) succeeded", res.Message)
		// stdout and stderr share the awslogs stream, in whatever order the
		// two pipes delivered them.
		require.Equal(t, map[string]int{"hello": 1, "world": 1}, lines(rt.StdoutString()))

		startedBy := StartedBy(job.ID, 0)
		token := ClientToken(job.ID, 1, 0, 1, 0)
		require.Contains(t, rt.StderrString(), "startedBy "+startedBy)
		require.Contains(t, rt.StderrString(), "clientToken "+token)
		require.Equal(t, 1, e.em.Launches(startedBy))

		h := lastHandle(t, rt)
		require.Len(t, h.Tasks, 1)
		ts := h.Tasks[0]
		require.Equal(t, outcomeSucceeded, ts.Outcome)
		require.Equal(t, 1, ts.Attempts)
		require.Equal(t, map[string]int32{"app": 0}, ts.Exit)
		require.Empty(t, ts.Logs, "a settled task keeps no log position")
		require.NotEmpty(t, h.TaskDefinitionARN)
		arn := h.arn(0)

		var out Output
		require.NoError(t, json.Unmarshal(res.Output, &out))
		require.Equal(t, arn, out.Tasks[0].TaskARN)
		require.Equal(t, startedBy, out.Tasks[0].StartedBy)

		// The first checkpoint precedes RunTask. One follows it with the ARN.
		cps := rt.Checkpoints()
		first, err := decodeHandle(cps[0])
		require.NoError(t, err)
		require.Equal(t, 1, first.Tasks[0].Attempts)
		require.Empty(t, first.arn(0))
		require.NotZero(t, first.Tasks[0].LaunchedAt)
		second, err := decodeHandle(cps[1])
		require.NoError(t, err)
		require.Equal(t, arn, second.arn(0))

		// The task is tagged with the job.
		task, ok := e.describeTags(t, arn)
		require.True(t, ok)
		tags := map[string]string{}
		for _, tag := range task.Tags {
			tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
		}
		require.Equal(t, job.ID, tags[tagJobID])
		require.Equal(t, "0", tags[tagTaskIndex])
		require.Equal(t, "1", tags[tagJobAttempt])
	})
}

func (e *env) describeTags(t *testing.T, arn string) (types.Task, bool) {
	t.Helper()
	out, err := e.ecsClient(t).DescribeTasks(context.Background(), &ecs.DescribeTasksInput{
		Tasks: []string{arn}, Include: []types.TaskField{types.TaskFieldTags},
	})
	require.NoError(t, err)
	if len(out.Tasks) == 0 {
		return types.Task{}, false
	}
	return out.Tasks[0], true
}

func TestParallelTasksPrefixLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("echo hi", map[string]any{"task_count": 3})
	rt := plugintest.NewRuntime(nil)
	res, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err)
	require.Equal(t, "3 ECS task(s) succeeded", res.Message)
	require.Equal(t, map[string]int{"[0/app] hi": 1, "[1/app] hi": 1, "[2/app] hi": 1}, lines(rt.StdoutString()))
	for i := range 3 {
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, i)))
	}
}

// Direct is plugintest.Direct, for tests that need only one path.
func Direct(p *Plugin) plugintest.Client { return plugintest.Direct(p) }

func TestExecuteNonZeroExit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo oops; exit 3", nil)
		rt := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), job, rt)
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "container app exited with code 3")
		require.Contains(t, msg, "after 1 launch attempt(s)")
		require.Equal(t, "oops\n", rt.StdoutString())
		require.Equal(t, outcomeFailed, lastHandle(t, rt).Tasks[0].Outcome)
	})
}

func TestExecuteFailToStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{FailToStartRate: 1})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo never", nil)
		_, err := c.Execute(context.Background(), job, plugintest.NewRuntime(nil))
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "failed to start")
	})
}

// Capacity failures launch nothing and pass with time. They are tried again
// without using max_fail_count, until launch_retry_timeout, and then the
// job is retriable (the host may retry it later), never permanent.
func TestExecuteRunTaskCapacityFailuresAreRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{CapacityErrorRate: 1})
	job := e.job("echo never", map[string]any{"max_fail_count": 2, "launch_retry_timeout": "3s"})
	rt := plugintest.NewRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.Retriable, class)
	require.Contains(t, msg, "no capacity: RESOURCE:")
	require.Contains(t, msg, "gave up after 3s")
	h := lastHandle(t, rt)
	require.Equal(t, 1, h.Tasks[0].Attempts, "no launch budget used")
	require.Positive(t, h.Tasks[0].Try)
	require.Zero(t, e.em.Launches(StartedBy(job.ID, 0)))
}

func TestMaxFailCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo try; exit 1", map[string]any{"max_fail_count": 3})
		rt := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), job, rt)
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "after 3 launch attempt(s)")
		require.Equal(t, 3, e.em.Launches(StartedBy(job.ID, 0)))
		require.Equal(t, "try\ntry\ntry\n", rt.StdoutString())
		h := lastHandle(t, rt)
		require.Equal(t, 3, h.Tasks[0].Attempts)
		require.Len(t, h.Tasks[0].Prev, 2)
	})
}

func TestFailedTaskStopsTheOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	// Both tasks would run for a minute. task 0 is stopped from outside
	// (its container then exits 143), which fails it on its only attempt.
	job := e.job(`sleep 60`, map[string]any{"task_count": 2, "timeout": "1m"})
	rt := plugintest.NewRuntime(nil)
	call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
	var arn0 string
	require.Eventually(t, func() bool {
		raw := rt.Handle()
		if raw == nil {
			return false
		}
		h, err := decodeHandle(raw)
		require.NoError(t, err)
		arn0 = h.arn(0)
		return h.arn(0) != "" && h.arn(1) != ""
	}, 10*time.Second, 20*time.Millisecond)
	_, err := e.ecsClient(t).StopTask(context.Background(), &ecs.StopTaskInput{Task: aws.String(arn0), Reason: aws.String("test")})
	require.NoError(t, err)
	call.wait(t, 20*time.Second)
	class, msg := plugintest.Error(t, call.err)
	require.Equal(t, plugin.Permanent, class)
	require.Contains(t, msg, "task 0 failed")
	h := lastHandle(t, rt)
	require.Eventually(t, func() bool {
		task, ok := e.describe(t, h.arn(1))
		return ok && aws.ToString(task.DesiredStatus) == "STOPPED"
	}, 10*time.Second, 50*time.Millisecond, "the other task is stopped")
}

func TestTimeoutStopsTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo started; sleep 60", map[string]any{"timeout": "700ms"})
		rt := plugintest.NewRuntime(nil)
		start := time.Now()
		_, err := c.Execute(context.Background(), job, rt)
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "timed out after 700ms")
		require.Less(t, time.Since(start), 10*time.Second)
		arn := lastHandle(t, rt).arn(0)
		require.Eventually(t, func() bool {
			task, ok := e.describe(t, arn)
			return ok && aws.ToString(task.LastStatus) == "STOPPED" &&
				strings.Contains(aws.ToString(task.StoppedReason), "timed out")
		}, 10*time.Second, 50*time.Millisecond)
	})
}

func TestThrottlingStillSucceeds(t *testing.T) {
	// Like plugintest.Run, but each path gets its own emulator and plugin,
	// so one path's throttling does not pace the other's budget.
	for _, path := range []string{"direct", "grpc"} {
		t.Run(path, func(t *testing.T) {
			e := newEnv(t, emulator.Options{ThrottleRate: 0.3, Seed: 42})
			c := plugintest.Direct(e.p)
			if path == "grpc" {
				c = plugintest.Connect(t, e.p)
			}
			testThrottling(t, e, c)
		})
	}
}

func testThrottling(t *testing.T, e *env, c plugintest.Client) {
	job := e.job("echo one; echo two", nil)
	rt := plugintest.NewRuntime(nil)
	_, err := c.Execute(context.Background(), job, rt)
	require.NoError(t, err)
	require.Equal(t, "one\ntwo\n", rt.StdoutString())
	require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
}

func TestCancelLeavesTaskRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo started; sleep 60", nil)
		rt := plugintest.NewRuntime(nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		call := runAsync(func() (*plugin.Result, error) { return c.Execute(ctx, job, rt) })
		require.Eventually(t, func() bool { return strings.Contains(rt.StdoutString(), "started") }, 10*time.Second, 10*time.Millisecond)
		cancel()
		call.wait(t, 5*time.Second)
		require.ErrorIs(t, call.err, context.Canceled)
		quiesce(t, rt)
		arn := lastHandle(t, rt).arn(0)
		task, ok := e.describe(t, arn)
		require.True(t, ok)
		require.Equal(t, "RUNNING", aws.ToString(task.DesiredStatus), "a cancelled watch leaves the task to the agent")

		// Cleanup (what the agent calls for a cancel) stops it, idempotently.
		require.NoError(t, c.Cleanup(context.Background(), job))
		require.NoError(t, c.Cleanup(context.Background(), job))
		task, ok = e.describe(t, arn)
		require.True(t, ok)
		require.Equal(t, "STOPPED", aws.ToString(task.DesiredStatus))
		require.Equal(t, "tether cleanup of job "+job.ID, aws.ToString(task.StoppedReason))
	})
}

func TestCleanupOfJobThatNeverRan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		require.NoError(t, c.Cleanup(context.Background(), e.job("true", map[string]any{"task_count": 2})))
	})
}

func TestHealthCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		cfg, _ := json.Marshal(map[string]any{"endpoint": e.url, "region": "us-east-1"})
		require.NoError(t, c.HealthCheck(context.Background(), cfg))
		cfg, _ = json.Marshal(map[string]any{"endpoint": e.url, "region": "us-east-1", "cluster": "nope"})
		err := c.HealthCheck(context.Background(), cfg)
		_, msg := plugintest.Error(t, err)
		require.Contains(t, msg, `cluster "nope"`)
	})
}

func TestTemplateRevisionReusedUntilChanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	run := func(script string) string {
		rt := plugintest.NewRuntime(nil)
		_, err := Direct(e.p).Execute(context.Background(), e.job(script, nil), rt)
		require.NoError(t, err)
		return lastHandle(t, rt).TaskDefinitionARN
	}
	a := run("echo a")
	require.Equal(t, a, run("echo a"), "unchanged template, same revision")
	b := run("echo b")
	require.NotEqual(t, a, b)
	require.True(t, strings.HasSuffix(b, fmt.Sprintf(":%d", revision(t, a)+1)), "%s follows %s", b, a)
}

func revision(t *testing.T, arn string) int {
	t.Helper()
	var n int
	_, err := fmt.Sscanf(arn[strings.LastIndexByte(arn, ':')+1:], "%d", &n)
	require.NoError(t, err)
	return n
}

func TestValidationErrorIsPermanent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("true", map[string]any{"bogus": 1})
		_, err := c.Execute(context.Background(), job, plugintest.NewRuntime(nil))
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, `unknown key "bogus"`)
	})
}
