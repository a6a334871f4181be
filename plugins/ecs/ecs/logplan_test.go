package ecs

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

func TestAdvance(t *testing.T) {
	ev := []types.OutputLogEvent{{Timestamp: aws.Int64(5)}, {Timestamp: aws.Int64(9)}}
	for _, tc := range []struct {
		name          string
		token, next   string
		events        []types.OutputLogEvent
		byTime        bool
		atEnd, moved  bool
		wantToken     string
		wantLast      int64
		wantByTimeOff bool
	}{
		{"new token and events", "a", "b", ev, true, false, true, "b", 9, true},
		{"same token, no events", "a", "a", nil, true, true, false, "a", 0, true},
		{"same token, events", "a", "a", ev, false, true, true, "a", 9, true},
		{"no token", "a", "", nil, true, true, false, "a", 0, false},
		{"first token", "", "b", nil, false, false, true, "b", 0, true},
	} {
		s := &stream{byTime: tc.byTime}
		cur := &LogCursor{Token: tc.token}
		atEnd, moved := advance(s, cur, &cloudwatchlogs.GetLogEventsOutput{Events: tc.events, NextForwardToken: aws.String(tc.next)})
		require.Equal(t, tc.atEnd, atEnd, tc.name)
		require.Equal(t, tc.moved, moved, tc.name)
		require.Equal(t, tc.wantToken, cur.Token, tc.name)
		require.Equal(t, tc.wantLast, cur.Last, tc.name)
		require.Equal(t, tc.byTime && !tc.wantByTimeOff, s.byTime, tc.name)
	}
}

// The stream read next: a drain begun, then a drain, then a tail, each
// the soonest due; never a stream done or of a task not seen.
func TestNextStream(t *testing.T) {
	now := time.Now()
	settle := 10 * time.Second
	r := &run{cfg: Config{LogSettle: settle}, h: &Handle{Tasks: make([]TaskState, 4)}, tasks: make([]taskRun, 4)}
	r.h.Tasks[0].Seen, r.h.Tasks[1].Seen, r.h.Tasks[2].Seen = true, true, true
	tail := &stream{task: 0, nextTail: now.Add(time.Second)}
	tailSooner := &stream{task: 0, nextTail: now.Add(-time.Second)}
	done := &stream{task: 0, done: true}
	r.tasks[0].streams = []*stream{tail, done, tailSooner}
	unseen := &stream{task: 3}
	r.tasks[3].streams = []*stream{unseen}

	s, prio, due := r.nextStream(now)
	require.Same(t, tailSooner, s)
	require.Equal(t, prioTail, prio)
	require.Equal(t, now.Add(-time.Second), due)

	drain := &stream{task: 1, retryAt: now.Add(time.Hour)}
	r.tasks[1].stoppedAt, r.tasks[1].streams = now, []*stream{drain}
	s, prio, due = r.nextStream(now)
	require.Same(t, drain, s)
	require.Equal(t, prioDrain, prio)
	require.Equal(t, now.Add(time.Hour), due, "a retry after a failed read wins over log_settle")

	finish := &stream{task: 2, drains: 1}
	r.tasks[2].stoppedAt, r.tasks[2].streams = now.Add(-time.Minute), []*stream{finish}
	s, prio, due = r.nextStream(now)
	require.Same(t, finish, s)
	require.Equal(t, prioFinish, prio)
	require.Equal(t, now.Add(-time.Minute).Add(settle), due)

	r.h.Tasks[2].Outcome = outcomeSucceeded // settled: its streams are not read
	s, _, _ = r.nextStream(now)
	require.Same(t, drain, s)

	r = &run{h: &Handle{Tasks: make([]TaskState, 1)}, tasks: []taskRun{{streams: []*stream{{}}}}}
	s, prio, due = r.nextStream(now)
	require.Nil(t, s, "a task not seen yet")
	require.Equal(t, numPrios, prio)
	require.True(t, due.IsZero())
}

// The most urgent waiting priority goes first, a cancelled ticket leaves
// its queue, and dispatch grants every other one and then stops.
func TestBudgetGrants(t *testing.T) {
	b := newBudget(rate.NewLimiter(rate.Inf, 1))
	require.Equal(t, -1, b.next())
	b.mu.Lock() // queue them all before a dispatcher runs
	b.running = true
	tail, gone, drain := &ticket{b: b, prio: prioTail}, &ticket{b: b, prio: prioDrain}, &ticket{b: b, prio: prioDrain}
	for _, tk := range []*ticket{tail, gone, drain} {
		tk.ready = make(chan struct{})
		b.queues[tk.prio] = append(b.queues[tk.prio], tk)
	}
	require.Equal(t, prioDrain, b.next())
	b.mu.Unlock()
	gone.cancel()
	require.Equal(t, []*ticket{drain}, b.queues[prioDrain])
	go b.dispatch()
	<-drain.ready
	<-tail.ready
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return !b.running }, 5*time.Second, time.Millisecond)
	select {
	case <-gone.ready:
		t.Fatal("a cancelled ticket was granted")
	default:
	}
}
