package ecs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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

// The tests in this file run the plugin against the emulator's hostile
// profile (or the part of it each is about). That profile is ECS as it
// really behaves.

// hostile is the emulator's hostile profile with the random faults a test
// does not measure turned off, so each test fails only for its own reason.
func hostile(keep func(o *emulator.Options)) emulator.Options {
	o := emulator.HostileOptions()
	o.RunTaskTransientRate, o.CapacityErrorRate, o.InfraStopRate, o.ServerErrorRate = 0, 0, 0, 0
	o.Seed = 7
	if keep != nil {
		keep(&o)
	}
	return o
}

// waitStderr waits until rt's stderr contains s.
func waitStderr(t *testing.T, rt *plugintest.Runtime, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(rt.StderrString(), s) }, 20*time.Second, 10*time.Millisecond, "stderr never said %q: %s", s, rt.StderrString())
}

// A task just launched is MISSING from DescribeTasks for a while (eventual
// consistency). The job waits for it instead of ending outcome_unknown.
func TestHostileConsistencyWindowIsWaitedFor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, hostile(nil))
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			job := e.job(fmt.Sprintf("echo job-%d; sleep 0.5", i), map[string]any{"log_settle": "2s"})
			rt := plugintest.NewGatedRuntime(nil)
			res, err := Direct(e.p).Execute(context.Background(), job, rt)
			require.NoError(t, err, "stderr: %s", rt.StderrString())
			require.Equal(t, "1 ECS task(s) succeeded", res.Message)
			require.Equal(t, fmt.Sprintf("job-%d\n", i), rt.StdoutString())
		})
	}
	wg.Wait()
}

// The last lines of a task that fails arrive in CloudWatch after the task
// stopped. The drain waits log_settle, so the job's output ends with them.
func TestHostileLastLinesAfterStopAreKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t, hostile(nil))
	job := e.job("i=1; while [ $i -le 20 ]; do echo line-$i; i=$((i+1)); done; echo 'FATAL: the final error'; exit 3", map[string]any{"log_settle": "2s"})
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.Permanent, class)
	require.Contains(t, msg, "exited with code 3")
	require.True(t, strings.HasSuffix(rt.StdoutString(), "line-20\nFATAL: the final error\n"), "stdout: %q", rt.StdoutString())
	require.Len(t, lines(rt.StdoutString()), 21)
}

// Transient RunTask refusals (the provisioning-capacity ClientException,
// EC2's RequestLimitExceeded), failures[] capacity and quota reasons, and
// reasons the plugin does not know are tried
// again without using max_fail_count, and the job then succeeds.
func TestHostileTransientLaunchRefusalsAreRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults emulator.Faults
		says   string
	}{
		{"transient errors", emulator.Faults{RunTaskTransientRate: 1}, "RunTask refused"},
		{"capacity failures", emulator.Faults{CapacityErrorRate: 1, CapacityReasons: emulator.AllCapacityReasons()}, "no capacity"},
		{"the Fargate vCPU quota", emulator.Faults{CapacityErrorRate: 1, CapacityReasons: []string{emulator.ReasonFargateVCPUQuota}}, "no capacity"},
		// A reason no reference lists is tried again too, bounded by
		// launch_retry_timeout, not a permanent failure.
		{"an unknown reason", emulator.Faults{CapacityErrorRate: 1, CapacityReasons: []string{"Something ECS says tomorrow"}}, "a reason the plugin does not know"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, emulator.Options{})
			e.em.SetFaults(tc.faults)
			job := e.job("echo launched", map[string]any{"max_fail_count": 1})
			rt := plugintest.NewGatedRuntime(nil)
			call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
			waitStderr(t, rt, tc.says)
			e.em.SetFaults(emulator.Faults{})
			call.wait(t, 30*time.Second)
			require.NoError(t, call.err, "stderr: %s", rt.StderrString())
			require.Equal(t, "launched\n", rt.StdoutString())
			h := lastHandle(t, rt)
			require.Equal(t, 1, h.Tasks[0].Attempts, "no launch budget used")
			require.Positive(t, h.Tasks[0].Try)
			require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
		})
	}
}

