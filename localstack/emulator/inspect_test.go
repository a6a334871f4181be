package emulator

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/stretchr/testify/require"
)

// Task and Tasks read a task in-process. Inside the consistency window,
// under a rate limit that refuses DescribeTasks, without counting a call.
func TestInspectTasks(t *testing.T) {
	t.Parallel()
	e := start(t, Options{ConsistencyWindow: time.Hour, RateLimits: true,
		RateLimitFigures: map[string]RateLimit{"DescribeTasks": {Rate: 0.001, Burst: 1}}})
	ctx := ctxT(t)
	register(t, ctx, e.ecs, "insp", synthetic("main", map[string]string{"SYNTH_LINES": "1", "SYNTH_INTERVAL": "10ms"}))
	before := time.Now()
	first := aws.ToString(runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("insp"), StartedBy: aws.String("job-1")}).TaskArn)
	second := aws.ToString(runOne(t, ctx, e.ecs, &ecs.RunTaskInput{TaskDefinition: aws.String("insp"), StartedBy: aws.String("job-2")}).TaskArn)
	calls, _ := e.em.Calls()

	var ti TaskInfo
	require.Eventually(t, func() bool {
		var ok bool
		ti, ok = e.em.Task(first)
		return ok && ti.LastStatus == "STOPPED"
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, first, ti.ARN)
	require.Equal(t, taskID(first), ti.ID)
	require.Equal(t, "job-1", ti.StartedBy)
	require.Equal(t, "EssentialContainerExited", ti.StopCode)
	require.False(t, ti.CreatedAt.Before(before))
	require.False(t, ti.StartedAt.Before(ti.CreatedAt))
	require.True(t, ti.StoppedAt.After(ti.StartedAt))

	byID, ok := e.em.Task(taskID(first))
	require.True(t, ok)
	require.Equal(t, ti, byID)
	_, ok = e.em.Task("arn:aws:ecs:us-east-1:000000000000:task/default/nope")
	require.False(t, ok)

	all := e.em.Tasks()
	require.Len(t, all, 2)
	require.Equal(t, []string{first, second}, []string{all[0].ARN, all[1].ARN}, "launch order")

	after, _ := e.em.Calls()
	require.Equal(t, calls, after, "inspection is not an AWS call")
}
