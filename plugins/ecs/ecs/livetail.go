package ecs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// How running output is followed (see the README's Logs section).
//
// One live tail per plugin process and log group (groupTail) holds
// StartLiveTail sessions filtered by stream name prefix: the awslogs
// prefix and container of the jobs' streams (`<prefix>/<container>/`).
// A stream's name holds its task ID, known only once RunTask answered, so
// a session filtered by names would start after the task and miss its
// first lines; a prefix session started before the launch covers every
// stream of it from its first line. Lines of other agents' tasks under
// the same prefix are dropped here.
//
// A stream is live when a session covered its prefix since before its
// launch and nothing was lost since: its lines are copied as they come,
// counted in its cursor (LogCursor.Live), and it needs no GetLogEvents at
// all, not even at the end (one more update after log_settle past the stop
// is enough). Anything that may lose lines (a sampled update, a session
// that ends unplanned, a session that stalls) ends the stream's live
// state for good: it is read with GetLogEvents from its cursor, skipping
// the lines the live tail copied, as before.
const (
	// liveMaxPrefixes is StartLiveTail's limit on logStreamNamePrefixes.
	liveMaxPrefixes = 100
	// MaxLiveTailSessions bounds live_tail_sessions: the account's 15
	// concurrent sessions are shared by every agent (and by people).
	MaxLiveTailSessions = 5
	// liveRenewAfter replaces a session before CloudWatch ends it (3 h),
	// overlapping the two so no line is lost.
	liveRenewAfter = 2*time.Hour + 50*time.Minute
	// liveOverlap is how long a replaced session is kept after its
	// successor started: updates come every second.
	liveOverlap = 3 * time.Second
	// liveLinger keeps sessions nobody needs for a while (jobs come and
	// go; a session is billed by the minute).
	liveLinger = time.Minute
	liveTick   = 500 * time.Millisecond
	// liveRetryMin and liveRetryMax bound the back-off after a refused or
	// failed session.
	liveRetryMin = time.Second
	liveRetryMax = 5 * time.Minute
	// liveStartWait bounds how long a job waits for a session before its
	// first launch.
	liveStartWait = 5 * time.Second
	// liveStall ends a stopped task's live state when no update came this
	// long after it was due.
	liveStall = 15 * time.Second
	// Lines of streams nobody follows (yet) are held this long, this many
	// per stream, for a run about to subscribe.
	liveHoldFor = 30 * time.Second
	liveHoldMax = 1000
	// liveGoneFor remembers streams whose held lines expired, so a run
	// subscribing later is not taken as live.
	liveGoneFor = 10 * time.Minute
)

// liveNote is what a group tail hands a run about one stream: lines, or a
// gap (why the stream is no longer live).
type liveNote struct {
	stream string
	events []types.OutputLogEvent
	gap    string
}

// inbox collects notes for one run. A group tail never blocks on a run.
type inbox struct {
	mu    sync.Mutex
	notes []liveNote
	ready chan struct{}
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

func (b *inbox) put(n liveNote) {
	b.mu.Lock()
	b.notes = append(b.notes, n)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []liveNote {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.notes
	b.notes = nil
	return n
}

// tails are the group tails of one client (region and endpoint).
type tails struct {
	logs *cloudwatchlogs.Client
	log  *slog.Logger

	mu     sync.Mutex
	groups map[string]*groupTail // by log group ARN
}

// newTails makes the live tails of a client. StartLiveTail goes to the
// endpoint's host with "stream-" put before it; a set endpoint (LocalStack,
// the emulator) is taken as it is.
func newTails(logs *cloudwatchlogs.Client, endpointSet bool, log *slog.Logger) *tails {
	if endpointSet {
		logs = cloudwatchlogs.New(logs.Options(), func(o *cloudwatchlogs.Options) {
			o.APIOptions = append(o.APIOptions, noHostPrefix)
		})
	}
	return &tails{logs: logs, log: log, groups: map[string]*groupTail{}}
}

func noHostPrefix(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("NoHostPrefix",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(smithyhttp.DisableEndpointHostPrefix(ctx, true), in)
		}), middleware.Before)
}