// A Spot reclaim or an instance termination is not the work's failure. The
// task is relaunched on its own budget (max_fail_count 1 is kept), and
// past that budget the job fails naming the cause.
func TestHostileInfrastructureStops(t *testing.T) {
	t.Parallel()
	t.Run("relaunched", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, emulator.Options{InfraStopRate: 1, InfraStopDelay: 100 * time.Millisecond})
		job := e.job("echo started; sleep 30", map[string]any{"max_fail_count": 1, "max_infra_relaunches": 2})
		rt := plugintest.NewGatedRuntime(nil)
		call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
		waitStderr(t, rt, "stopped by the infrastructure")
		// The relaunch runs to its end.
		e.em.SetFaults(emulator.Faults{})
		call.wait(t, 60*time.Second)
		// The first relaunch may have been stopped too before the faults
		// were lifted (max_infra_relaunches 2 leaves room for that).
		require.NoError(t, call.err, "stderr: %s", rt.StderrString())
		var out Output
		require.NoError(t, json.Unmarshal(call.res.Output, &out))
		require.GreaterOrEqual(t, out.Tasks[0].Relaunch, 1)
		require.Equal(t, 1, out.Tasks[0].Attempts, "max_fail_count not used")
		require.Equal(t, 1+out.Tasks[0].Relaunch, e.em.Launches(StartedBy(job.ID, 0)))
	})
	t.Run("budget spent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, emulator.Options{InfraStopRate: 1, InfraStopDelay: 100 * time.Millisecond})
		job := e.job("sleep 30", map[string]any{"max_infra_relaunches": 1})
		_, err := Direct(e.p).Execute(context.Background(), job, plugintest.NewGatedRuntime(nil))
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "stopped by the infrastructure 2 time(s)")
		require.Equal(t, 2, e.em.Launches(StartedBy(job.ID, 0)))
	})
}

// An Execute that fails after launching tasks stops them. task 1's launch
// is refused (its client token was taken with other parameters), so the
// job ends outcome_unknown, and task 0, already running, is stopped rather
// than left beside a retry of the job.
func TestHostileFailedExecuteStopsWhatItLaunched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("echo started; sleep 60", map[string]any{"task_count": 2})
	ctx := context.Background()
	// Someone else holds task 1's first client token, with other parameters.
	cl := e.ecsClient(t)
	_, err := cl.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family: aws.String("squatter"),
		ContainerDefinitions: []types.ContainerDefinition{{
			Name: aws.String("x"), Image: aws.String("busybox"), Command: []string{"sleep", "60"},
		}},
	})
	require.NoError(t, err)
	sq, err := cl.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("squatter"), ClientToken: aws.String(ClientToken(job.ID, 1, 1, 1, 0))})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.StopTask(ctx, &ecs.StopTaskInput{Task: sq.Tasks[0].TaskArn}) })

	rt := plugintest.NewGatedRuntime(nil)
	_, err = Direct(e.p).Execute(ctx, job, rt)
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.OutcomeUnknown, class)
	require.Contains(t, msg, "ConflictException")
	h := lastHandle(t, rt)
	task, ok := e.describe(t, h.arn(0))
	require.True(t, ok)
	require.Equal(t, "STOPPED", aws.ToString(task.DesiredStatus), "task 0 must not outlive its attempt")
	require.Contains(t, aws.ToString(task.StoppedReason), "attempt 1 ended")
}

// GetLogEvents errors never decide the job. With the account's
// GetLogEvents bucket far below what the plugin asks, reads are throttled,
// and the job still ends succeeded with every line.
func TestHostileLogThrottlingDoesNotDecideTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{RateLimits: true, RateLimitFigures: map[string]emulator.RateLimit{"GetLogEvents": {Rate: 2, Burst: 1}}})
	job := e.job("i=1; while [ $i -le 30 ]; do echo line-$i; i=$((i+1)); sleep 0.05; done", nil)
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	got := lines(rt.StdoutString())
	require.Len(t, got, 30)
	_, throttled := e.em.Calls()
	require.Positive(t, throttled["GetLogEvents"], "the test must have been throttled to prove anything")
}

