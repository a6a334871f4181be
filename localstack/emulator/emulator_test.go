package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwltypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	smithy "github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

type env struct {
	em   *Emulator
	url  string
	ecs  *ecs.Client
	logs *cloudwatchlogs.Client
}

func clientConfig(maxAttempts int) aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = maxAttempts
				o.MaxBackoff = 20 * time.Millisecond
				o.RateLimiter = ratelimit.None
			})
		},
	}
}

func start(t *testing.T, opts Options) *env {
	t.Helper()
	em := New(opts)
	url, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, em.Close()) })
	cfg := clientConfig(3)
	return &env{
		em:   em,
		url:  url,
		ecs:  ecs.NewFromConfig(cfg, func(o *ecs.Options) { o.BaseEndpoint = aws.String(url) }),
		logs: cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) { o.BaseEndpoint = aws.String(url) }),
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func awslogs(group string) *types.LogConfiguration {
	return &types.LogConfiguration{LogDriver: types.LogDriverAwslogs, Options: map[string]string{
		"awslogs-group": group, "awslogs-stream-prefix": "job", "awslogs-region": "us-east-1",
	}}
}

func register(t *testing.T, ctx context.Context, c *ecs.Client, family string, defs ...types.ContainerDefinition) string {
	t.Helper()
	out, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family: aws.String(family), ContainerDefinitions: defs,
		Tags: []types.Tag{{Key: aws.String("hash"), Value: aws.String("abc")}},
	})
	require.NoError(t, err)
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn)
}

func shell(name, script string) types.ContainerDefinition {
	return types.ContainerDefinition{Name: aws.String(name), Image: aws.String("busybox"),
		Command: []string{"sh", "-c", script}}
}

func runOne(t *testing.T, ctx context.Context, c *ecs.Client, in *ecs.RunTaskInput) types.Task {
	t.Helper()
	out, err := c.RunTask(ctx, in)
	require.NoError(t, err)
	require.Empty(t, out.Failures)
	require.Len(t, out.Tasks, 1)
	return out.Tasks[0]
}

// waitTask polls DescribeTasks until cond holds, returning every lastStatus seen.
func waitTask(t *testing.T, ctx context.Context, c *ecs.Client, arn string, cond func(types.Task) bool) (types.Task, []string) {
	t.Helper()
	var seen []string
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{arn}, Include: []types.TaskField{types.TaskFieldTags}})
		require.NoError(t, err)
		require.Empty(t, out.Failures)
		tk := out.Tasks[0]
		if s := aws.ToString(tk.LastStatus); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if cond(tk) {
			return tk, seen
		}
		select {
		case <-ctx.Done():
			t.Fatalf("task %s: condition not met; statuses seen %v", arn, seen)
		case <-tick.C:
		}
	}
}

func stopped(tk types.Task) bool { return aws.ToString(tk.LastStatus) == "STOPPED" }