// group is the process's tail of a log group. k (live_tail_sessions) is
// fixed by the first job that asks.
func (t *tails) group(arn string, k int) *groupTail {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.groups[arn]
	if g == nil {
		g = newGroupTail(t.logs, t.log, arn, k)
		t.groups[arn] = g
	}
	return g
}

// groupTail follows one log group for the whole process.
type groupTail struct {
	logs *cloudwatchlogs.Client
	log  *slog.Logger
	arn  string
	k    int // sessions (slots), each a share of the task IDs

	mu      sync.Mutex
	dirs    map[string]int // wanted stream-name prefixes, by how many runs want each
	slots   []*slot
	subs    map[string]*inbox    // by stream name
	held    map[string]*held     // lines of streams nobody follows yet
	gone    map[string]time.Time // streams whose held lines expired, when
	idle    time.Time            // since when no prefix is wanted
	running bool                 // the manager goroutine runs
	kick    chan struct{}
	noted   string // the last refusal logged
	sid     int
}

// slot is a set of prefixes one session at a time serves (two while one
// replaces the other).
type slot struct {
	prefixes []string
	since    map[string]time.Time // per prefix: covered without a gap since
	cur      *session
	next     *session // a successor starting
	dd       *dedupe  // while cur and next overlap
	last     time.Time
	retryAt  time.Time
	backoff  time.Duration
	refused  bool // the last StartLiveTail was refused
}

type session struct {
	id       int
	prefixes []string
	opened   time.Time
	started  time.Time // sessionStart received
	cancel   context.CancelFunc
	planned  bool // closed on purpose
}

// held are lines of a stream no run follows yet.
type held struct {
	first  time.Time
	events []types.OutputLogEvent
	lossy  bool
}

func newGroupTail(logs *cloudwatchlogs.Client, log *slog.Logger, arn string, k int) *groupTail {
	return &groupTail{logs: logs, log: log, arn: arn, k: max(1, k), dirs: map[string]int{},
		subs: map[string]*inbox{}, held: map[string]*held{}, gone: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// want adds a stream-name prefix for a run. It returns at once; the
// session covering it starts in the background.
func (g *groupTail) want(dir string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dirs[dir]++
	if g.dirs[dir] == 1 && !slices.ContainsFunc(g.slots, func(s *slot) bool { return slices.Contains(s.prefixes, dir) }) {
		g.slots = assignDir(g.slots, dir, g.k, liveMaxPrefixes)
	}
	g.idle = time.Time{}
	if !g.running {
		g.running = true
		go g.manage()
	}
	g.poke()
}

// unwant drops a run's prefix.
func (g *groupTail) unwant(dir string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dirs[dir]--; g.dirs[dir] <= 0 {
		delete(g.dirs, dir)
	}
	if len(g.dirs) == 0 {
		g.idle = time.Now()
	}
}

func (g *groupTail) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// hexDigits are the first characters of ECS task IDs (32 hex digits).
const hexDigits = "0123456789abcdef"

// assignDir adds a stream-name prefix to k slots (sessions). With k = 1
// the one slot takes it whole. With more, each slot takes the prefix
// followed by its share of the task ID's first hex digit, so each session
// carries about 1/k of the group's lines (a session sends 500 a second at
// most and samples above). A slot's earlier prefixes stay; the slot's
// session is replaced. A prefix that does not fit (100 per session) is not
// covered: its streams are polled.
func assignDir(slots []*slot, dir string, k, maxPer int) []*slot {
	for len(slots) < k {
		slots = append(slots, &slot{since: map[string]time.Time{}})
	}
	add := make([][]string, k)
	if k == 1 {
		add[0] = []string{dir}
	} else {
		for i, h := range hexDigits {
			add[i%k] = append(add[i%k], dir+string(h))
		}
	}
	for i, s := range slots {
		if len(s.prefixes)+len(add[i]) > maxPer {
			return slots
		}
	}
	for i, s := range slots {
		s.prefixes = append(slices.Clone(s.prefixes), add[i]...)
	}
	return slots
}

// coveredSince is since when the prefix of name has been covered without
// a gap (zero: not covered).
func (g *groupTail) coveredSince(name string) time.Time {
	for _, s := range g.slots {
		for p, t := range s.since {
			if strings.HasPrefix(name, p) {
				return t
			}
		}
	}
	return time.Time{}
}

// state reports whether dir is covered, or StartLiveTail refused (and is
// backing off), for a run waiting to launch. A session that broke after it
// started is started again at once, and is waited for.
func (g *groupTail) state(dir string) (covered, refused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	covered, found := true, false
	for _, s := range g.slots {
		for _, p := range s.prefixes {
			if !strings.HasPrefix(p, dir) {
				continue
			}
			found = true
			if s.since[p].IsZero() {
				covered = false
				refused = refused || (s.refused && s.cur == nil && s.next == nil && time.Now().Before(s.retryAt))
			}
		}
	}
	return found && covered, !found || refused
}

// subscribe follows stream name for a run. It reports whether the stream
// is live: nothing copied yet (fresh) and its prefix covered since before
// launch. Lines held for it go to the run's inbox.
func (g *groupTail) subscribe(name string, launch time.Time, fresh bool, box *inbox) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Lines held for a stream are kept liveHoldFor from their arrival; a
	// stream whose held lines expired is not live.
	since := g.coveredSince(name)
	_, expired := g.gone[name]
	live := fresh && !since.IsZero() && since.Before(launch) && !expired
	h := g.held[name]
	delete(g.held, name)
	if !live {
		return false
	}
	if h != nil && h.lossy {
		return false
	}
	g.subs[name] = box
	if h != nil && len(h.events) > 0 {
		box.put(liveNote{stream: name, events: h.events})
	}
	return true
}

func (g *groupTail) unsubscribe(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.subs, name)
}

