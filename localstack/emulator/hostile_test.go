package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"
)

// impatient clients make one attempt, so every fault reaches the test.
func (e *env) impatientECS() *ecs.Client {
	return ecs.NewFromConfig(clientConfig(1), func(o *ecs.Options) { o.BaseEndpoint = aws.String(e.url) })
}

func (e *env) impatientLogs() *cloudwatchlogs.Client {
	return cloudwatchlogs.NewFromConfig(clientConfig(1), func(o *cloudwatchlogs.Options) { o.BaseEndpoint = aws.String(e.url) })
}

// wait blocks for d unless the test's context ends first.
func wait(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-timer.C:
	}
}

func taskID(arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }

// visibleAt reads when the emulator will show a task to DescribeTasks.
func (e *Emulator) visibleAt(arn string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tasks[taskID(arn)].visibleAt
}

// eventVisibility reads when each event of a stream becomes visible.
func (e *Emulator) eventVisibility(group, stream string) []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []time.Time
	for _, ev := range e.logs[group].streams[stream].events {
		out = append(out, ev.visible)
	}
	return out
}

func apiCode(t *testing.T, err error) (code, msg string) {
	t.Helper()
	var ae smithy.APIError
	require.ErrorAs(t, err, &ae)
	return ae.ErrorCode(), ae.ErrorMessage()
}

func httpStatus(t *testing.T, err error) int {
	t.Helper()
	var re *smithyhttp.ResponseError
	require.ErrorAs(t, err, &re)
	return re.HTTPStatusCode()
}

// untilVisible polls probe until it reports the task visible. A probe that
// still misses the task must have been sent before visibleAt, and one that
// sees it must have come back after. At least one miss is required.
func untilVisible(t *testing.T, ctx context.Context, visibleAt time.Time, probe func() bool) {
	t.Helper()
	missed := false
	for {
		sent := time.Now()
		seen := probe()
		back := time.Now()
		if seen {
			require.False(t, back.Before(visibleAt), "visible %v before its window ended", visibleAt.Sub(back))
			require.True(t, missed, "the task was never hidden")
			return
		}
		require.True(t, sent.Before(visibleAt), "still hidden %v after its window ended", sent.Sub(visibleAt))
		missed = true
		wait(t, ctx, 10*time.Millisecond)
	}
}

func TestConsistencyWindowDescribeTasks(t *testing.T) {
	t.Parallel()
	// Seed 2 hides the first task for about 650ms of the 1s window.
	e := start(t, Options{ConsistencyWindow: time.Second, Seed: 2})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "cw", shell("main", "sleep 30"))
	in := &ecs.RunTaskInput{TaskDefinition: aws.String("cw"), StartedBy: aws.String("cw"), ClientToken: aws.String("cw-1")}
	tk := runOne(t, ctx, e.ecs, in)
	arn := aws.ToString(tk.TaskArn)
	visibleAt := e.em.visibleAt(arn)

	// A clientToken replay returns the task even while it is hidden.
	again := runOne(t, ctx, e.ecs, in)
	require.Equal(t, arn, aws.ToString(again.TaskArn))
	require.Equal(t, 1, e.em.Launches("cw"))

	unknown := "arn:aws:ecs:us-east-1:000000000000:task/default/0123456789abcdef0123456789abcdef"
	untilVisible(t, ctx, visibleAt, func() bool {
		out, err := e.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{arn, unknown}})
		require.NoError(t, err)
		// A hidden task is answered exactly like an unknown one.
		byArn := map[string]string{}
		for _, f := range out.Failures {
			byArn[aws.ToString(f.Arn)] = aws.ToString(f.Reason)
		}
		require.Equal(t, "MISSING", byArn[unknown])
		if len(out.Tasks) == 0 {
			require.Equal(t, map[string]string{arn: "MISSING", unknown: "MISSING"}, byArn)
			return false
		}
		require.Equal(t, arn, aws.ToString(out.Tasks[0].TaskArn))
		return true
	})
}

func TestConsistencyWindowListTasks(t *testing.T) {
	t.Parallel()
	e := start(t, Options{ConsistencyWindow: time.Second, Seed: 2})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "cwl", shell("main", "sleep 30"))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("cwl"), StartedBy: aws.String("cwl")})
	arn := aws.ToString(tk.TaskArn)
	untilVisible(t, ctx, e.em.visibleAt(arn), func() bool {
		out, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("cwl")})
		require.NoError(t, err)
		if len(out.TaskArns) == 0 {
			return false
		}
		require.Equal(t, []string{arn}, out.TaskArns)
		return true
	})
}