func TestRunTaskToCompletionWithLogs(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	def := shell("main", `echo "$GREETING $TARGET"; sleep 0.2; echo second; echo oops >&2`)
	def.Environment = []types.KeyValuePair{{Name: aws.String("GREETING"), Value: aws.String("hello")}, {Name: aws.String("TARGET"), Value: aws.String("nobody")}}
	def.LogConfiguration = awslogs("/tether/test")
	tdArn := register(t, ctx, e.ecs, "fam", def)

	td, err := e.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("fam"), Include: []types.TaskDefinitionField{types.TaskDefinitionFieldTags}})
	require.NoError(t, err)
	require.Equal(t, tdArn, aws.ToString(td.TaskDefinition.TaskDefinitionArn))
	require.Equal(t, int32(1), td.TaskDefinition.Revision)
	require.Equal(t, "abc", aws.ToString(td.Tags[0].Value))
	require.Equal(t, []string{"sh", "-c", def.Command[2]}, td.TaskDefinition.ContainerDefinitions[0].Command)

	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{
		TaskDefinition: aws.String("fam:1"), StartedBy: aws.String("job-1/0"),
		Tags: []types.Tag{{Key: aws.String("job"), Value: aws.String("1")}},
		Overrides: &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{{
			Name: aws.String("main"), Environment: []types.KeyValuePair{{Name: aws.String("TARGET"), Value: aws.String("world")}},
		}}},
	})
	arn := aws.ToString(tk.TaskArn)
	require.Regexp(t, `^arn:aws:ecs:us-east-1:000000000000:task/default/[0-9a-f]{32}$`, arn)
	require.Equal(t, "PROVISIONING", aws.ToString(tk.LastStatus))
	require.Equal(t, "RUNNING", aws.ToString(tk.DesiredStatus))

	final, seen := waitTask(t, ctx, e.ecs, arn, stopped)
	require.Contains(t, seen, "RUNNING")
	require.Equal(t, types.TaskStopCodeEssentialContainerExited, final.StopCode)
	require.Equal(t, int32(0), aws.ToInt32(final.Containers[0].ExitCode))
	require.NotNil(t, final.Containers[0].ExitCode)
	require.NotNil(t, final.StartedAt)
	require.NotNil(t, final.StoppedAt)
	require.False(t, final.StoppedAt.Before(*final.StartedAt))
	require.Equal(t, "job-1/0", aws.ToString(final.StartedBy))
	require.Equal(t, "family:fam", aws.ToString(final.Group))
	require.Equal(t, "1", aws.ToString(final.Tags[0].Value))
	require.Equal(t, 1, e.em.Launches("job-1/0"))

	id := arn[strings.LastIndex(arn, "/")+1:]
	stream := "job/main/" + id
	got, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
		LogGroupName: aws.String("/tether/test"), LogStreamName: aws.String(stream), StartFromHead: aws.Bool(true),
	})
	require.NoError(t, err)
	var msgs []string
	for _, ev := range got.Events {
		msgs = append(msgs, aws.ToString(ev.Message))
	}
	require.Len(t, msgs, 3)
	require.Equal(t, "hello world", msgs[0])
	require.ElementsMatch(t, []string{"second", "oops"}, msgs[1:])

	// At the end of the stream the forward token does not move.
	again, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
		LogGroupName: aws.String("/tether/test"), LogStreamName: aws.String(stream), NextToken: got.NextForwardToken,
	})
	require.NoError(t, err)
	require.Empty(t, again.Events)
	require.Equal(t, aws.ToString(got.NextForwardToken), aws.ToString(again.NextForwardToken))

	streams, err := e.logs.DescribeLogStreams(ctx, &cloudwatchlogs.DescribeLogStreamsInput{LogGroupName: aws.String("/tether/test")})
	require.NoError(t, err)
	require.Len(t, streams.LogStreams, 1)
	require.Equal(t, stream, aws.ToString(streams.LogStreams[0].LogStreamName))
}

func TestNonZeroExitAndFailures(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StopTimeout: time.Second})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "fail", shell("main", "exit 3"))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("fail")})
	final, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
	require.Equal(t, int32(3), aws.ToInt32(final.Containers[0].ExitCode))

	register(t, ctx, e.ecs, "nocmd", types.ContainerDefinition{Name: aws.String("main"), Image: aws.String("x"),
		Command: []string{"/definitely/not/a/command"}})
	tk = runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("nocmd")})
	final, _ = waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
	require.Equal(t, types.TaskStopCodeTaskFailedToStart, final.StopCode)
	require.Contains(t, aws.ToString(final.StoppedReason), "CannotStartContainerError")
	require.Nil(t, final.Containers[0].ExitCode)

	e.em.SetFaults(Faults{FailToStartRate: 1})
	tk = runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("fail")})
	final, _ = waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
	require.Equal(t, types.TaskStopCodeTaskFailedToStart, final.StopCode)
	require.NotEmpty(t, aws.ToString(final.StoppedReason))

	e.em.SetFaults(Faults{CapacityErrorRate: 1})
	out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("fail"), StartedBy: aws.String("cap")})
	require.NoError(t, err)
	require.Empty(t, out.Tasks)
	require.Len(t, out.Failures, 1)
	require.Equal(t, "RESOURCE:CPU", aws.ToString(out.Failures[0].Reason))
	require.Equal(t, 0, e.em.Launches("cap"))

	_, err = e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("nosuch")})
	var ce *types.ClientException
	require.ErrorAs(t, err, &ce)
	_, err = e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("fail"), Cluster: aws.String("nosuch")})
	var cnf *types.ClusterNotFoundException
	require.ErrorAs(t, err, &cnf)
}