// updatedAfter reports whether the session serving name delivered an
// update later than t (every line ingested before it is in).
func (g *groupTail) updatedAfter(name string, t time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.slotOf(name)
	return s != nil && s.last.After(t)
}

func (g *groupTail) slotOf(name string) *slot {
	for _, s := range g.slots {
		if slices.ContainsFunc(s.prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			return s
		}
	}
	return nil
}

// manage starts, replaces and ends the sessions until nobody wanted the
// group for liveLinger.
func (g *groupTail) manage() {
	t := time.NewTicker(liveTick)
	defer t.Stop()
	for {
		select {
		case <-g.kick:
		case <-t.C:
		}
		if g.reconcile(time.Now()) {
			return
		}
	}
}

// reconcile moves every slot toward one started session serving its
// prefixes. It reports true (and closes everything) once idle long enough.
func (g *groupTail) reconcile(now time.Time) (stop bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expireHeld(now)
	if !g.idle.IsZero() && now.Sub(g.idle) >= liveLinger {
		for _, s := range g.slots {
			s.close(s.cur)
			s.close(s.next)
		}
		g.slots, g.running = nil, false
		return true
	}
	for _, s := range g.slots {
		g.reconcileSlot(s, now)
	}
	return false
}

func (g *groupTail) reconcileSlot(s *slot, now time.Time) {
	switch {
	case s.next != nil && !s.next.started.IsZero() && s.cur == nil:
		s.cur, s.next = s.next, nil
	case s.next != nil && !s.next.started.IsZero() && now.Sub(s.next.started) >= liveOverlap:
		s.close(s.cur) // the successor has served long enough beside it
		s.cur, s.next, s.dd = s.next, nil, nil
	case s.next != nil || now.Before(s.retryAt):
	case s.cur == nil, !slices.Equal(s.cur.prefixes, s.prefixes), now.Sub(s.cur.opened) >= liveRenewAfter:
		s.next = g.open(s, now)
		if s.cur != nil {
			s.dd = newDedupe(s.cur.id, s.next.id)
		}
	}
}

