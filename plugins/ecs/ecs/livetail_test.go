package ecs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func prefixesOf(slots []*slot) [][]string {
	var out [][]string
	for _, s := range slots {
		out = append(out, s.prefixes)
	}
	return out
}

// One session takes each prefix whole; k sessions split each by the task
// ID's first hex digit; a prefix that does not fit is left to polling.
func TestAssignDir(t *testing.T) {
	var one []*slot
	for _, p := range []string{"a/", "b/", "c/"} {
		one = assignDir(one, p, 1, 2)
	}
	require.Equal(t, [][]string{{"a/", "b/"}}, prefixesOf(one), "c/ does not fit")

	three := assignDir(nil, "job/app/", 3, 100)
	require.Equal(t, [][]string{
		{"job/app/0", "job/app/3", "job/app/6", "job/app/9", "job/app/c", "job/app/f"},
		{"job/app/1", "job/app/4", "job/app/7", "job/app/a", "job/app/d"},
		{"job/app/2", "job/app/5", "job/app/8", "job/app/b", "job/app/e"},
	}, prefixesOf(three))
	// A slot's earlier prefixes list is never changed in place: the session
	// serving it holds it.
	held := three[0].prefixes
	three = assignDir(three, "x/", 3, 100)
	require.Len(t, three[0].prefixes, 12)
	require.Len(t, held, 6)
	// Every task ID falls in exactly one slot.
	g := &groupTail{slots: three}
	for _, h := range hexDigits {
		require.NotNil(t, g.slotOf("job/app/"+string(h)+"123"))
	}
}

// Two overlapping sessions send the same lines; each passes once, and two
// equal lines in one millisecond pass twice.
func TestDedupeOverlap(t *testing.T) {
	d := newDedupe(1, 2)
	ev := func(msg string) types.LiveTailSessionLogEvent {
		return types.LiveTailSessionLogEvent{Message: aws.String(msg), Timestamp: aws.Int64(5), IngestionTime: aws.Int64(6)}
	}
	var passed []string
	for _, c := range []struct {
		id  int
		msg string
	}{{1, "x"}, {1, "x"}, {2, "x"}, {2, "y"}, {2, "x"}, {2, "x"}, {1, "y"}} {
		if d.accept(c.id, "s", ev(c.msg)) {
			passed = append(passed, c.msg)
		}
	}
	require.Equal(t, []string{"x", "x", "y", "x"}, passed)
	require.True(t, d.accept(1, "other", ev("x")), "another stream's line is its own")
}

func TestGroupARN(t *testing.T) {
	require.Equal(t, "arn:aws:logs:eu-west-1:123456789012:log-group:/ecs/app",
		groupARN("arn:aws:ecs:eu-west-1:123456789012:task-definition/app:3", "/ecs/app"))
	require.Equal(t, "arn:aws-cn:logs:cn-north-1:1:log-group:g", groupARN("arn:aws-cn:ecs:cn-north-1:1:task-definition/f:1", "g"))
	require.Empty(t, groupARN("app:3", "g"))
}

// A stream is live only if its prefix was covered since before its launch
// began, nothing was copied yet, and lines held for it are complete.
func TestSubscribeLiveness(t *testing.T) {
	g := newGroupTail(nil, nil, "arn", 1)
	g.slots = assignDir(nil, "job/app/", 1, 100)
	box := newInbox()
	now := time.Now()
	require.False(t, g.subscribe("job/app/1", now, true, box), "not covered")
	g.slots[0].since["job/app/"] = now
	require.False(t, g.subscribe("job/app/2", now.Add(-time.Second), true, box), "covered after the launch began")
	require.False(t, g.subscribe("job/app/3", now.Add(time.Millisecond), false, box), "lines copied already")
	require.False(t, g.subscribe("other/app/4", now.Add(time.Millisecond), true, box), "another prefix")
	g.hold("job/app/5", []types.OutputLogEvent{{Message: aws.String("early")}}, now)
	require.True(t, g.subscribe("job/app/5", now.Add(time.Millisecond), true, box))
	require.Equal(t, []liveNote{{stream: "job/app/5", events: []types.OutputLogEvent{{Message: aws.String("early")}}}}, box.take())
	for i := 0; i <= liveHoldMax; i++ {
		g.hold("job/app/6", []types.OutputLogEvent{{}}, now)
	}
	require.False(t, g.subscribe("job/app/6", now.Add(time.Millisecond), true, box), "more held than kept")
	g.hold("job/app/7", []types.OutputLogEvent{{}}, now)
	g.expireHeld(now.Add(liveHoldFor + time.Second))
	require.False(t, g.subscribe("job/app/7", now.Add(time.Millisecond), true, box), "held lines expired")
	require.True(t, g.subscribe("job/app/8", now.Add(-time.Hour).Add(2*time.Hour), true, box), "a late subscriber is live if nothing was dropped")
	// A gap ends every followed stream of the slot.
	g.gap(g.slots[0], "why")
	require.ElementsMatch(t, []liveNote{{stream: "job/app/5", gap: "why"}, {stream: "job/app/8", gap: "why"}}, box.take())
}