// StopTask inside a task's consistency window answers as for an unknown
// task, and stops it once the window has passed.
func TestConsistencyWindowStopTask(t *testing.T) {
	t.Parallel()
	e := start(t, Options{ConsistencyWindow: time.Second, Seed: 2})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "cws", shell("main", "sleep 30"))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("cws"), StartedBy: aws.String("cws")})
	arn := aws.ToString(tk.TaskArn)
	visible := e.em.visibleAt(arn)
	require.True(t, time.Now().Before(visible), "seed 2 hides the task for a while")
	untilVisible(t, ctx, visible, func() bool {
		out, err := e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(arn)})
		if err != nil {
			require.ErrorContains(t, err, "The referenced task was not found.")
			return false
		}
		require.Equal(t, "STOPPED", aws.ToString(out.Task.DesiredStatus))
		return true
	})
}

func TestLogLag(t *testing.T) {
	t.Parallel()
	// Seed 1 makes the five events visible about 420, 550 and 730ms after
	// they were written, in three steps.
	e := start(t, Options{LogLag: 800 * time.Millisecond, Seed: 1})
	ctx := ctxT(t)
	def := shell("main", `for i in 1 2 3 4 5; do echo "line $i"; done`)
	def.LogConfiguration = awslogs("/tether/lag")
	register(t, ctx, e.ecs, "lag", def)
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("lag")})
	waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
	stream := "job/main/" + taskID(aws.ToString(tk.TaskArn))
	vis := e.em.eventVisibility("/tether/lag", stream)
	require.Len(t, vis, 5)
	require.True(t, slices.IsSortedFunc(vis, func(a, b time.Time) int { return a.Compare(b) }), "visibility is monotonic per stream")

	var (
		got       []string
		token     *string
		notFound  bool
		emptyRead bool
	)
	for len(got) < 5 {
		sent := time.Now()
		out, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
			LogGroupName: aws.String("/tether/lag"), LogStreamName: aws.String(stream),
			StartFromHead: aws.Bool(true), NextToken: token,
		})
		back := time.Now()
		if err != nil {
			// The stream does not exist until its first event is visible.
			var nf *cwlTypesNotFound
			require.ErrorAs(t, err, &nf)
			require.Equal(t, "The specified log stream does not exist.", nf.ErrorMessage())
			require.Nil(t, token)
			require.True(t, sent.Before(vis[0]))
			notFound = true
			wait(t, ctx, 5*time.Millisecond)
			continue
		}
		for _, ev := range out.Events {
			require.False(t, back.Before(vis[len(got)]), "event %d returned before it was visible", len(got))
			got = append(got, aws.ToString(ev.Message))
		}
		if len(got) < 5 {
			require.True(t, sent.Before(vis[len(got)]), "visible event %d was not returned", len(got))
		}
		if len(out.Events) == 0 {
			// At the visible end the forward token stays put.
			require.Equal(t, aws.ToString(token), aws.ToString(out.NextForwardToken))
			emptyRead = true
		}
		token = out.NextForwardToken
		wait(t, ctx, 5*time.Millisecond)
	}
	require.Equal(t, []string{"line 1", "line 2", "line 3", "line 4", "line 5"}, got)
	require.True(t, notFound, "the stream was missing before its first event was visible")
	require.True(t, emptyRead, "a read at the visible end returned nothing and the same token")

	end, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
		LogGroupName: aws.String("/tether/lag"), LogStreamName: aws.String(stream), NextToken: token,
	})
	require.NoError(t, err)
	require.Empty(t, end.Events)
	require.Equal(t, aws.ToString(token), aws.ToString(end.NextForwardToken))
}

func TestRunTaskTransientErrors(t *testing.T) {
	t.Parallel()
	e := start(t, Options{RunTaskTransientRate: 1, Seed: 1})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "tr", shell("main", "exit 0"))
	client := e.impatientECS()
	in := &ecs.RunTaskInput{
		TaskDefinition: aws.String("tr"), StartedBy: aws.String("tr"), ClientToken: aws.String("tr-1"),
		NetworkConfiguration: &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
			Subnets: []string{"subnet-1"}, SecurityGroups: []string{"sg-0123456789abcdef0"},
		}},
	}
	kinds := map[string]int{}
	for range 12 {
		_, err := client.RunTask(ctx, in)
		var ce *types.ClientException
		var ipe *types.InvalidParameterException
		switch {
		case errors.As(err, &ce):
			require.Equal(t, "Tasks provisioning capacity limit exceeded.", ce.ErrorMessage())
			kinds["capacity"]++
		case errors.As(err, &ipe):
			require.Equal(t, "Error retrieving security group information for [sg-0123456789abcdef0]: Request limit exceeded. (ErrorCode: RequestLimitExceeded)", ipe.ErrorMessage())
			kinds["ec2"]++
		default:
			t.Fatalf("want a transient RunTask error, got %v", err)
		}
	}
	require.Len(t, kinds, 2, "both transient errors occur: %v", kinds)
	require.Equal(t, 0, e.em.Launches("tr"))
	listed, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("tr")})
	require.NoError(t, err)
	require.Empty(t, listed.TaskArns)

	// Nothing claimed the token, so a retry after the errors launches.
	e.em.SetFaults(Faults{})
	runOne(t, ctx, client, in)
	require.Equal(t, 1, e.em.Launches("tr"))
}

