package ecs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// logCallTimeout bounds one GetLogEvents call.
	logCallTimeout = 30 * time.Second
	// logErrorRetry is how long a stream whose read failed waits before the
	// next try (throttling waits less: the budget paces it anyway).
	logErrorRetry    = 10 * time.Second
	logThrottleRetry = 2 * time.Second
	// logMissingRetry is the longest wait before a stopped task's missing
	// stream is looked for again (log_stream_wait).
	logMissingRetry = time.Second
)

// stream is one container's awslogs stream of a task's current launch.
//
// How logs are read (one GetLogEvents budget per process, see budget).
// While a task runs, each of its streams is read about once per
// poll_interval as a live tail, at low priority. When the budget is short
// (1,000 jobs per agent) tails simply come less often, FIFO, since one call
// returns up to 10,000 events. When the poller reports the task STOPPED,
// its streams are drained at high priority. Read to the end (the token
// stops moving) no earlier than log_settle after the stop was seen, so
// events CloudWatch delivers late are in. A drain once begun goes before
// new ones, so each job ends as soon as it can rather than all late. The task's outcome is recorded,
// and the job may end, only after that (or after log_drain_timeout, with a
// line saying the log may be incomplete). A read error never decides the
// job. The task does.
type stream struct {
	task      int
	cursor    int // index into the task's TaskState.Logs
	container string
	group     string
	name      string
	region    string
	cl        *clients // nil until the first read

	nextTail time.Time // earliest next live read
	retryAt  time.Time // after a failed read
	done     bool      // drained
	noted    string    // the last error written to the job's stderr
	byTime   bool      // the token expired: read on from the last timestamp
	drains   int       // reads since the task was seen stopped
	drainAt  time.Time // the first of them

	// live: the live tail copies the stream's lines (livetail.go), and no
	// GetLogEvents is needed. tail is the group tail it is followed by.
	live bool
	tail *groupTail
}

// planLogs requests the run's next log read when one is due and returns
// when the next one will be (zero: none planned).
func (r *run) planLogs(now time.Time) time.Time {
	s, prio, due := r.nextStream(now)
	if s == nil {
		r.dropTicket()
		return time.Time{}
	}
	if due.After(now) {
		r.dropTicket() // a call granted now would find nothing due
		return due
	}
	if r.ticket != nil && r.tprio > prio {
		r.dropTicket() // a drain went due while a tail waited: jump the queue
	}
	if r.ticket == nil {
		r.ticket, r.tprio = r.cl.logBud.request(prio), prio
	}
	return time.Time{}
}

func (r *run) dropTicket() {
	if r.ticket != nil {
		r.ticket.cancel()
		r.ticket = nil
	}
}

// nextStream picks the stream to read next: a draining one first, then the
// live tail due soonest.
func (r *run) nextStream(now time.Time) (*stream, int, time.Time) {
	var (
		best     *stream
		bestPrio = numPrios
		bestDue  time.Time
	)
	for i := range r.tasks {
		tr, t := &r.tasks[i], &r.h.Tasks[i]
		if t.Outcome != "" {
			continue
		}
		for _, s := range tr.streams {
			if s.done || s.live {
				continue
			}
			prio, due, ok := r.streamDue(tr, t, s)
			if !ok {
				continue // not visible yet; its stream will not be either
			}
			// The most urgent, then the soonest due. Any stream beats
			// none (bestPrio starts at numPrios).
			if cmp.Or(cmp.Compare(prio, bestPrio), due.Compare(bestDue)) < 0 {
				best, bestPrio, bestDue = s, prio, due
			}
		}
	}
	return best, bestPrio, bestDue
}