func TestEssentialContainerExitStopsTask(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StopTimeout: 5 * time.Second})
	ctx := ctxT(t)
	helper := shell("helper", "exit 0")
	helper.Essential = aws.Bool(false)
	side := shell("side", "sleep 30")
	side.Essential = aws.Bool(false)
	register(t, ctx, e.ecs, "ess", shell("main", "sleep 0.3; exit 0"), helper, side)
	began := time.Now()
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("ess")})
	final, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), stopped)
	require.Less(t, time.Since(began), 5*time.Second, "the sidecar got SIGTERM, not the kill timeout")
	require.Equal(t, types.TaskStopCodeEssentialContainerExited, final.StopCode)
	codes := map[string]int32{}
	for _, c := range final.Containers {
		require.NotNil(t, c.ExitCode, aws.ToString(c.Name))
		codes[aws.ToString(c.Name)] = aws.ToInt32(c.ExitCode)
	}
	require.Equal(t, map[string]int32{"main": 0, "helper": 0, "side": 143}, codes)
}

func TestStopTaskTermThenKill(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StopTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	// The task says when its trap is in place. A SIGTERM sent before that
	// would end it at once (this test flaked ~1 in 40 without it).
	trapped := filepath.Join(t.TempDir(), "trapped")
	register(t, ctx, e.ecs, "stubborn", shell("main", fmt.Sprintf(`trap '' TERM; : > %q; while :; do sleep 0.05; done`, trapped)))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("stubborn")})
	arn := aws.ToString(tk.TaskArn)
	waitTask(t, ctx, e.ecs, arn, func(tk types.Task) bool { return aws.ToString(tk.LastStatus) == "RUNNING" })
	require.Eventually(t, func() bool { _, err := os.Stat(trapped); return err == nil }, 10*time.Second, 10*time.Millisecond, "the task installed its TERM trap")

	began := time.Now()
	out, err := e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(arn), Reason: aws.String("job 42 canceled")})
	require.NoError(t, err)
	require.Equal(t, "STOPPED", aws.ToString(out.Task.DesiredStatus))
	final, _ := waitTask(t, ctx, e.ecs, arn, stopped)
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	require.Equal(t, types.TaskStopCodeUserInitiated, final.StopCode)
	require.Equal(t, "job 42 canceled", aws.ToString(final.StoppedReason))
	require.Equal(t, int32(137), aws.ToInt32(final.Containers[0].ExitCode))

	// Stopping a stopped task returns it unchanged.
	out, err = e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(arn[strings.LastIndex(arn, "/")+1:]), Reason: aws.String("again")})
	require.NoError(t, err)
	require.Equal(t, "job 42 canceled", aws.ToString(out.Task.StoppedReason))

	_, err = e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String("0123456789abcdef0123456789abcdef")})
	var ipe *types.InvalidParameterException
	require.ErrorAs(t, err, &ipe)
}

func TestClientTokenIdempotency(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "idem", shell("main", "sleep 30"))
	in := &ecs.RunTaskInput{TaskDefinition: aws.String("idem"), StartedBy: aws.String("job-7/0"), ClientToken: aws.String("job-7-0-1")}
	first := runOne(t, ctx, e.ecs, in)
	second := runOne(t, ctx, e.ecs, in)
	require.Equal(t, aws.ToString(first.TaskArn), aws.ToString(second.TaskArn))
	require.Equal(t, 1, e.em.Launches("job-7/0"))

	_, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("idem"), StartedBy: aws.String("job-7/1"), ClientToken: aws.String("job-7-0-1")})
	var conflict *types.ConflictException
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, []string{aws.ToString(first.TaskArn)}, conflict.ResourceIds)
	require.Equal(t, 0, e.em.Launches("job-7/1"))

	_, err = e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("idem"), ClientToken: aws.String(strings.Repeat("x", 65))})
	var ipe *types.InvalidParameterException
	require.ErrorAs(t, err, &ipe)
}

func TestStartedByValidation(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "sb", shell("main", "exit 0"))
	for _, bad := range []string{strings.Repeat("a", 129), "job:1", "job 1", "jöb"} {
		_, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("sb"), StartedBy: aws.String(bad)})
		var ipe *types.InvalidParameterException
		require.ErrorAs(t, err, &ipe, "startedBy %q", bad)
	}
	ok := strings.Repeat("a", 122) + "-_/A9z" // 128, the most the reference allows
	runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("sb"), StartedBy: aws.String(ok)})
	require.Equal(t, 1, e.em.Launches(ok))

	_, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("sb"), Count: aws.Int32(11)})
	var ipe *types.InvalidParameterException
	require.ErrorAs(t, err, &ipe)
}