// CloudWatch may answer an empty page with a new forward token mid-stream.
// The GetLogEvents reference says only that a token that comes back
// unchanged is the end, and SDK users meet empty pages with new tokens
// (aws-sdk-net issue 3218). The plugin reads past them, during the drain
// too: every line once, in order.
func TestHostileEmptyLogPagesAreReadPast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{EmptyLogPageRate: 0.5, Seed: 3})
	job := e.job("i=1; while [ $i -le 40 ]; do echo line-$i; i=$((i+1)); done", map[string]any{"log_settle": "300ms"})
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	require.Equal(t, want.String(), rt.StdoutString())
	require.Positive(t, e.em.EmptyLogPages(), "the test must have met an empty page to prove anything")
}

// A container that never logs has no stream. The job says so once and
// succeeds.
func TestHostileMissingStreamIsNamedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, hostile(nil))
	job := e.job("true", map[string]any{"log_settle": "2s", "log_stream_wait": "1s"})
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(rt.StderrString(), "no log stream"), "stderr: %s", rt.StderrString())
}

// A stream CloudWatch shows later than log_settle is looked for until
// log_stream_wait, not given up at the first drain read: the job's line is
// in its stdout, once.
func TestHostileLateStreamIsWaitedFor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{LogStreamDelay: 3 * time.Second})
	job := e.job("echo late-line", map[string]any{"log_settle": "200ms", "log_stream_wait": "20s"})
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	require.Equal(t, "late-line\n", rt.StdoutString(), "stderr: %s", rt.StderrString())
	require.NotContains(t, rt.StderrString(), "no log stream")
}

// A launch begun longer ago than stopped_task_retention whose task is not
// found is never reissued. Its task may have run and been purged, and what
// a purged task's token does on reissue is not documented (the hostile
// emulator starts the work again).
func TestHostileOldLaunchIsNeverReissued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, hostile(nil))
	job := e.job("echo ok", nil)
	h := newHandle(job.ID, 1, DefaultCluster, 1)
	h.Tasks[0].Attempts = 1
	h.Tasks[0].LaunchedAt = time.Now().Add(-2 * time.Hour).UnixMilli()
	h.StartedAt = time.Now().Add(-2 * time.Hour).Unix()
	td, err := resolveTaskDef(context.Background(), mustClients(t, e), mustConfig(t, string(job.Config), string(job.Context)))
	require.NoError(t, err)
	h.TaskDefinitionARN = td.ARN
	raw, err := h.encode()
	require.NoError(t, err)
	before, _ := e.em.Calls()
	_, err = Direct(e.p).Resume(context.Background(), job, plugintest.NewGatedRuntime(raw))
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.OutcomeUnknown, class)
	require.Contains(t, msg, "longer than stopped_task_retention")
	after, _ := e.em.Calls()
	require.Equal(t, before["RunTask"], after["RunTask"], "no RunTask")
}

func mustClients(t *testing.T, e *env) *clients {
	t.Helper()
	cl, err := e.p.clients.get(context.Background(), "us-east-1", e.url)
	require.NoError(t, err)
	return cl
}

// Cleanup stops what the handle says was launched, in the cluster the handle
// names (the config moved on), and never a later attempt's task.
func TestHostileCleanupFollowsTheHandle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	ctx := context.Background()
	_, err := e.ecsClient(t).CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("old")})
	require.NoError(t, err)

	job := e.job("echo started; sleep 60", map[string]any{"cluster": "old"})
	rt := plugintest.NewGatedRuntime(nil)
	cctx, cancel := context.WithCancel(ctx)
	call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(cctx, job, rt) })
	require.Eventually(t, func() bool { h, err := decodeHandle(rt.Handle()); return err == nil && h.arn(0) != "" }, 10*time.Second, 10*time.Millisecond)
	cancel()
	call.wait(t, 10*time.Second)
	attempt1 := lastHandle(t, rt)

	// Attempt 2 of the job runs in the default cluster.
	retry := *job
	retry.Attempt = 2
	var c map[string]any
	require.NoError(t, json.Unmarshal(job.Context, &c))
	delete(c, "cluster")
	retry.Context, _ = json.Marshal(c)
	rt2 := plugintest.NewGatedRuntime(nil)
	cctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	call2 := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(cctx2, &retry, rt2) })
	require.Eventually(t, func() bool { h, err := decodeHandle(rt2.Handle()); return err == nil && h.arn(0) != "" }, 10*time.Second, 10*time.Millisecond)

	// Attempt 1's Cleanup, with its handle, under today's config.
	clean := retry
	clean.Attempt = 1
	clean.Handle = rt.Handle()
	require.NoError(t, Direct(e.p).Cleanup(ctx, &clean))

	out, err := e.ecsClient(t).DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("old"), Tasks: []string{attempt1.arn(0)}})
	require.NoError(t, err)
	require.Len(t, out.Tasks, 1)
	require.Equal(t, "STOPPED", aws.ToString(out.Tasks[0].DesiredStatus), "attempt 1's task, in the cluster its handle names, is stopped")
	task, ok := e.describe(t, lastHandle(t, rt2).arn(0))
	require.True(t, ok)
	require.Equal(t, "RUNNING", aws.ToString(task.DesiredStatus), "attempt 2's task is not attempt 1's Cleanup's to stop")
	cancel2()
	call2.wait(t, 10*time.Second)
	clean.Attempt, clean.Handle = 2, rt2.Handle()
	require.NoError(t, Direct(e.p).Cleanup(ctx, &clean))
}