func (s *slot) close(ss *session) {
	if ss != nil {
		ss.planned = true
		ss.cancel()
	}
}

// open starts a session for the slot's prefixes in the background.
func (g *groupTail) open(s *slot, now time.Time) *session {
	ctx, cancel := context.WithCancel(context.Background())
	g.sid++
	ss := &session{id: g.sid, prefixes: slices.Clone(s.prefixes), opened: now, cancel: cancel}
	go g.run(ctx, s, ss)
	return ss
}

// run reads one session until it ends.
func (g *groupTail) run(ctx context.Context, s *slot, ss *session) {
	defer ss.cancel()
	// A client of its own: the SDK's event stream decoder is one per client
	// and not safe for two streams at once (sessions overlap when one
	// replaces another), and the session holds its own connection.
	logs := cloudwatchlogs.New(g.logs.Options(), func(o *cloudwatchlogs.Options) {
		o.HTTPClient = ownBody{awshttp.NewBuildableClient()}
	})
	out, err := logs.StartLiveTail(ctx, &cloudwatchlogs.StartLiveTailInput{
		LogGroupIdentifiers:   []string{g.arn},
		LogStreamNamePrefixes: ss.prefixes,
	})
	if err != nil {
		g.ended(s, ss, err)
		return
	}
	es := out.GetStream()
	defer es.Close()
	for ev := range es.Events() {
		switch v := ev.(type) {
		case *types.StartLiveTailResponseStreamMemberSessionStart:
			g.started(s, ss)
		case *types.StartLiveTailResponseStreamMemberSessionUpdate:
			g.update(s, ss, v.Value)
		}
	}
	err = es.Err()
	if err == nil {
		err = fmt.Errorf("the stream ended")
	}
	g.ended(s, ss, err)
}

func (g *groupTail) started(s *slot, ss *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	ss.started = now
	for _, p := range ss.prefixes {
		if _, ok := s.since[p]; !ok {
			s.since[p] = now
		}
	}
	s.backoff, s.refused = 0, false
	g.poke()
}

// update hands an update's lines to the runs following their streams. A
// sampled update lost lines of streams it cannot name: every stream of
// the slot has a gap.
func (g *groupTail) update(s *slot, ss *session, u types.LiveTailSessionUpdate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u.SessionMetadata != nil && u.SessionMetadata.Sampled {
		// Lines of streams no run follows yet are lost too: coverage
		// starts again now.
		g.gap(s, "the live tail sampled its lines (over 500 a second)")
		now := time.Now()
		for p := range s.since {
			s.since[p] = now
		}
		return
	}
	byStream := map[string][]types.OutputLogEvent{}
	var order []string
	for _, ev := range u.SessionResults {
		name := aws.ToString(ev.LogStreamName)
		if s.dd != nil && !s.dd.accept(ss.id, name, ev) {
			continue // the overlapping session sent it already
		}
		if _, ok := byStream[name]; !ok {
			order = append(order, name)
		}
		byStream[name] = append(byStream[name], types.OutputLogEvent{Message: ev.Message, Timestamp: ev.Timestamp, IngestionTime: ev.IngestionTime})
	}
	now := time.Now()
	for _, name := range order {
		if box := g.subs[name]; box != nil {
			box.put(liveNote{stream: name, events: byStream[name]})
			continue
		}
		g.hold(name, byStream[name], now)
	}
	s.last = now
}

// hold keeps lines of a stream no run follows yet, for one about to.
func (g *groupTail) hold(name string, evs []types.OutputLogEvent, now time.Time) {
	h := g.held[name]
	if h == nil {
		h = &held{first: now}
		g.held[name] = h
	}
	if h.lossy || len(h.events)+len(evs) > liveHoldMax {
		h.lossy, h.events = true, nil
		return
	}
	h.events = append(h.events, evs...)
}