func TestCapacityFailureReasons(t *testing.T) {
	t.Parallel()
	e := start(t, Options{CapacityErrorRate: 1, CapacityReasons: AllCapacityReasons(), Seed: 1})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "cap", shell("main", "exit 0"))
	out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("cap"), StartedBy: aws.String("cap"), Count: aws.Int32(10)})
	require.NoError(t, err)
	require.Empty(t, out.Tasks)
	require.Len(t, out.Failures, 10)
	seen := map[string]bool{}
	for _, f := range out.Failures {
		reason := aws.ToString(f.Reason)
		require.Contains(t, AllCapacityReasons(), reason)
		seen[reason] = true
		if fargateReason(reason) {
			require.Empty(t, aws.ToString(f.Arn))
		} else {
			require.Regexp(t, `^arn:aws:ecs:us-east-1:000000000000:container-instance/default/[0-9a-f]{32}$`, aws.ToString(f.Arn))
		}
	}
	require.Greater(t, len(seen), 1, "reasons vary per slot: %v", seen)
	require.Equal(t, 0, e.em.Launches("cap"))
}

func TestInfrastructureStops(t *testing.T) {
	t.Parallel()
	// Seed 2 plans all three stop codes, with and without exit codes.
	e := start(t, Options{InfraStopRate: 1, InfraStopDelay: 200 * time.Millisecond, StopTimeout: 10 * time.Second, Seed: 2})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "inf", shell("main", "sleep 30"))
	began := time.Now()
	out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("inf"), Count: aws.Int32(8)})
	require.NoError(t, err)
	require.Len(t, out.Tasks, 8)
	codes := map[types.TaskStopCode]int{}
	withExit, without := 0, 0
	for _, tk := range out.Tasks {
		final, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
		require.NotNil(t, final.StartedAt, "stopped while RUNNING")
		codes[final.StopCode]++
		reason := aws.ToString(final.StoppedReason)
		switch final.StopCode {
		case types.TaskStopCodeSpotInterruption:
			require.Equal(t, "Your Spot Task was interrupted.", reason)
		case types.TaskStopCodeTerminationNotice:
			require.Regexp(t, `^(Host EC2 \(instance i-[0-9a-f]{17}\) terminated\.|Your Spot Task was interrupted\.)$`, reason)
		case types.TaskStopCodeInfrastructureHealth:
			require.NotEmpty(t, reason)
		default:
			t.Fatalf("stop code %q is not an infrastructure one", final.StopCode)
		}
		require.Equal(t, "STOPPED", aws.ToString(final.DesiredStatus))
		if c := final.Containers[0]; c.ExitCode != nil {
			require.Equal(t, int32(143), aws.ToInt32(c.ExitCode), "SIGTERM")
			withExit++
		} else {
			without++
		}
	}
	require.Len(t, codes, 3, "stop codes: %v", codes)
	require.Positive(t, withExit)
	require.Positive(t, without)
	// Every "sleep 30" was killed. STOPPED waits for the processes to exit.
	require.Less(t, time.Since(began), 10*time.Second)
}