// Jobs starting at once with one new template register one revision.
func TestHostileTemplateRegistrationIsSingleFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := Direct(e.p).Execute(context.Background(), e.job("echo same", nil), plugintest.NewGatedRuntime(nil))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	calls, _ := e.em.Calls()
	require.Equal(t, 1, calls["RegisterTaskDefinition"])
	require.LessOrEqual(t, calls["DescribeTaskDefinition"], 2, "the revision is described once, not per job")
}

// One poller per process and cluster. 60 concurrent jobs are described in
// batches, not once each per poll, and GetLogEvents stays inside the
// process's budget while every job still gets its whole log.
func TestHostilePollerBatchesAcrossJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, hostile(func(o *emulator.Options) {
		o.ConsistencyWindow = 200 * time.Millisecond
		o.LogLag = 200 * time.Millisecond
	}))
	const n = 60
	rates := map[string]any{"describe_tasks": 5, "get_log_events": 8, "run_task": 15}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// One template for all (a template per job would register a
			// revision per job, at RegisterTaskDefinition's 1/s).
			script := fmt.Sprintf("i=1; while [ $i -le 10 ]; do echo job-%d-line-$i; i=$((i+1)); sleep 0.2; done", i)
			job := e.job("true", map[string]any{
				"poll_interval": "500ms", "log_settle": "500ms",
				"container_overrides": []any{map[string]any{"name": "app", "command": []string{"sh", "-c", script}}},
			})
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(job.Config, &cfg))
			cfg["api_rates"] = rates
			job.Config, _ = json.Marshal(cfg)
			rt := plugintest.NewGatedRuntime(nil)
			t0 := time.Now()
			_, err := Direct(e.p).Execute(context.Background(), job, rt)
			require.NoError(t, err, "stderr: %s", rt.StderrString())
			require.Len(t, lines(rt.StdoutString()), 10)
			if time.Since(t0) > 20*time.Second {
				t.Logf("slow job %d (%s): %s", i, time.Since(t0), rt.StderrString())
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	calls, throttled := e.em.Calls()
	t.Logf("%d jobs in %s: DescribeTasks %d (%.1f/s), GetLogEvents %d (%.1f/s), throttled %v",
		n, took.Round(time.Millisecond), calls["DescribeTasks"], float64(calls["DescribeTasks"])/took.Seconds(),
		calls["GetLogEvents"], float64(calls["GetLogEvents"])/took.Seconds(), throttled)
	// One DescribeTasks per job per 500 ms poll would be ≥ 60 × (2 s / 0.5 s)
	// = 240. Batched, a round is one call.
	polls := took.Seconds() / 0.5
	require.Less(t, float64(calls["DescribeTasks"]), 2*polls+10, "DescribeTasks must be batched across jobs")
	require.Less(t, calls["DescribeTasks"], n*4/2, "DescribeTasks must be batched across jobs")
	require.LessOrEqual(t, float64(calls["DescribeTasks"])/took.Seconds(), 5.0+1, "within describe_tasks")
	require.LessOrEqual(t, float64(calls["GetLogEvents"])/took.Seconds(), 8.0+1, "within get_log_events")
	require.Zero(t, throttled["GetLogEvents"], "under the account limit, nothing is throttled")
	require.Zero(t, throttled["DescribeTasks"])
}