// streamDue says how urgent a read of a task's stream is and when it is
// due. A stopped task's streams are drained log_settle after the stop. A
// running task's are tailed. It reports false for a task not seen yet.
func (r *run) streamDue(tr *taskRun, t *TaskState, s *stream) (int, time.Time, bool) {
	if tr.stoppedAt.IsZero() {
		return prioTail, later(s.nextTail, s.retryAt), t.Seen
	}
	prio := prioDrain
	if s.drains > 0 {
		prio = prioFinish
	}
	return prio, later(tr.stoppedAt.Add(r.cfg.LogSettle), s.retryAt), true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// drained reports whether task i's logs are in (or given up on).
func (r *run) drained(i int, now time.Time) bool {
	tr := &r.tasks[i]
	r.liveSettled(tr, now)
	if allDone(tr.streams) {
		return true
	}
	// The timeout counts from a stream's first drain read, not from the
	// stop. Waiting for a turn in the process's budget is queueing, not a
	// failing stream, and giving up then would cut logs for no reason.
	expired := false
	for _, s := range tr.streams {
		if r.drainExpired(s, now) {
			s.done, expired = true, true
			r.stderrf("task %d: stopped reading log stream %s after %s; its last lines may be missing%s", i, s.name, r.cfg.LogDrainTimeout, noteSuffix(s.noted))
		}
	}
	return expired
}

func allDone(streams []*stream) bool {
	return !slices.ContainsFunc(streams, func(s *stream) bool { return !s.done })
}

// drainExpired reports whether a stream has been drained for
// log_drain_timeout without reaching its end.
func (r *run) drainExpired(s *stream, now time.Time) bool {
	return !s.done && !s.drainAt.IsZero() && now.Sub(s.drainAt) >= r.cfg.LogDrainTimeout
}

// noteSuffix is n in parentheses after a space, or nothing.
func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// readLog spends one granted GetLogEvents call on the stream most due.
func (r *run) readLog(ctx context.Context) {
	now := time.Now()
	s, prio, due := r.nextStream(now)
	if s == nil || due.After(now) {
		return // nothing due any more: the call is not made
	}
	if !r.streamClient(ctx, s, now) {
		return
	}
	t := &r.h.Tasks[s.task]
	cur := &t.Logs[s.cursor]
	if prio <= prioDrain {
		if s.drains == 0 {
			s.drainAt = now
		}
		s.drains++
	}
	cctx, cancel := context.WithTimeout(ctx, logCallTimeout)
	out, err := s.cl.logs.GetLogEvents(cctx, logEventsInput(s, cur))
	cancel()
	if err != nil {
		r.logReadFailed(ctx, s, cur, prio, now, err)
		return
	}
	r.logRead(t, s, cur, prio, now, out)
}

// streamClient makes sure the stream has a client for its region, and
// notes the error when none can be made. The tasks' region has its client
// already, and it is shared.
func (r *run) streamClient(ctx context.Context, s *stream, now time.Time) bool {
	if s.cl != nil {
		return true
	}
	cl, err := r.p.clients.get(ctx, s.region, r.cfg.Endpoint)
	if err != nil {
		r.noteLog(s, err.Error(), now.Add(logErrorRetry))
		return false
	}
	cl.setRates(r.cfg.APIRates)
	s.cl = cl
	return true
}

// logEventsInput reads the stream on from its cursor: by token, or by time
// once the token expired.
func logEventsInput(s *stream, cur *LogCursor) *cloudwatchlogs.GetLogEventsInput {
	in := &cloudwatchlogs.GetLogEventsInput{
		LogGroupName:  aws.String(s.group),
		LogStreamName: aws.String(s.name),
		StartFromHead: aws.Bool(true),
	}
	switch {
	case s.byTime:
		in.StartTime = aws.Int64(cur.Last + 1)
	case cur.Token != "":
		in.NextToken = aws.String(cur.Token)
	}
	return in
}

// logReadFailed decides when a stream whose read failed is read again.
func (r *run) logReadFailed(ctx context.Context, s *stream, cur *LogCursor, prio int, now time.Time, err error) {
	if ctx.Err() != nil {
		return
	}
	code := errorCode(err)
	switch {
	case code == "ResourceNotFoundException":
		if prio <= prioDrain {
			// awslogs creates the stream with its first event, which
			// CloudWatch may show later than log_settle. It is looked for
			// until log_stream_wait from the first drain read. After that
			// the container never wrote a line, or the group is not where
			// the task definition says.
			if now.Sub(s.drainAt) < r.cfg.LogStreamWait {
				s.retryAt = now.Add(min(r.cfg.PollInterval, logMissingRetry))
				return
			}
			s.done = true
			r.stderrf("task %d: no log stream %s in group %s after log_stream_wait %s", s.task, s.name, s.group, r.cfg.LogStreamWait)
			return
		}
		s.nextTail = now.Add(r.cfg.PollInterval)
	case cur.Token != "" && errorSays(err, "token", "InvalidParameterException"):
		// Tokens expire (24 h). Read on by time from the last line copied.
		s.byTime, cur.Live = true, 0
		r.stderrf("task %d: the log position in %s expired; reading on from the last line's time (lines logged in that same millisecond may be missing)", s.task, s.name)
	case throttlingCodes[code]:
		s.retryAt = now.Add(logThrottleRetry)
	default:
		r.noteLog(s, err.Error(), now.Add(logErrorRetry))
	}
}

// logRead copies what a read returned to the job's output and moves the
// stream's cursor on.
func (r *run) logRead(t *TaskState, s *stream, cur *LogCursor, prio int, now time.Time, out *cloudwatchlogs.GetLogEventsOutput) {
	s.retryAt = time.Time{}
	// The first cur.Live events after the cursor are copied already (by
	// the live tail).
	events := out.Events
	skip := min(cur.Live, len(events))
	cur.Live -= skip
	if err := r.writeEvents(t, s, events[skip:]); err != nil {
		r.failWrite(s, err)
		return
	}
	atEnd, moved := advance(s, cur, out)
	if moved {
		r.dirty = true
	}
	switch {
	case !atEnd:
		// More to read: due again at once (a new ticket: other jobs' reads
		// in the queue go first).
	case prio <= prioDrain:
		// At the end, the stop was seen log_settle ago or more. What
		// CloudWatch had to deliver is in.
		s.done = true
	default:
		s.nextTail = now.Add(r.cfg.PollInterval)
	}
}

// failWrite ends the run: the agent refuses its output (its lease is gone).
func (r *run) failWrite(s *stream, err error) {
	r.fatal = plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: writing the log of task %d: %w", s.task, err))
}

// advance moves the cursor past what a read returned. It reports whether
// the read was at the stream's end and whether the cursor moved.
func advance(s *stream, cur *LogCursor, out *cloudwatchlogs.GetLogEventsOutput) (atEnd, moved bool) {
	next := aws.ToString(out.NextForwardToken)
	atEnd = next == "" || next == cur.Token
	moved = len(out.Events) > 0 || !atEnd
	if n := len(out.Events); n > 0 {
		cur.Last = aws.ToInt64(out.Events[n-1].Timestamp)
	}
	if next != "" {
		s.byTime = false
	}
	if !atEnd {
		cur.Token = next
	}
	return atEnd, moved
}

// noteLog writes a read error to the job's stderr once (until it changes)
// and retries the stream later.
func (r *run) noteLog(s *stream, msg string, retry time.Time) {
	s.retryAt = retry
	if msg != s.noted {
		s.noted = msg
		r.stderrf("task %d: reading log stream %s: %s (will keep trying; this does not decide the job)", s.task, s.name, msg)
	}
}

// writeEvents copies events to the job's stdout. CloudWatch Logs does not
// keep stdout and stderr apart, so both go to stdout. With several tasks or
// containers each line says whose it is.
func (r *run) writeEvents(t *TaskState, s *stream, events []types.OutputLogEvent) error {
	if len(events) == 0 {
		return nil
	}
	prefix := len(r.h.Tasks) > 1 || len(t.Logs) > 1
	var b strings.Builder
	for _, ev := range events {
		if prefix {
			fmt.Fprintf(&b, "[%d/%s] ", s.task, s.container)
		}
		msg := aws.ToString(ev.Message)
		b.WriteString(msg)
		if !strings.HasSuffix(msg, "\n") {
			b.WriteByte('\n')
		}
	}
	_, err := r.rt.Stdout().Write([]byte(b.String()))
	return err
}