func TestListTasks(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StopTimeout: time.Second})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "lt", shell("main", "sleep 30"))
	_, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("x"), Family: aws.String("lt")})
	var ipe *types.InvalidParameterException
	require.ErrorAs(t, err, &ipe)
	for _, f := range []*ecs.ListTasksInput{
		{StartedBy: aws.String("x"), ServiceName: aws.String("s")},
		{StartedBy: aws.String("x"), LaunchType: types.LaunchTypeFargate},
		{StartedBy: aws.String("x"), ContainerInstance: aws.String("ci")},
	} {
		_, err := e.ecs.ListTasks(ctx, f)
		require.ErrorAs(t, err, &ipe)
	}

	out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("lt"), StartedBy: aws.String("pg"), Count: aws.Int32(3)})
	require.NoError(t, err)
	require.Len(t, out.Tasks, 3)
	require.Equal(t, 3, e.em.Launches("pg"))
	runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("lt"), StartedBy: aws.String("other")})

	var listed []string
	page, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pg"), MaxResults: aws.Int32(2)})
	require.NoError(t, err)
	require.Len(t, page.TaskArns, 2)
	require.NotNil(t, page.NextToken)
	listed = append(listed, page.TaskArns...)
	page, err = e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pg"), MaxResults: aws.Int32(2), NextToken: page.NextToken})
	require.NoError(t, err)
	require.Len(t, page.TaskArns, 1)
	require.Nil(t, page.NextToken)
	listed = append(listed, page.TaskArns...)
	var want []string
	for _, tk := range out.Tasks {
		want = append(want, aws.ToString(tk.TaskArn))
	}
	require.ElementsMatch(t, want, listed)

	// Stopped tasks leave the default (RUNNING) listing and show under STOPPED.
	victim := want[0]
	_, err = e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(victim)})
	require.NoError(t, err)
	waitTask(t, ctx, e.ecs, victim, stopped)
	running, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pg")})
	require.NoError(t, err)
	require.Len(t, running.TaskArns, 2)
	require.NotContains(t, running.TaskArns, victim)
	stoppedList, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("pg"), DesiredStatus: types.DesiredStatusStopped})
	require.NoError(t, err)
	require.Equal(t, []string{victim}, stoppedList.TaskArns)

	fam, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{Family: aws.String("lt")})
	require.NoError(t, err)
	require.Len(t, fam.TaskArns, 3)
}

// StartedByOnly reads the ListTasks reference literally: a startedBy is the
// only filter. With desiredStatus it is refused, and alone it lists the
// tasks of every desired status.
func TestListTasksStartedByOnly(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StopTimeout: time.Second, StartedByOnly: true})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "sbo", shell("main", "sleep 30"))
	out, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("sbo"), StartedBy: aws.String("only"), Count: aws.Int32(2)})
	require.NoError(t, err)
	victim := aws.ToString(out.Tasks[0].TaskArn)
	_, err = e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(victim)})
	require.NoError(t, err)
	waitTask(t, ctx, e.ecs, victim, stopped)

	var ipe *types.InvalidParameterException
	for _, st := range []types.DesiredStatus{types.DesiredStatusRunning, types.DesiredStatusStopped} {
		_, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("only"), DesiredStatus: st})
		require.ErrorAs(t, err, &ipe, "startedBy with desiredStatus %s", st)
		require.Contains(t, ipe.ErrorMessage(), "startedBy must be the only filter")
	}
	all, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("only")})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{victim, aws.ToString(out.Tasks[1].TaskArn)}, all.TaskArns, "running and stopped alike")
	// Without startedBy, desiredStatus filters as usual.
	running, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{Family: aws.String("sbo")})
	require.NoError(t, err)
	require.Equal(t, []string{aws.ToString(out.Tasks[1].TaskArn)}, running.TaskArns)
}

