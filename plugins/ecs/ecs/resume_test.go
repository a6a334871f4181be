package ecs

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// startAndLose runs Execute until cond holds on its runtime, then cancels
// it, as when the agent watching the job is lost, and returns the runtime
// once the plugin has stopped writing to it.
func startAndLose(t *testing.T, c plugintest.Client, job *plugin.Job, cond func(rt *plugintest.Runtime) bool) *plugintest.Runtime {
	t.Helper()
	rt := plugintest.NewGatedRuntime(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call := runAsync(func() (*plugin.Result, error) { return c.Execute(ctx, job, rt) })
	require.Eventually(t, func() bool { return cond(rt) }, 15*time.Second, 5*time.Millisecond)
	cancel()
	call.wait(t, 5*time.Second)
	require.ErrorIs(t, call.err, context.Canceled)
	quiesce(t, rt)
	rt.Detach() // what the agent does with a handed-off job's unrecorded output
	return rt
}

func stdoutHas(s string) func(rt *plugintest.Runtime) bool {
	return func(rt *plugintest.Runtime) bool { return strings.Contains(rt.StdoutString(), s) }
}

func TestResumeAfterAgentLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		const n = 40
		job := e.job(fmt.Sprintf("i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); sleep 0.02; done", n), nil)
		rt1 := startAndLose(t, c, job, stdoutHas("line-5\n"))
		require.NotContains(t, rt1.StdoutString(), fmt.Sprintf("line-%d\n", n), "lost before the end")

		rt2 := plugintest.NewGatedRuntime(rt1.Handle())
		res, err := c.Resume(context.Background(), job, rt2)
		require.NoError(t, err)
		require.Equal(t, "1 ECS task(s) succeeded", res.Message)
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)), "launched once")

		all := rt1.StdoutString() + rt2.StdoutString()
		got := lines(all)
		require.Len(t, got, n)
		for i := 1; i <= n; i++ {
			require.Equal(t, 1, got[fmt.Sprintf("line-%d", i)], "line-%d exactly once in %q", i, all)
		}
		require.Contains(t, rt2.StderrString(), "resuming job "+job.ID)
	})
}

func TestResumeAfterUnobservedStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo begin; sleep 0.3; echo end; exit 4", nil)
		rt1 := startAndLose(t, c, job, stdoutHas("begin\n"))
		arn := lastHandle(t, rt1).arn(0)
		require.NotEmpty(t, arn)
		require.Eventually(t, func() bool {
			task, ok := e.describe(t, arn)
			return ok && aws.ToString(task.LastStatus) == "STOPPED"
		}, 10*time.Second, 20*time.Millisecond, "the task stops while nobody watches")

		rt2 := plugintest.NewGatedRuntime(rt1.Handle())
		_, err := c.Resume(context.Background(), job, rt2)
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "container app exited with code 4")
		require.Equal(t, "begin\nend\n", rt1.StdoutString()+rt2.StdoutString(), "the log continues where it was recorded, each line once")
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
	})
}

func TestResumeExpiredWithOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{StoppedRetention: 200 * time.Millisecond})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		for _, tc := range []struct {
			script string
			fails  string
		}{{"echo ok", ""}, {"echo bad; exit 2", "container app exited with code 2"}} {
			job := e.job(tc.script, nil)
			rt1 := plugintest.NewRuntime(nil)
			_, err := c.Execute(context.Background(), job, rt1)
			require.Equal(t, tc.fails == "", err == nil, "execute: %v", err)
			arn := lastHandle(t, rt1).arn(0)
			require.Eventually(t, func() bool { _, ok := e.describe(t, arn); return !ok }, 10*time.Second, 50*time.Millisecond, "expired from ECS")

			rt2 := plugintest.NewRuntime(rt1.Handle())
			res, err := c.Resume(context.Background(), job, rt2)
			if tc.fails == "" {
				require.NoError(t, err)
				require.Equal(t, "1 ECS task(s) succeeded", res.Message)
			} else {
				class, msg := plugintest.Error(t, err)
				require.Equal(t, plugin.Permanent, class)
				require.Contains(t, msg, tc.fails)
			}
			require.Empty(t, rt2.StdoutString(), "nothing copied twice")
			require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
		}
	})
}

func TestResumeExpiredWithoutOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{StoppedRetention: 200 * time.Millisecond})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo ok", map[string]any{"consistency_window": "1s"})
		rt1 := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), job, rt1)
		require.NoError(t, err)
		// The checkpoint right after RunTask: an ARN, no outcome yet.
		var early []byte
		for _, cp := range rt1.Checkpoints() {
			h, err := decodeHandle(cp)
			require.NoError(t, err)
			if h.arn(0) != "" && h.Tasks[0].Outcome == "" {
				early = cp
				break
			}
		}
		require.NotNil(t, early)
		arn := lastHandle(t, rt1).arn(0)
		require.Eventually(t, func() bool { _, ok := e.describe(t, arn); return !ok }, 10*time.Second, 50*time.Millisecond, "expired from ECS")

		_, err = c.Resume(context.Background(), job, plugintest.NewRuntime(early))
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.OutcomeUnknown, class)
		// It was never seen by DescribeTasks, and is MISSING past the
		// consistency window after its launch.
		require.Contains(t, msg, "never visible in DescribeTasks in the 1s after its launch")
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)), "never relaunched blindly")
	})
}

// listingModes are the two readings of ListTasks' startedBy: combined with
// desiredStatus (what ECS answers, and moto), and the reference's "it must be
// the only filter" taken literally (emulator.Options.StartedByOnly). The
// plugin finds tasks under both.
var listingModes = map[string]emulator.Options{"combined": {}, "startedBy only": {StartedByOnly: true}}

// inListingModes runs fn once per listing mode, in parallel.
func inListingModes(t *testing.T, fn func(*testing.T, emulator.Options)) {
	t.Parallel()
	for name, opts := range listingModes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, opts)
		})
	}
}

func TestResumeFindsTaskByStartedBy(t *testing.T) { inListingModes(t, resumeFindsTaskByStartedBy) }

func resumeFindsTaskByStartedBy(t *testing.T, opts emulator.Options) {
	e := newEnv(t, opts)
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo found", nil)
		rt1 := plugintest.NewRuntime(nil)
		_, err := c.Execute(context.Background(), job, rt1)
		require.NoError(t, err)
		// The checkpoint taken just before RunTask. The agent died before it
		// learnt the task's ARN.
		before := rt1.Checkpoints()[0]
		h, err := decodeHandle(before)
		require.NoError(t, err)
		require.Empty(t, h.arn(0))
		require.Equal(t, 1, h.Tasks[0].Attempts)

		rt2 := plugintest.NewRuntime(before)
		_, err = c.Resume(context.Background(), job, rt2)
		require.NoError(t, err)
		require.Equal(t, "found\n", rt2.StdoutString())
		require.Contains(t, rt2.StderrString(), "adopted")
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)), "adopted, not launched again")
		require.Equal(t, lastHandle(t, rt1).arn(0), lastHandle(t, rt2).arn(0))
	})
}

func TestResumeNeverLaunched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := e.job("echo fresh", nil)
		rt := plugintest.NewRuntime(nil)
		_, err := c.Resume(context.Background(), job, rt)
		require.NoError(t, err)
		require.Equal(t, "fresh\n", rt.StdoutString())
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
	})
}

func TestResumeKeepsMaxFailCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		// Fails after a moment, so the agent can be lost during launch 2.
		job := e.job("echo try; sleep 0.2; exit 1", map[string]any{"max_fail_count": 3})
		rt1 := startAndLose(t, c, job, func(rt *plugintest.Runtime) bool {
			raw := rt.Handle()
			if raw == nil {
				return false
			}
			h, err := decodeHandle(raw)
			return err == nil && h.Tasks[0].Attempts == 2 && h.arn(0) != ""
		})
		require.Equal(t, 2, e.em.Launches(StartedBy(job.ID, 0)))

		_, err := c.Resume(context.Background(), job, plugintest.NewRuntime(rt1.Handle()))
		class, msg := plugintest.Error(t, err)
		require.Equal(t, plugin.Permanent, class)
		require.Contains(t, msg, "after 3 launch attempt(s)")
		require.Equal(t, 3, e.em.Launches(StartedBy(job.ID, 0)), "exactly one more launch")
	})
}

func TestResumeWithoutHandleAdoptsAndCountsAttempts(t *testing.T) {
	inListingModes(t, resumeWithoutHandleAdoptsAndCountsAttempts)
}