// waitFile is a script that logs "first", waits for path to exist, and
// logs "second".
func waitFile(path string) string {
	return fmt.Sprintf("echo first; while [ ! -e %s ]; do sleep 0.02; done; echo second", path)
}

// A running task's lines reach the job while it runs, through the live
// tail alone: no GetLogEvents call, every line once. With 3 sessions each
// takes a third of the task IDs. The region may come from the environment
// (AWS_REGION, as pass_env gives it) rather than the config.
func TestLiveTailFollowsRunningOutput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		k         int
		envRegion bool
	}{{1, false}, {3, false}, {1, true}} {
		t.Run(fmt.Sprintf("sessions=%d,envRegion=%v", c.k, c.envRegion), func(t *testing.T) {
			t.Parallel()
			e := liveEnv(t, emulator.Options{})
			gate := filepath.Join(t.TempDir(), "go")
			job := e.job(waitFile(gate), map[string]any{"live_tail_sessions": c.k})
			if c.envRegion {
				job.Config, _ = json.Marshal(map[string]any{"endpoint": e.url, "api_rates": testRates})
			}
			rt := plugintest.NewGatedRuntime(nil)
			call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
			require.Eventually(t, func() bool { return strings.Contains(rt.StdoutString(), "first\n") }, 15*time.Second, 10*time.Millisecond)
			require.NotContains(t, rt.StdoutString(), "second")
			require.NoError(t, os.WriteFile(gate, nil, 0o600))
			call.wait(t, 20*time.Second)
			require.NoError(t, call.err, "stderr: %s", rt.StderrString())
			require.Equal(t, "first\nsecond\n", rt.StdoutString())
			calls, _ := e.em.Calls()
			require.Zero(t, calls["GetLogEvents"], "a live stream needs no GetLogEvents")
			require.GreaterOrEqual(t, calls["StartLiveTail"], c.k)
			require.Equal(t, c.k, e.em.LiveTailSessions())
		})
	}
}

// A session that fails mid-job leaves its streams to GetLogEvents from
// where the live tail stopped: every line once.
func TestLiveTailGapIsFilledByGetLogEvents(t *testing.T) {
	t.Parallel()
	e := liveEnv(t, emulator.Options{})
	gate := filepath.Join(t.TempDir(), "go")
	job := e.job("i=1; while [ $i -le 20 ]; do echo line-$i; i=$((i+1)); done; "+
		fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done; ", gate)+
		"i=21; while [ $i -le 40 ]; do echo line-$i; i=$((i+1)); done", nil)
	rt := plugintest.NewGatedRuntime(nil)
	call := runAsync(func() (*plugin.Result, error) { return Direct(e.p).Execute(context.Background(), job, rt) })
	require.Eventually(t, func() bool { return strings.Contains(rt.StdoutString(), "line-20\n") }, 15*time.Second, 10*time.Millisecond)
	calls, _ := e.em.Calls()
	require.Zero(t, calls["GetLogEvents"], "the first lines came live")
	setLiveTail(t, e, emulator.LiveTail{ErrorRate: 1}) // the session fails at its next update
	require.Eventually(t, func() bool { return e.em.LiveTailSessions() == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	call.wait(t, 30*time.Second)
	require.NoError(t, call.err, "stderr: %s", rt.StderrString())
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	require.Equal(t, want.String(), rt.StdoutString())
	calls, _ = e.em.Calls()
	require.Positive(t, calls["GetLogEvents"])
}

// StartLiveTail refused (a role without logs:StartLiveTail): the job is
// polled as before, without waiting for a session.
func TestLiveTailRefusedFallsBackToPolling(t *testing.T) {
	t.Parallel()
	e := liveEnv(t, emulator.Options{LiveTail: emulator.LiveTail{Refuse: "AccessDeniedException"}})
	ctx := context.Background()
	job := e.job("i=1; while [ $i -le 30 ]; do echo line-$i; i=$((i+1)); done", nil)
	rt := plugintest.NewGatedRuntime(nil)
	_, err := Direct(e.p).Execute(ctx, job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	require.Len(t, lines(rt.StdoutString()), 30)
	calls, _ := e.em.Calls()
	require.Positive(t, calls["GetLogEvents"])
	require.Positive(t, calls["StartLiveTail"], "the plugin asked and was refused")
	require.Zero(t, e.em.LiveTailSessions())
}

// liveEnv is newEnv with the jobs' log group in place, as it is before
// any task of a real cluster logs (awslogs creates it with the first
// stream otherwise, and tails start once it exists).
func liveEnv(t *testing.T, opts emulator.Options) *env {
	t.Helper()
	e := newEnv(t, opts)
	_, err := e.logsClient().CreateLogGroup(context.Background(), &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("/tether/test")})
	require.NoError(t, err)
	return e
}

func (e *env) logsClient() *cloudwatchlogs.Client {
	return cloudwatchlogs.New(cloudwatchlogs.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.url), Credentials: aws.AnonymousCredentials{}},
		func(o *cloudwatchlogs.Options) { o.APIOptions = append(o.APIOptions, noHostPrefix) })
}

func setLiveTail(t *testing.T, e *env, lt emulator.LiveTail) {
	t.Helper()
	e.em.SetLiveTail(lt)
}