func TestRateLimits(t *testing.T) {
	t.Parallel()
	e := start(t, Options{RateLimits: true, RateLimitFigures: map[string]RateLimit{
		"DescribeClusters":        {Rate: 2, Burst: 2},
		"RunTask":                 {Rate: 0.001, Burst: 1},
		"DescribeTasks+ListTasks": {Rate: 0.001, Burst: 2},
		"GetLogEvents":            {Rate: 0.001, Burst: 1},
	}})
	ctx := ctxT(t)
	client := e.impatientECS()
	throttled := func(err error) {
		t.Helper()
		code, msg := apiCode(t, err)
		require.Equal(t, "ThrottlingException", code)
		require.Equal(t, "Rate exceeded", msg)
		require.Equal(t, http.StatusBadRequest, httpStatus(t, err))
	}

	// The burst, then throttling, then a refill.
	for range 2 {
		_, err := client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
		require.NoError(t, err)
	}
	_, err := client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	throttled(err)
	wait(t, ctx, 600*time.Millisecond) // 2/s refills 1.2 tokens
	_, err = client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	require.NoError(t, err)
	_, err = client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	throttled(err)

	// Throttled calls do not run.
	register(t, ctx, e.ecs, "rl", shell("main", "sleep 30"))
	tk := runOne(t, ctx, client, &ecs.RunTaskInput{TaskDefinition: aws.String("rl"), StartedBy: aws.String("rl")})
	_, err = client.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("rl"), StartedBy: aws.String("rl")})
	throttled(err)
	require.Equal(t, 1, e.em.Launches("rl"))

	// Actions joined by + share one bucket.
	_, err = client.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{aws.ToString(tk.TaskArn)}})
	require.NoError(t, err)
	_, err = client.ListTasks(ctx, &ecs.ListTasksInput{})
	require.NoError(t, err)
	_, err = client.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{aws.ToString(tk.TaskArn)}})
	throttled(err)

	// CloudWatch Logs throttles the same way. An error answer took a token.
	logs := e.impatientLogs()
	in := &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String("none"), LogStreamName: aws.String("none")}
	_, err = logs.GetLogEvents(ctx, in)
	var nf *cwlTypesNotFound
	require.ErrorAs(t, err, &nf)
	_, err = logs.GetLogEvents(ctx, in)
	throttled(err)

	_, counted := e.em.Calls()
	require.Equal(t, map[string]int{"DescribeClusters": 2, "RunTask": 1, "DescribeTasks": 1, "GetLogEvents": 1}, counted)

	// The admin endpoint changes figures at runtime. "rate": 0 lifts a limit.
	postJSON(t, e.url+"/_emulator/faults", `{"rateLimitFigures":{"DescribeClusters":{"rate":0,"burst":0}}}`, http.StatusOK)
	for range 5 {
		_, err := client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
		require.NoError(t, err)
	}
	_, err = client.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("rl"), StartedBy: aws.String("rl")})
	require.NoError(t, err, "changing figures refilled every bucket")
	postJSON(t, e.url+"/_emulator/faults", `{"rateLimits":false}`, http.StatusOK)
	for range 3 {
		_, err := client.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("rl"), StartedBy: aws.String("rl")})
		require.NoError(t, err)
	}
}

func postJSON(t *testing.T, url, body string, want int) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, string(out))
	return out
}

func TestCallCounters(t *testing.T) {
	t.Parallel()
	e := start(t, Options{RateLimits: true, RateLimitFigures: map[string]RateLimit{"ListTasks": {Rate: 0.001, Burst: 1}}})
	ctx := ctxT(t)
	client := e.impatientECS()
	for range 2 {
		_, err := client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
		require.NoError(t, err)
	}
	_, err := client.ListTasks(ctx, &ecs.ListTasksInput{})
	require.NoError(t, err)
	_, err = client.ListTasks(ctx, &ecs.ListTasksInput{})
	require.Error(t, err)
	_, err = e.impatientLogs().GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s")})
	require.Error(t, err, "an error answer is still a call")
	_, err = eksClient(clientConfig(1), e.url).DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("none")})
	require.Error(t, err)
	// Injected random throttling is a call but not a rate-limiter throttle.
	e.em.SetFaults(Faults{ThrottleRate: 1, RateLimits: true, RateLimitFigures: map[string]RateLimit{"ListTasks": {Rate: 0.001, Burst: 1}}})
	_, err = client.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	require.Error(t, err)

	wantCalls := map[string]int{"DescribeClusters": 3, "ListTasks": 2, "GetLogEvents": 1, "DescribeCluster": 1}
	wantThrottled := map[string]int{"ListTasks": 1}
	calls, throttled := e.em.Calls()
	require.Equal(t, wantCalls, calls)
	require.Equal(t, wantThrottled, throttled)
	var got struct {
		Calls     map[string]int `json:"calls"`
		Throttled map[string]int `json:"throttled"`
	}
	getJSON(t, e.url+"/_emulator/calls", &got)
	require.Equal(t, wantCalls, got.Calls)
	require.Equal(t, wantThrottled, got.Throttled)

	var reset struct {
		Calls     map[string]int `json:"calls"`
		Throttled map[string]int `json:"throttled"`
	}
	require.NoError(t, json.Unmarshal(postJSON(t, e.url+"/_emulator/calls/reset", "", http.StatusOK), &reset))
	require.Empty(t, reset.Calls)
	require.Empty(t, reset.Throttled)
	calls, throttled = e.em.Calls()
	require.Empty(t, calls)
	require.Empty(t, throttled)
}