func resumeWithoutHandleAdoptsAndCountsAttempts(t *testing.T, opts emulator.Options) {
	e := newEnv(t, opts)
	job := e.job("echo try; exit 1", map[string]any{"max_fail_count": 2})
	_, err := Direct(e.p).Execute(context.Background(), job, plugintest.NewRuntime(nil))
	require.Error(t, err)
	require.Equal(t, 2, e.em.Launches(StartedBy(job.ID, 0)))
	// No handle at all. Both stopped tasks are found by startedBy and count
	// as launch attempts, so nothing is launched again.
	_, err = Direct(e.p).Resume(context.Background(), job, plugintest.NewRuntime(nil))
	_, msg := plugintest.Error(t, err)
	require.Contains(t, msg, "after 2 launch attempt(s)")
	require.Equal(t, 2, e.em.Launches(StartedBy(job.ID, 0)))
}

func TestRunTaskReissuedWithSameClientTokenIsOneTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("sleep 5", nil)
	rt := plugintest.NewRuntime(nil)
	ctx := context.Background()
	r, err := e.p.newRun(ctx, job, rt)
	require.NoError(t, err)
	r.h = newHandle(job.ID, job.Attempt, r.cfg.Cluster, 1)
	r.td, err = resolveTaskDef(ctx, r.cl, r.cfg)
	require.NoError(t, err)
	r.start()
	defer r.close()
	require.NoError(t, r.launch(ctx, 0, firstLaunch))
	first := r.h.arn(0)
	require.NotEmpty(t, first)
	// As a resuming agent does when it cannot tell whether RunTask got through.
	require.NoError(t, r.launch(ctx, 0, reissue))
	require.Equal(t, first, r.h.arn(0))
	require.Equal(t, 1, r.h.Tasks[0].Attempts)
	require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)), "one task for one client token")
	require.NoError(t, e.p.Cleanup(ctx, job))
}

func TestResumeReissueAfterExpiryIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{StoppedRetention: 200 * time.Millisecond})
	job := e.job("echo ok", nil)
	rt1 := plugintest.NewRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt1)
	require.NoError(t, err)
	arn := lastHandle(t, rt1).arn(0)
	require.Eventually(t, func() bool { _, ok := e.describe(t, arn); return !ok }, 10*time.Second, 50*time.Millisecond, "expired from ECS")

	// The agent was lost between checkpointing launch 1 and learning its
	// ARN. By now ListTasks finds nothing, and the reissued RunTask tells
	// that the token's task is gone.
	_, err = Direct(e.p).Resume(context.Background(), job, plugintest.NewRuntime(rt1.Checkpoints()[0]))
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.OutcomeUnknown, class)
	require.Contains(t, msg, "no longer knows")
	require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, 0)))
}

func TestResumeIgnoresHandleOfEarlierRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("echo run", nil)
	rt1 := plugintest.NewRuntime(nil)
	_, err := Direct(e.p).Execute(context.Background(), job, rt1)
	require.NoError(t, err)

	retry := *job
	retry.Attempt = 2
	rt2 := plugintest.NewRuntime(rt1.Handle())
	_, err = Direct(e.p).Resume(context.Background(), &retry, rt2)
	require.NoError(t, err)
	require.Equal(t, "run\n", rt2.StdoutString(), "run 2 launched its own task")
	require.Equal(t, 2, e.em.Launches(StartedBy(job.ID, 0)))
	h := lastHandle(t, rt2)
	require.Equal(t, 2, h.JobAttempt)
	require.NotEqual(t, lastHandle(t, rt1).arn(0), h.arn(0))
	require.Equal(t, 1, h.Tasks[0].Attempts)
}

func TestCleanupWithUnparsableSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	require.NoError(t, e.p.Cleanup(context.Background(), e.job("true", map[string]any{"bogus": true})))
}

func TestLostLeaseStopsWatching(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("echo started; sleep 60", nil)
	rt := plugintest.NewRuntime(nil)
	call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
	require.Eventually(t, func() bool { return strings.Contains(rt.StdoutString(), "started") }, 10*time.Second, 10*time.Millisecond)
	// What the agent's runtime does once the job's lease is lost.
	rt.FailCheckpoints(fmt.Errorf("lease lost"))
	rt.FailWrites(fmt.Errorf("lease lost"))
	_, err := e.ecsClient(t).StopTask(context.Background(), &ecs.StopTaskInput{Task: aws.String(lastHandle(t, rt).arn(0))})
	require.NoError(t, err)
	call.wait(t, 10*time.Second)
	_, msg := plugintest.Error(t, call.err)
	require.Contains(t, msg, "lease lost")
}