// A task definition's awslogs-region is where its streams are read, not
// the tasks' region.
func TestAwslogsRegionIsHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("echo from-afar", nil)
	var c map[string]any
	require.NoError(t, json.Unmarshal(job.Context, &c))
	tpl := c["task_definition_template"].(map[string]any)
	cd := tpl["containerDefinitions"].([]any)[0].(map[string]any)
	cd["logConfiguration"].(map[string]any)["options"].(map[string]any)["awslogs-region"] = "eu-west-1"
	job.Context, _ = json.Marshal(c)
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	require.NoError(t, err)
	require.Equal(t, "from-afar\n", rt.StdoutString())
	e.p.clients.mu.Lock()
	_, ok := e.p.clients.m[clientKey{"eu-west-1", e.url}]
	e.p.clients.mu.Unlock()
	require.True(t, ok, "the log stream is read through an eu-west-1 client")
}

// A program that answers the infrastructure's SIGTERM (the Fargate Spot
// two-minute warning) by exiting 0 was cut short, not done: the stop code
// says the stop came first. The task is relaunched, and the job succeeds
// only when a launch ran to its own end.
func TestHostileSpotInterruptionAnsweredByExitZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{InfraStopRate: 1, InfraStopDelay: 100 * time.Millisecond, InfraStopGraceful: true})
	job := e.job("trap 'echo interrupted; exit 0' TERM; echo started; sleep 2 & wait", map[string]any{"max_infra_relaunches": 3})
	rt := plugintest.NewGatedRuntime(nil)
	call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
	waitStderr(t, rt, "exited 0 after the stop began")
	e.em.SetFaults(emulator.Faults{})
	call.wait(t, 60*time.Second)
	require.NoError(t, call.err, "stderr: %s", rt.StderrString())
	var out Output
	require.NoError(t, json.Unmarshal(call.res.Output, &out))
	require.GreaterOrEqual(t, out.Tasks[0].Relaunch, 1, "relaunched, not counted done")
	require.Equal(t, 1+out.Tasks[0].Relaunch, e.em.Launches(StartedBy(job.ID, 0)))
}

// A task that fails to start for a cause that passes on its own (a pull
// rate limit) is relaunched on the infrastructure's budget, so
// max_fail_count 1 does not end the job, and it succeeds once the cause
// passed. One that fails for its own cause (no such image) ends it at once.
func TestHostileTransientStartFailureIsRelaunched(t *testing.T) {
	t.Parallel()
	t.Run("transient", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, emulator.Options{FailToStartRate: 1, FailToStartReasons: []string{emulator.FailToStartPullRateLimit}})
		job := e.job("echo ran", map[string]any{"max_fail_count": 1, "max_infra_relaunches": 5})
		rt := plugintest.NewGatedRuntime(nil)
		call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
		waitStderr(t, rt, "failed to start, transiently: CannotPullContainerError")
		e.em.SetFaults(emulator.Faults{})
		call.wait(t, 60*time.Second)
		require.NoError(t, call.err, "stderr: %s", rt.StderrString())
		require.Equal(t, "ran\n", rt.StdoutString())
		require.GreaterOrEqual(t, e.em.Launches(StartedBy(job.ID, 0)), 2, "relaunched")
	})
	t.Run("its own cause", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, emulator.Options{FailToStartRate: 1, FailToStartReasons: []string{emulator.FailToStartNoImage}})
		job := e.job("echo ran", map[string]any{"max_fail_count": 1, "max_infra_relaunches": 5})
		_, err := Direct(e.p).Execute(context.Background(), job, plugintest.NewGatedRuntime(nil))
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "failed after 1 launch attempt(s): failed to start: CannotPullContainerError")
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
	})
}

// A job canceled right after launching many tasks: their ARNs may not have
// reached the handle (more than 16 tasks ride the coalesced checkpoint),
// and ECS does not list new tasks at once. Cleanup says so, retriably,
// until it can see and stop them, never returning done while a task the
// attempt launched may still run.
func TestHostileCleanupRightAfterLaunchLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	cleanupRightAfterLaunch(t, 20, emulator.Options{ConsistencyWindow: 2 * time.Second})
}