func TestListTasksPendingIsEmpty(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "pend", shell("main", "sleep 30"))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("pend"), StartedBy: aws.String("pend")})
	// Asked at once, while the task is still PROVISIONING or PENDING.
	pending, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pend"), DesiredStatus: types.DesiredStatusPending})
	require.NoError(t, err)
	require.Empty(t, pending.TaskArns)
	waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), func(tk types.Task) bool { return aws.ToString(tk.LastStatus) == "RUNNING" })
	pending, err = e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pend"), DesiredStatus: types.DesiredStatusPending})
	require.NoError(t, err)
	require.Empty(t, pending.TaskArns)
	running, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pend")})
	require.NoError(t, err)
	require.Equal(t, []string{aws.ToString(tk.TaskArn)}, running.TaskArns)
}

func TestTokenReplayAfterPurge(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{TokenReplayMissing, TokenReplayRelaunch} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := start(t, Options{StoppedRetention: 200 * time.Millisecond, TokenReplayAfterPurge: mode})
			ctx := ctxT(t)
			register(t, ctx, e.ecs, "purge", shell("main", "exit 0"))
			in := &ecs.RunTaskInput{TaskDefinition: aws.String("purge"), StartedBy: aws.String("purge"), ClientToken: aws.String("purge-1")}
			first := aws.ToString(runOne(t, ctx, e.ecs, in).TaskArn)
			waitTask(t, ctx, e.ecs, first, stopped)
			for {
				out, err := e.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{first}})
				require.NoError(t, err)
				if len(out.Failures) > 0 {
					break // purged
				}
				wait(t, ctx, 20*time.Millisecond)
			}
			out, err := e.ecs.RunTask(ctx, in)
			require.NoError(t, err)
			if mode == TokenReplayMissing {
				require.Empty(t, out.Tasks)
				require.Len(t, out.Failures, 1)
				require.Equal(t, first, aws.ToString(out.Failures[0].Arn))
				require.Equal(t, "MISSING", aws.ToString(out.Failures[0].Reason))
				require.Equal(t, 1, e.em.Launches("purge"))
				return
			}
			require.Empty(t, out.Failures)
			require.Len(t, out.Tasks, 1)
			second := aws.ToString(out.Tasks[0].TaskArn)
			require.NotEqual(t, first, second)
			require.Equal(t, 2, e.em.Launches("purge"))
			// The token now belongs to the new task.
			require.Equal(t, second, aws.ToString(runOne(t, ctx, e.ecs, in).TaskArn))
			require.Equal(t, 2, e.em.Launches("purge"))
		})
	}
}

func synthetic(name string, env map[string]string) types.ContainerDefinition {
	def := types.ContainerDefinition{Name: aws.String(name), Image: aws.String(SyntheticImage), LogConfiguration: awslogs("/tether/synth")}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		def.Environment = append(def.Environment, types.KeyValuePair{Name: aws.String(k), Value: aws.String(env[k])})
	}
	return def
}

func streamLines(t *testing.T, ctx context.Context, c *cloudwatchlogs.Client, stream string) []string {
	t.Helper()
	out, err := c.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
		LogGroupName: aws.String("/tether/synth"), LogStreamName: aws.String(stream), StartFromHead: aws.Bool(true),
	})
	var nf *cwlTypesNotFound
	if errors.As(err, &nf) {
		return nil
	}
	require.NoError(t, err)
	var lines []string
	for _, ev := range out.Events {
		lines = append(lines, aws.ToString(ev.Message))
	}
	return lines
}