func TestStoppedTaskExpires(t *testing.T) {
	t.Parallel()
	e := start(t, Options{StoppedRetention: 300 * time.Millisecond})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "exp", shell("main", "exit 0"))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("exp"), StartedBy: aws.String("exp")})
	arn := aws.ToString(tk.TaskArn)
	waitTask(t, ctx, e.ecs, arn, stopped)
	listed, err := e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("exp"), DesiredStatus: types.DesiredStatusStopped})
	require.NoError(t, err)
	require.Equal(t, []string{arn}, listed.TaskArns)

	timer := time.NewTimer(400 * time.Millisecond)
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-timer.C:
	}
	out, err := e.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{arn}})
	require.NoError(t, err)
	require.Empty(t, out.Tasks)
	require.Len(t, out.Failures, 1)
	require.Equal(t, "MISSING", aws.ToString(out.Failures[0].Reason))
	require.Equal(t, arn, aws.ToString(out.Failures[0].Arn))
	listed, err = e.ecs.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String("exp"), DesiredStatus: types.DesiredStatusStopped})
	require.NoError(t, err)
	require.Empty(t, listed.TaskArns)
}

func TestThrottlingAndServerErrors(t *testing.T) {
	t.Parallel()
	e := start(t, Options{ThrottleRate: 0.3, ServerErrorRate: 0.1, Seed: 7})
	ctx := ctxT(t)
	cfg := clientConfig(20)
	rt := &countingTransport{}
	patient := ecs.NewFromConfig(cfg, func(o *ecs.Options) {
		o.BaseEndpoint = aws.String(e.url)
		o.HTTPClient = &http.Client{Transport: rt}
	})
	for i := range 30 {
		out, err := patient.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
		require.NoError(t, err, "call %d", i)
		require.Equal(t, "ACTIVE", aws.ToString(out.Clusters[0].Status))
	}
	require.Positive(t, rt.status(http.StatusBadRequest), "some requests were throttled and retried")
	require.Positive(t, rt.status(http.StatusInternalServerError), "some requests failed with 500 and were retried")

	impatient := ecs.NewFromConfig(clientConfig(1), func(o *ecs.Options) { o.BaseEndpoint = aws.String(e.url) })
	e.em.SetFaults(Faults{ThrottleRate: 1})
	_, err := impatient.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	var apiErr smithy.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "ThrottlingException", apiErr.ErrorCode())

	e.em.SetFaults(Faults{ServerErrorRate: 1})
	_, err = impatient.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	var se *types.ServerException
	require.ErrorAs(t, err, &se)

	// Admin endpoints never see injected faults.
	resp, err := http.Get(e.url + "/_emulator/launches")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
}

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "adm", shell("main", "exit 0"))
	runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("adm"), StartedBy: aws.String("job-9/0")})
	runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("adm"), StartedBy: aws.String("job-9/0")})

	var one struct {
		StartedBy string `json:"startedBy"`
		Count     int    `json:"count"`
	}
	getJSON(t, e.url+"/_emulator/launches?startedBy=job-9/0", &one)
	require.Equal(t, "job-9/0", one.StartedBy)
	require.Equal(t, 2, one.Count)
	var all struct {
		Counts map[string]int `json:"counts"`
	}
	getJSON(t, e.url+"/_emulator/launches", &all)
	require.Equal(t, map[string]int{"job-9/0": 2}, all.Counts)

	body, err := json.Marshal(Faults{ThrottleRate: 0.5, Latency: 5 * time.Millisecond})
	require.NoError(t, err)
	resp, err := http.Post(e.url+"/_emulator/faults", "application/json", strings.NewReader(string(body)))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, Faults{ThrottleRate: 0.5, Latency: 5 * time.Millisecond}, e.em.currentFaults())
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