func (g *groupTail) expireHeld(now time.Time) {
	for name, h := range g.held {
		if now.Sub(h.first) > liveHoldFor {
			delete(g.held, name)
			g.gone[name] = now
		}
	}
	for name, at := range g.gone {
		if now.Sub(at) > liveGoneFor {
			delete(g.gone, name)
		}
	}
}

// ended takes a session's end. A planned one (replaced, renewed, idle)
// changes nothing. Any other is a gap for the streams the slot covered,
// and the slot starts a new session after a back-off.
func (g *groupTail) ended(s *slot, ss *session, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ss.planned {
		return
	}
	msg := err.Error()
	if code := errorCode(err); code != "" {
		msg = code + ": " + errorMessage(err) // without the request ID
	}
	why := "the live tail session ended: " + msg
	if ss.started.IsZero() {
		why = "StartLiveTail refused: " + msg
	}
	if why != g.noted {
		g.noted = why
		g.log.Warn("live tail: "+why+"; its streams are read with GetLogEvents meanwhile", "group", g.arn)
	}
	switch ss {
	case s.next:
		s.next, s.dd = nil, nil
		if s.cur != nil {
			return // the serving session goes on
		}
	case s.cur:
		s.cur, s.dd = s.next, nil
		if s.next != nil && !s.next.started.IsZero() {
			s.next = nil
			return // the successor serves without a gap
		}
		s.next = nil
		g.gap(s, why)
	default:
		return
	}
	s.refused = ss.started.IsZero()
	s.backoff = min(max(2*s.backoff, liveRetryMin), liveRetryMax)
	if errorCode(err) == "ResourceNotFoundException" {
		s.backoff = liveRetryMin // awslogs creates the group with the first task
	}
	s.retryAt = time.Now().Add(s.backoff)
	clear(s.since)
}

// gap ends the live state of every followed stream of the slot.
func (g *groupTail) gap(s *slot, why string) {
	for name, box := range g.subs {
		if g.slotOf(name) == s {
			box.put(liveNote{stream: name, gap: why})
			delete(g.subs, name)
		}
	}
	for name := range g.held {
		if g.slotOf(name) == s {
			g.held[name].lossy, g.held[name].events = true, nil
		}
	}
}

// dedupe drops the lines two overlapping sessions both send. Per line
// identity (stream, time, ingestion, message) it counts what each sent; a
// line passes when its session sent it more often than the other, so
// equal lines logged in the same millisecond still pass once each.
type dedupe struct {
	a, b   int
	counts map[lineKey]*[2]int
}

type lineKey struct {
	stream        string
	ts, ingestion int64
	msg           string
}

func newDedupe(a, b int) *dedupe { return &dedupe{a: a, b: b, counts: map[lineKey]*[2]int{}} }

func (d *dedupe) accept(id int, stream string, ev types.LiveTailSessionLogEvent) bool {
	side := 0
	if id == d.b {
		side = 1
	}
	k := lineKey{stream, aws.ToInt64(ev.Timestamp), aws.ToInt64(ev.IngestionTime), aws.ToString(ev.Message)}
	c := d.counts[k]
	if c == nil {
		c = &[2]int{}
		d.counts[k] = c
	}
	c[side]++
	return c[side] > c[1-side]
}

// groupARN is the ARN of a log group in the account and region of a task
// definition ARN (StartLiveTail takes ARNs only), "" when that is no ARN.
func groupARN(tdARN, group string) string {
	f := strings.SplitN(tdARN, ":", 6)
	if len(f) < 6 || f[0] != "arn" {
		return ""
	}
	return "arn:" + f[1] + ":logs:" + f[3] + ":" + f[4] + ":log-group:" + group
}

// ownBody hands the HTTP transport its own copy of a request's body.
// smithy-go closes the body it built as soon as the client's Do returns,
// while Go's transport may still read it once more (to find its end); that
// read fails, and the transport closes the connection, under a response
// still streaming. It ended live tail sessions at random just after
// sessionStart.
type ownBody struct{ c cloudwatchlogs.HTTPClient }

func (o ownBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	return o.c.Do(req)
}