func TestSyntheticTasks(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StopTimeout: 10 * time.Second})
	ctx := ctxT(t)

	t.Run("lines and exit code", func(t *testing.T) {
		register(t, ctx, e.ecs, "synth", synthetic("main", map[string]string{"SYNTH_LINES": "3", "SYNTH_INTERVAL": "20ms", "SYNTH_EXIT": "7"}))
		// Overrides reach a synthetic container like a real one.
		tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("synth"), Overrides: &types.TaskOverride{
			ContainerOverrides: []types.ContainerOverride{{Name: aws.String("main"),
				Environment: []types.KeyValuePair{{Name: aws.String("SYNTH_EXIT"), Value: aws.String("9")}}}},
		}})
		arn := aws.ToString(tk.TaskArn)
		final, seen := waitTask(t, ctx, e.ecs, arn, stopped)
		require.Contains(t, seen, "RUNNING")
		require.Equal(t, types.TaskStopCodeEssentialContainerExited, final.StopCode)
		require.Equal(t, int32(9), aws.ToInt32(final.Containers[0].ExitCode))
		require.Nil(t, final.Containers[0].RuntimeId, "no process")
		id := taskID(arn)
		require.Equal(t, []string{"line 1 of 3 task " + id, "line 2 of 3 task " + id, "line 3 of 3 task " + id},
			streamLines(t, ctx, e.logs, "job/main/"+id))
	})

	t.Run("StopTask", func(t *testing.T) {
		register(t, ctx, e.ecs, "synthlong", synthetic("main", map[string]string{"SYNTH_LINES": "100000", "SYNTH_INTERVAL": "5ms"}))
		tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("synthlong")})
		arn := aws.ToString(tk.TaskArn)
		stream := "job/main/" + taskID(arn)
		for len(streamLines(t, ctx, e.logs, stream)) < 2 {
			wait(t, ctx, 5*time.Millisecond)
		}
		began := time.Now()
		_, err := e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(arn), Reason: aws.String("enough")})
		require.NoError(t, err)
		final, _ := waitTask(t, ctx, e.ecs, arn, stopped)
		require.Less(t, time.Since(began), 5*time.Second, "SIGTERM ends it, not the stop timeout")
		require.Equal(t, types.TaskStopCodeUserInitiated, final.StopCode)
		require.Equal(t, int32(143), aws.ToInt32(final.Containers[0].ExitCode))
		require.Less(t, len(streamLines(t, ctx, e.logs, stream)), 100000)
	})

	t.Run("many at once", func(t *testing.T) {
		register(t, ctx, e.ecs, "synthmany", synthetic("main", map[string]string{"SYNTH_LINES": "2", "SYNTH_INTERVAL": "10ms"}))
		out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("synthmany"), Count: aws.Int32(10)})
		require.NoError(t, err)
		require.Len(t, out.Tasks, 10)
		for _, tk := range out.Tasks {
			final, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
			require.Equal(t, int32(0), aws.ToInt32(final.Containers[0].ExitCode))
			require.Len(t, streamLines(t, ctx, e.logs, "job/main/"+taskID(aws.ToString(tk.TaskArn))), 2)
		}
	})

	t.Run("bad settings fail to start", func(t *testing.T) {
		register(t, ctx, e.ecs, "synthbad", synthetic("main", map[string]string{"SYNTH_INTERVAL": "soon"}))
		tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("synthbad")})
		final, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
		require.Equal(t, types.TaskStopCodeTaskFailedToStart, final.StopCode)
		require.Contains(t, aws.ToString(final.StoppedReason), "SYNTH_INTERVAL")
	})
}

