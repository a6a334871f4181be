package ecs

import (
	"context"
	"time"
)

// runLive is what one run keeps of the live tails it follows.
type runLive struct {
	box    *inbox
	byName map[string]*stream
	wants  map[wanted]bool
	// calls is when each task index's latest launch began (RunTask was
	// called after it). A stream is live only if its prefix was covered
	// since before then.
	calls map[int]time.Time
}

type wanted struct {
	g   *groupTail
	dir string
}

func newRunLive() runLive {
	return runLive{box: newInbox(), byName: map[string]*stream{}, wants: map[wanted]bool{}, calls: map[int]time.Time{}}
}

// liveGroup is the group tail and stream-name prefix of a logging
// container, nil when its output is polled: live_tail is off, the stream
// is in another region, or the task definition ARN gives no account.
func (r *run) liveGroup(c tdContainer) (*groupTail, string) {
	if !r.cfg.LiveTail || (c.LogRegion != "" && c.LogRegion != r.cl.logs.Options().Region) {
		return nil, ""
	}
	arn := groupARN(r.td.ARN, c.LogGroup)
	if arn == "" {
		return nil, ""
	}
	return r.cl.tails.group(arn, r.cfg.LiveTailSessions), c.LogPrefix + "/" + c.Name + "/"
}

// wantLive asks the group tails for the run's stream prefixes (once).
func (r *run) wantLive() {
	for _, c := range r.td.logged() {
		g, dir := r.liveGroup(c)
		if g == nil || r.live.wants[wanted{g, dir}] {
			continue
		}
		r.live.wants[wanted{g, dir}] = true
		g.want(dir)
	}
}

// awaitLive waits, before the first launch, until the sessions covering
// the run's prefixes started (at most liveStartWait, and not at all once a
// session was refused), so its tasks are live from their first line.
func (r *run) awaitLive(ctx context.Context) {
	r.wantLive()
	wait := time.NewTimer(liveStartWait)
	defer wait.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !r.liveReady() {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			return
		case <-tick.C:
		}
	}
}

// liveReady reports whether every wanted prefix is covered or its session
// is refused for now.
func (r *run) liveReady() bool {
	for w := range r.live.wants {
		covered, refused := w.g.state(w.dir)
		if !covered && !refused {
			return false
		}
	}
	return true
}

// launching notes that task i's launch begins now.
func (r *run) launching(i int) { r.live.calls[i] = time.Now() }

// followLive subscribes task i's streams. A stream with nothing copied yet
// whose prefix was covered since before its launch began is live.
func (r *run) followLive(i int) {
	r.wantLive()
	t := &r.h.Tasks[i]
	call, called := r.live.calls[i]
	for _, s := range r.tasks[i].streams {
		g, _ := r.liveGroup(r.td.logged()[s.cursor])
		if g == nil {
			continue
		}
		cur := t.Logs[s.cursor]
		fresh := called && cur == (LogCursor{})
		s.tail = g
		s.live = g.subscribe(s.name, call, fresh, r.live.box)
		r.live.byName[s.name] = s
	}
}

// unfollowLive ends following task i's streams (before it is tracked
// again for a relaunch).
func (r *run) unfollowLive(i int) {
	for _, s := range r.tasks[i].streams {
		if s.tail != nil {
			s.tail.unsubscribe(s.name)
			delete(r.live.byName, s.name)
		}
	}
}

// closeLive drops everything the run follows.
func (r *run) closeLive() {
	for name, s := range r.live.byName {
		s.tail.unsubscribe(name)
	}
	for w := range r.live.wants {
		w.g.unwant(w.dir)
	}
	r.live.wants = map[wanted]bool{}
}

// onLive copies the lines the live tail delivered and takes its gaps.
func (r *run) onLive() {
	for _, n := range r.live.box.take() {
		s := r.live.byName[n.stream]
		if s == nil || !s.live || s.done {
			continue
		}
		if n.gap != "" {
			r.endLive(s, n.gap)
			continue
		}
		t := &r.h.Tasks[s.task]
		if err := r.writeEvents(t, s, n.events); err != nil {
			r.failWrite(s, err)
			return
		}
		cur := &t.Logs[s.cursor]
		cur.Live += len(n.events)
		cur.Last = *n.events[len(n.events)-1].Timestamp
		r.dirty = true
	}
}

// endLive reads the stream with GetLogEvents from now on, from its cursor.
func (r *run) endLive(s *stream, why string) {
	s.live = false
	s.tail.unsubscribe(s.name)
	r.p.log.Info("log stream read with GetLogEvents from now on", "job", r.job.ID, "stream", s.name, "why", why)
}

// liveSettled ends a stopped task's live streams once their session sent
// an update a second past log_settle after the stop: CloudWatch had
// delivered every line by then. A stream whose session went quiet past
// liveStall is read with GetLogEvents instead.
func (r *run) liveSettled(tr *taskRun, now time.Time) {
	due := tr.stoppedAt.Add(r.cfg.LogSettle + time.Second)
	if tr.stoppedAt.IsZero() || now.Before(due) {
		return
	}
	var ready []*stream
	for _, s := range tr.streams {
		if s.live && !s.done && s.tail.updatedAfter(s.name, due) {
			ready = append(ready, s)
		}
	}
	r.onLive() // the lines of those updates are in the inbox already
	for _, s := range ready {
		if s.live {
			s.done = true
			s.tail.unsubscribe(s.name)
		}
	}
	for _, s := range tr.streams {
		if s.live && !s.done && now.Sub(due) > liveStall {
			r.endLive(s, "no live tail update after the task stopped")
		}
	}
}

// liveWake is when the run must look at its stopped live streams next
// (zero: none).
func (r *run) liveWake(now time.Time) time.Time {
	var wake time.Time
	for i := range r.tasks {
		tr := &r.tasks[i]
		if tr.stoppedAt.IsZero() || !anyLive(tr.streams) {
			continue
		}
		due := tr.stoppedAt.Add(r.cfg.LogSettle + time.Second)
		if !due.After(now) {
			due = now.Add(liveTick)
		}
		wake = earliest(wake, due)
	}
	return wake
}

func anyLive(streams []*stream) bool {
	for _, s := range streams {
		if s.live && !s.done {
			return true
		}
	}
	return false
}