func TestLogsAPI(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	_, err := e.logs.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g")})
	require.NoError(t, err)
	_, err = e.logs.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g")})
	var exists *cwlTypesAlreadyExists
	require.ErrorAs(t, err, &exists)
	_, err = e.logs.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s")})
	require.NoError(t, err)
	_, err = e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("nope")})
	var nf *cwlTypesNotFound
	require.ErrorAs(t, err, &nf)

	var events []cwlEvent
	now := time.Now().UnixMilli()
	for i := range 5 {
		events = append(events, cwlEvent{Message: aws.String(fmt.Sprintf("line %d", i)), Timestamp: aws.Int64(now + int64(i))})
	}
	_, err = e.logs.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s"), LogEvents: events})
	require.NoError(t, err)

	var got []string
	var token *string
	for range 4 {
		out, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{
			LogGroupName: aws.String("g"), LogStreamName: aws.String("s"), StartFromHead: aws.Bool(true),
			Limit: aws.Int32(2), NextToken: token,
		})
		require.NoError(t, err)
		for _, ev := range out.Events {
			got = append(got, aws.ToString(ev.Message))
		}
		token = out.NextForwardToken
	}
	require.Equal(t, []string{"line 0", "line 1", "line 2", "line 3", "line 4"}, got)

	// Without startFromHead and token, the newest events come back (still oldest-first).
	tail, err := e.logs.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s"), Limit: aws.Int32(2)})
	require.NoError(t, err)
	require.Len(t, tail.Events, 2)
	require.Equal(t, "line 3", aws.ToString(tail.Events[0].Message))
	require.True(t, slices.IsSortedFunc(tail.Events, func(a, b cwlOutEvent) int { return int(aws.ToInt64(a.Timestamp) - aws.ToInt64(b.Timestamp)) }))
}

func TestTaskDefinitionsAndTags(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "td", shell("main", "exit 0"))
	arn2 := register(t, ctx, e.ecs, "td", shell("main", "exit 1"))
	require.True(t, strings.HasSuffix(arn2, ":task-definition/td:2"))
	list, err := e.ecs.ListTaskDefinitions(ctx, &ecs.ListTaskDefinitionsInput{FamilyPrefix: aws.String("td")})
	require.NoError(t, err)
	require.Len(t, list.TaskDefinitionArns, 2)
	_, err = e.ecs.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("td:2")})
	require.NoError(t, err)
	latest, err := e.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("td")})
	require.NoError(t, err)
	require.Equal(t, int32(1), latest.TaskDefinition.Revision)
	_, err = e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("td:2")})
	var ce *types.ClientException
	require.ErrorAs(t, err, &ce)

	_, err = e.ecs.TagResource(ctx, &ecs.TagResourceInput{ResourceArn: aws.String(arn2), Tags: []types.Tag{{Key: aws.String("hash"), Value: aws.String("def")}}})
	require.NoError(t, err)
	tags, err := e.ecs.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn2)})
	require.NoError(t, err)
	require.Len(t, tags.Tags, 1)
	require.Equal(t, "def", aws.ToString(tags.Tags[0].Value))

	cl, err := e.ecs.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("batch")})
	require.NoError(t, err)
	require.Equal(t, "arn:aws:ecs:us-east-1:000000000000:cluster/batch", aws.ToString(cl.Cluster.ClusterArn))
	dc, err := e.ecs.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"batch", "missing"}})
	require.NoError(t, err)
	require.Len(t, dc.Clusters, 1)
	require.Equal(t, "MISSING", aws.ToString(dc.Failures[0].Reason))
}

type (
	cwlTypesAlreadyExists = cwltypes.ResourceAlreadyExistsException
	cwlTypesNotFound      = cwltypes.ResourceNotFoundException
	cwlEvent              = cwltypes.InputLogEvent
	cwlOutEvent           = cwltypes.OutputLogEvent
)

// countingTransport counts responses by HTTP status.
type countingTransport struct {
	mu     sync.Mutex
	counts map[int]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		if c.counts == nil {
			c.counts = map[int]int{}
		}
		c.counts[resp.StatusCode]++
		c.mu.Unlock()
	}
	return resp, err
}

func (c *countingTransport) status(code int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[code]
}

func TestCloseKillsTaskProcesses(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "long", shell("main", "sleep 30"))
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("long")})
	running, _ := waitTask(t, ctx, e.ecs, aws.ToString(tk.TaskArn), func(tk types.Task) bool { return aws.ToString(tk.LastStatus) == "RUNNING" })
	rid := aws.ToString(running.Containers[0].RuntimeId)
	pid, err := strconv.Atoi(rid[strings.LastIndex(rid, "-")+1:])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, 0), "the container process is alive")
	began := time.Now()
	require.NoError(t, e.em.Close())
	require.Less(t, time.Since(began), 5*time.Second)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "Close killed and reaped the process")
}