func TestSyntheticInfrastructureStop(t *testing.T) {
	t.Parallel()
	e := start(t, Options{InfraStopRate: 1, InfraStopDelay: 50 * time.Millisecond, Seed: 2})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "synthinf", synthetic("main", map[string]string{"SYNTH_LINES": "100000", "SYNTH_INTERVAL": "5ms"}))
	out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("synthinf"), Count: aws.Int32(4)})
	require.NoError(t, err)
	exits := map[bool]int{}
	for _, tk := range out.Tasks {
		final, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
		require.Contains(t, []types.TaskStopCode{types.TaskStopCodeSpotInterruption, types.TaskStopCodeTerminationNotice, types.TaskStopCodeInfrastructureHealth}, final.StopCode)
		code := final.Containers[0].ExitCode
		if code != nil {
			require.Equal(t, int32(143), *code)
		}
		exits[code != nil]++
	}
	require.Len(t, exits, 2, "with and without exit codes: %v", exits)
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	parse := func(args []string, env map[string]string) (Options, string, error) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return ParseFlags(fs, args, func(k string) string { return env[k] })
	}

	opts, profile, err := parse(nil, nil)
	require.NoError(t, err)
	require.Equal(t, ProfileKind, profile)
	require.Equal(t, Options{}, opts, "kind is today's defaults")

	opts, profile, err = parse([]string{"-profile", "hostile"}, nil)
	require.NoError(t, err)
	require.Equal(t, ProfileHostile, profile)
	require.Equal(t, HostileOptions(), opts)
	require.Equal(t, 3*time.Second, opts.ConsistencyWindow)
	require.Equal(t, 1500*time.Millisecond, opts.LogLag)
	require.Equal(t, 0.05, opts.RunTaskTransientRate)
	require.Equal(t, 0.05, opts.CapacityErrorRate)
	require.Equal(t, 0.02, opts.InfraStopRate)
	require.Zero(t, opts.ThrottleRate)
	require.Equal(t, 0.01, opts.ServerErrorRate)
	require.True(t, opts.ServerErrorsAfterRun)
	require.True(t, opts.RateLimits)
	require.Equal(t, TokenReplayRelaunch, opts.TokenReplayAfterPurge)

	// The env picks the profile. env settings change it. Flags change both.
	opts, profile, err = parse(
		[]string{"-log-lag", "0", "-rate-limit", "DescribeTasks=5/10", "-rate-limit", "GetLogEvents=off", "-capacity-reasons", "cpu,fargate", "-consistency-window", "250ms"},
		map[string]string{
			"TETHER_EMULATOR_PROFILE": "hostile", "TETHER_EMULATOR_CONSISTENCY_WINDOW": "1s", "TETHER_EMULATOR_LOG_LAG": "2s",
			"TETHER_EMULATOR_RATE_LIMIT": "RunTask=1/2,StopTask=3", "TETHER_EMULATOR_SEED": "42",
		})
	require.NoError(t, err)
	require.Equal(t, ProfileHostile, profile)
	want := HostileOptions()
	want.ConsistencyWindow = 250 * time.Millisecond
	want.LogLag = 0
	want.CapacityReasons = []string{ReasonResourceCPU, ReasonFargateCapacity}
	want.RateLimitFigures = map[string]RateLimit{"RunTask": {Rate: 1, Burst: 2}, "StopTask": {Rate: 3}, "DescribeTasks": {Rate: 5, Burst: 10}, "GetLogEvents": {}}
	want.Seed = 42
	require.Equal(t, want, opts)
	eff := EffectiveRateLimits(opts.RateLimitFigures)
	require.NotContains(t, eff, "GetLogEvents")
	require.Equal(t, RateLimit{Rate: 5, Burst: 10}, eff["DescribeTasks"])
	require.Equal(t, "3/3", eff["StopTask"].String(), "burst defaults to one second's worth")

	opts, _, err = parse([]string{"-profile", "hostile", "-rate-limits=false", "-token-replay-after-purge", "missing"}, nil)
	require.NoError(t, err)
	require.False(t, opts.RateLimits)
	require.Equal(t, TokenReplayMissing, opts.TokenReplayAfterPurge)

	for _, bad := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"-profile", "nasty"}},
		{env: map[string]string{"TETHER_EMULATOR_PROFILE": "nasty"}},
		{args: []string{"-infra-stop-rate", "2"}},
		{args: []string{"-rate-limit", "DescribeTasks=fast"}},
		{args: []string{"-token-replay-after-purge", "maybe"}},
		{env: map[string]string{"TETHER_EMULATOR_LATENCY": "soon"}},
	} {
		_, _, err := parse(bad.args, bad.env)
		require.Error(t, err, "%v %v", bad.args, bad.env)
	}
}

func TestEffectiveRateLimitsGroups(t *testing.T) {
	t.Parallel()
	eff := EffectiveRateLimits(map[string]RateLimit{"DescribeTasks+ListTasks": {Rate: 7, Burst: 9}, "RunTask": {}})
	require.Equal(t, RateLimit{Rate: 7, Burst: 9}, eff["DescribeTasks+ListTasks"])
	require.NotContains(t, eff, "DescribeTasks")
	require.NotContains(t, eff, "ListTasks")
	require.NotContains(t, eff, "RunTask")
	require.Equal(t, DefaultRateLimits()["DescribeClusters"], eff["DescribeClusters"])
	b := newBuckets(Faults{RateLimits: true, RateLimitFigures: map[string]RateLimit{"DescribeTasks+ListTasks": {Rate: 7, Burst: 9}}}, time.Now())
	require.Same(t, b["DescribeTasks"], b["ListTasks"])
	require.Nil(t, newBuckets(Faults{}, time.Now()))
}

func TestAdminFaultsMerge(t *testing.T) {
	t.Parallel()
	e := start(t, HostileOptions())
	postJSON(t, e.url+"/_emulator/faults", `{"consistencyWindow":0,"logLag":0,"tokenReplayAfterPurge":"missing","capacityReasons":["AGENT"]}`, http.StatusOK)
	var got Faults
	getJSON(t, e.url+"/_emulator/faults", &got)
	want := HostileOptions().withDefaults().faults()
	want.ConsistencyWindow, want.LogLag, want.TokenReplayAfterPurge, want.CapacityReasons = 0, 0, TokenReplayMissing, []string{ReasonAgent}
	require.Equal(t, want, got, "fields absent from the POST keep their values")
	postJSON(t, e.url+"/_emulator/faults", `{"tokenReplayAfterPurge":"sometimes"}`, http.StatusBadRequest)
	postJSON(t, e.url+"/_emulator/faults", `{"rateLimitFigures":{"RunTask":{"rate":-1}}}`, http.StatusBadRequest)
}