func TestResumeRefusesAnotherJobsHandle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	other, err := newHandle("another-job", 1, DefaultCluster, 1).encode()
	require.NoError(t, err)
	_, err = Direct(e.p).Resume(context.Background(), e.job("true", nil), plugintest.NewRuntime(other))
	class, msg := plugintest.Error(t, err)
	require.Equal(t, plugin.OutcomeUnknown, class)
	require.Contains(t, msg, "not by this job")
}

// Execute records every task's first launch before its first RunTask, and
// a frontier past which no RunTask was sent yet. A resume long after (past
// stopped_task_retention) launches the indexes past the frontier: they
// never ran, so nothing can have been purged.
func TestLateResumeLaunchesWhatExecuteNeverSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	job := e.job("echo ran", map[string]any{"task_count": 3, "timeout": "0"})
	cfg := mustConfig(t, string(job.Config), string(job.Context))
	td, err := resolveTaskDef(context.Background(), mustClients(t, e), cfg)
	require.NoError(t, err)
	long := time.Now().Add(-2 * time.Hour)
	h := newHandle(job.ID, 1, DefaultCluster, 3)
	h.TaskDefinitionARN, h.StartedAt, h.Unsent = td.ARN, long.Unix(), 1
	h.Tasks[0] = TaskState{Attempts: 1, ID: "0123456789abcdef0123456789abcdef", Outcome: outcomeSucceeded, Exit: map[string]int32{"app": 0}}
	for i := 1; i < 3; i++ {
		h.Tasks[i] = TaskState{Attempts: 1, LaunchedAt: long.UnixMilli()}
	}
	h.ARNPrefix = "arn:aws:ecs:us-east-1:000000000000:task/default/"
	raw, err := h.encode()
	require.NoError(t, err)

	rt := plugintest.NewGatedRuntime(raw)
	res, err := Direct(e.p).Resume(context.Background(), job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	require.Equal(t, "3 ECS task(s) succeeded", res.Message)
	require.Contains(t, rt.StderrString(), "task 1: launch 1 was recorded but never sent; sending it")
	for i := 1; i < 3; i++ {
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, i)), "task %d launched once", i)
	}
	require.Equal(t, 0, e.em.Launches(StartedBy(job.ID, 0)), "the settled task is not launched")
	require.Equal(t, 3, lastHandle(t, rt).Unsent, "the frontier passed every index")
}

// An agent lost in the middle of Execute's launch pass: the handle's
// frontier is ahead of every RunTask sent and behind the job's end, and a
// resume launches each task index exactly once.
func TestResumeMidLaunchPassLaunchesEachTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, emulator.Options{})
	const n = 24
	job := e.job("echo ran", map[string]any{"task_count": n})
	rates := maps.Clone(testRates)
	rates[apiRunTask] = 4 // 16 launches ahead at most: the frontier stays behind n
	job.Config, _ = json.Marshal(map[string]any{"endpoint": e.url, "region": "us-east-1", "api_rates": rates})
	rt1 := startAndLose(t, Direct(e.p), job, func(rt *plugintest.Runtime) bool { return strings.Contains(rt.StderrString(), "task 2 is") })
	h := lastHandle(t, rt1)
	require.Greater(t, h.Unsent, 2)
	require.Less(t, h.Unsent, n)
	for i := h.Unsent; i < n; i++ {
		require.Zero(t, e.em.Launches(StartedBy(job.ID, i)), "task %d past the frontier was not sent", i)
	}

	rt2 := plugintest.NewGatedRuntime(rt1.Handle())
	res, err := Direct(e.p).Resume(context.Background(), job, rt2)
	require.NoError(t, err, "stderr: %s", rt2.StderrString())
	require.Equal(t, fmt.Sprintf("%d ECS task(s) succeeded", n), res.Message)
	for i := range n {
		require.Equal(t, 1, e.em.Launches(StartedBy(job.ID, i)), "task %d launched once", i)
	}
}