// A task passes through every state of the ECS task lifecycle: its exit
// codes are known once it is DEPROVISIONING, and it is STOPPED only after
// the deprovision delay (the network interface released).
func TestTaskLifecycleStates(t *testing.T) {
	t.Parallel()
	e := start(t, Options{DeprovisionDelay: 400 * time.Millisecond})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "life", shell("main", "trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.01; done"))
	arn := aws.ToString(runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("life")}).TaskArn)
	var seen []string
	var deprov types.Task
	stopSent := false
	for {
		out, err := e.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{arn}})
		require.NoError(t, err)
		tk := out.Tasks[0]
		status := aws.ToString(tk.LastStatus)
		if len(seen) == 0 || seen[len(seen)-1] != status {
			seen = append(seen, status)
		}
		if status == "RUNNING" && !stopSent {
			_, err := e.ecs.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(arn)})
			require.NoError(t, err)
			stopSent = true
		}
		if status == "DEPROVISIONING" && deprov.TaskArn == nil {
			deprov = tk
		}
		if status == "STOPPED" {
			require.True(t, aws.ToTime(tk.StoppedAt).Sub(aws.ToTime(tk.ExecutionStoppedAt)) >= 400*time.Millisecond)
			break
		}
		wait(t, ctx, 2*time.Millisecond)
	}
	// The states a poll sees come in the lifecycle's order. Those of a
	// step (20 ms) a loaded machine's polls may miss; those that last are
	// always seen.
	lifecycle := []string{"PROVISIONING", "PENDING", "ACTIVATING", "RUNNING", "DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"}
	at := -1
	for _, st := range seen {
		i := slices.Index(lifecycle, st)
		require.Greater(t, i, at, "%s out of the lifecycle's order in %v", st, seen)
		at = i
	}
	for _, st := range []string{"RUNNING", "STOPPING", "DEPROVISIONING", "STOPPED"} {
		require.Contains(t, seen, st)
	}
	require.NotNil(t, deprov.TaskArn, "seen DEPROVISIONING")
	require.Equal(t, int32(0), aws.ToInt32(deprov.Containers[0].ExitCode), "the exit code is known while DEPROVISIONING")
	require.Equal(t, "STOPPED", aws.ToString(deprov.Containers[0].LastStatus))
	require.NotNil(t, deprov.ExecutionStoppedAt)
	require.Nil(t, deprov.StoppedAt, "not STOPPED yet")
	require.Equal(t, types.TaskStopCodeUserInitiated, deprov.StopCode)
}

// A task launched with a capacity provider strategy reports the
// provider's launch type and its name: FARGATE_SPOT runs on Fargate.
func TestLaunchTypeFromCapacityProvider(t *testing.T) {
	t.Parallel()
	e := start(t, Options{})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "cp", shell("main", "sleep 5"))
	for _, tc := range []struct {
		strategy   []types.CapacityProviderStrategyItem
		launchType types.LaunchType
		provider   string
	}{
		{[]types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("FARGATE_SPOT"), Weight: 1}}, types.LaunchTypeFargate, "FARGATE_SPOT"},
		{[]types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("FARGATE"), Weight: 1}, {CapacityProvider: aws.String("FARGATE_SPOT"), Weight: 4}}, types.LaunchTypeFargate, "FARGATE_SPOT"},
		{[]types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("FARGATE"), Base: 1}, {CapacityProvider: aws.String("FARGATE_SPOT"), Weight: 4}}, types.LaunchTypeFargate, "FARGATE"},
		{[]types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("my-asg-provider"), Weight: 1}}, types.LaunchTypeEc2, "my-asg-provider"},
	} {
		tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("cp"), CapacityProviderStrategy: tc.strategy})
		require.Equal(t, tc.launchType, tk.LaunchType)
		require.Equal(t, tc.provider, aws.ToString(tk.CapacityProviderName))
	}
	tk := runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("cp"), LaunchType: types.LaunchTypeFargate})
	require.Equal(t, types.LaunchTypeFargate, tk.LaunchType)
	require.Nil(t, tk.CapacityProviderName)

	_, err := e.ecs.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("cp"), CapacityProviderStrategy: []types.CapacityProviderStrategyItem{
		{CapacityProvider: aws.String("FARGATE"), Base: 1}, {CapacityProvider: aws.String("FARGATE_SPOT"), Base: 1},
	}})
	var ipe *types.InvalidParameterException
	require.ErrorAs(t, err, &ipe, "a base on one provider at most")
}