// With few tasks every ARN is in the handle at once, and StopTask is what
// ECS's eventual consistency hides: it does not know a task it has just
// started ("The referenced task was not found"). Cleanup must not take
// that for "already stopped" while the task may not be visible yet.
func TestHostileCleanupStopsATaskStopTaskDoesNotKnowYet(t *testing.T) {
	t.Parallel()
	// The window is below the job's consistency_window (10s), so Cleanup
	// can wait out every hidden task. Without the wait, 2 of 3 runs left
	// tasks running.
	cleanupRightAfterLaunch(t, 3, emulator.Options{ConsistencyWindow: 8 * time.Second, Seed: 2})
}

// cleanupRightAfterLaunch cancels a job of taskCount tasks as soon as its
// last task is launched, on an emulator that hides new tasks (opts), and
// calls Cleanup until it is done, as the agent's Cleanup queue does. No
// task of the attempt may then be running.
func cleanupRightAfterLaunch(t *testing.T, taskCount int, opts emulator.Options) {
	e := newEnv(t, opts)
	job := e.job("echo started; sleep 120", map[string]any{"task_count": taskCount, "consistency_window": "10s"})
	rt := plugintest.NewGatedRuntime(nil)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(cctx, job, rt) })
	waitStderr(t, rt, fmt.Sprintf("task %d is", taskCount-1))
	cancel()
	call.wait(t, 30*time.Second)

	clean := *job
	clean.Handle = rt.Handle()
	retried := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := Direct(e.p).Cleanup(ctx, &clean)
		if err == nil {
			break
		}
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Retriable, class, msg)
		require.Contains(t, msg, "consistency_window")
		require.True(t, time.Now().Before(deadline), "Cleanup still unsure after a minute: %s", msg)
		retried++
		time.Sleep(500 * time.Millisecond) // the Cleanup queue's backoff, shortened
	}
	running := 0
	for _, task := range e.em.Tasks() {
		if strings.HasPrefix(task.StartedBy, jobStem(job.ID)+"-") && task.LastStatus == "RUNNING" && task.StopCode == "" {
			running++
		}
	}
	require.Zero(t, running, "no task of the attempt left running once Cleanup returned (after %d retriable answers)", retried)
}

// ECS releases an awsvpc task's network interface after its containers
// stopped (DEPROVISIONING), which can take a while before STOPPED. The job
// ends once the exit codes are known, not after the interface is gone.
func TestHostileJobEndsWhenExitCodesAreKnown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{DeprovisionDelay: time.Minute})
	for script, fails := range map[string]bool{"echo done": false, "echo done; exit 3": true} {
		job := e.job(script, nil)
		rt := plugintest.NewGatedRuntime(nil)
		start := time.Now()
		_, err := Direct(e.p).Execute(context.Background(), job, rt)
		require.Equal(t, fails, err != nil, "%s: %v; stderr: %s", script, err, rt.StderrString())
		require.Less(t, time.Since(start), 30*time.Second, "not held until STOPPED")
		task, ok := e.describe(t, lastHandle(t, rt).arn(0))
		require.True(t, ok)
		require.Equal(t, "DEPROVISIONING", aws.ToString(task.LastStatus), "the job ended before ECS released the interface")
		require.Equal(t, "done\n", rt.StdoutString())
	}
}

// A failures[] reason that waiting does not fix (no instance has an
// attribute the task requires) is a failed launch: it counts against
// max_fail_count, and past it the job fails for good, without waiting for
// launch_retry_timeout.
func TestHostileRunTaskFailureThatDoesNotPassIsAFailedLaunch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{CapacityErrorRate: 1, CapacityReasons: []string{"ATTRIBUTE"}})
	job := e.job("echo never", map[string]any{"max_fail_count": 2, "launch_retry_timeout": "10m"})
	rt := plugintest.NewGatedRuntime(nil)
	start := time.Now()
	_, err := Direct(e.p).Execute(context.Background(), job, rt)
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.Permanent, class, "stderr: %s", rt.StderrString())
	require.Contains(t, msg, "after 2 launch attempt(s): RunTask failed: ATTRIBUTE")
	require.Less(t, time.Since(start), time.Minute)
	require.Zero(t, e.em.Launches(StartedBy(job.ID, 0)))
}