// TestHostileProfile runs a task through the hostile profile, tweaked to be
// quick and free of random faults, with a client that copes.
func TestHostileProfile(t *testing.T) {
	t.Parallel()
	opts := HostileOptions()
	opts.ConsistencyWindow = 300 * time.Millisecond
	opts.LogLag = 200 * time.Millisecond
	opts.RunTaskTransientRate, opts.CapacityErrorRate, opts.InfraStopRate, opts.ServerErrorRate = 0, 0, 0, 0
	opts.Seed = 1
	e := start(t, opts)
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "hostile", synthetic("main", map[string]string{"SYNTH_LINES": "3", "SYNTH_INTERVAL": "10ms"}))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("hostile")})
	arn := aws.ToString(tk.TaskArn)
	for {
		out, err := e.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{arn}})
		require.NoError(t, err)
		// Its exit codes are known from DEPROVISIONING on, 30 s before STOPPED.
		if len(out.Tasks) == 1 && aws.ToString(out.Tasks[0].LastStatus) == "DEPROVISIONING" {
			require.Equal(t, int32(0), aws.ToInt32(out.Tasks[0].Containers[0].ExitCode))
			break
		}
		require.False(t, len(out.Tasks) == 1 && stopped(out.Tasks[0]), "STOPPED without DEPROVISIONING first")
		wait(t, ctx, 50*time.Millisecond)
	}
	stream := "job/main/" + taskID(arn)
	for len(streamLines(t, ctx, e.logs, stream)) < 3 {
		wait(t, ctx, 50*time.Millisecond)
	}
	calls, throttled := e.em.Calls()
	require.Positive(t, calls["DescribeTasks"])
	require.Empty(t, throttled)
}

func TestServerErrorsAfterRun(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "lost", shell("main", "sleep 30"))
	client := e.impatientECS()
	in := &ecs.RunTaskInput{TaskDefinition: aws.String("lost"), StartedBy: aws.String("lost")}

	e.em.SetFaults(Faults{ServerErrorRate: 1})
	_, err := client.RunTask(ctx, in)
	var se *types.ServerException
	require.ErrorAs(t, err, &se)
	require.Equal(t, 0, e.em.Launches("lost"), "a 500 before the call ran launched nothing")

	e.em.SetFaults(Faults{ServerErrorRate: 1, ServerErrorsAfterRun: true})
	_, err = client.RunTask(ctx, in)
	require.ErrorAs(t, err, &se)
	require.Equal(t, 1, e.em.Launches("lost"), "the answer was lost but the task launched")
}

// An empty page mid-stream comes with a new forward token, and reading on
// from it returns the events it skipped. Only a token that comes back
// unchanged marks the end. Every event is read once, in order.
func TestEmptyLogPagesMidStream(t *testing.T) {
	t.Parallel()
	e := start(t, Options{EmptyLogPageRate: 0.5, Seed: 3})
	ctx := ctxT(t)
	def := shell("main", `for i in 1 2 3 4 5 6 7 8; do echo "line $i"; done`)
	def.LogConfiguration = awslogs("/tether/empty")
	register(t, ctx, e.ecs, "empty", def)
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("empty")})
	waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
	stream := "job/main/" + taskID(aws.ToString(tk.TaskArn))

	var got []string
	var token *string
	empty := 0
	for range 100 {
		out, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
			LogGroupName: aws.String("/tether/empty"), LogStreamName: aws.String(stream),
			StartFromHead: aws.Bool(true), NextToken: token, Limit: aws.Int32(2),
		})
		require.NoError(t, err)
		for _, ev := range out.Events {
			got = append(got, aws.ToString(ev.Message))
		}
		if len(out.Events) == 0 && aws.ToString(out.NextForwardToken) != aws.ToString(token) {
			empty++
		}
		if token != nil && aws.ToString(out.NextForwardToken) == *token {
			break // the end: the same token back
		}
		token = out.NextForwardToken
	}
	require.Equal(t, []string{"line 1", "line 2", "line 3", "line 4", "line 5", "line 6", "line 7", "line 8"}, got)
	require.Positive(t, empty, "an empty page with a new token was served")
	require.Equal(t, empty, e.em.EmptyLogPages())
}
