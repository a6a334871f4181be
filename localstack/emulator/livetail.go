package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go/eventstream"
)

// StartLiveTail limits, from the CloudWatch Logs API reference
// (StartLiveTail, LiveTailSessionUpdate) and its quotas page. localstack's
// README cites each.
const (
	liveTailOp         = "StartLiveTail"
	liveTailMaxGroups  = 10  // logGroupIdentifiers
	liveTailMaxFilters = 100 // logStreamNames, logStreamNamePrefixes
	liveTailMaxEvents  = 500 // events per sessionUpdate, sampled above
	// A client slower than the server: CloudWatch buffers up to 10 updates
	// or 5,000 events, then drops the oldest.
	liveTailQueueUpdates = 10
	liveTailQueueEvents  = 5000
	liveTailTick         = time.Second
	// DefaultLiveTailSessions is the concurrent sessions per account and
	// Region; DefaultLiveTailDuration how long one may stay open.
	DefaultLiveTailSessions = 15
	DefaultLiveTailDuration = 3 * time.Hour
)

// LiveTail are the live tail knobs. Zero fields take the defaults.
type LiveTail struct {
	// Sessions is the account's concurrent session limit.
	Sessions int `json:"sessions"`
	// Duration is when a session ends with SessionTimeoutException.
	Duration time.Duration `json:"duration"`
	// ErrorRate is the chance per second that a session ends with
	// SessionStreamingException.
	ErrorRate float64 `json:"errorRate"`
	// Refuse answers every StartLiveTail with this error code (HTTP 400),
	// e.g. AccessDeniedException for a caller without logs:StartLiveTail.
	Refuse string `json:"refuse"`
}

func (l LiveTail) sessions() int { return cmp0(l.Sessions, DefaultLiveTailSessions) }

func (l LiveTail) duration() time.Duration { return positiveOr(l.Duration, DefaultLiveTailDuration) }

func cmp0(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

type liveTailReq struct {
	LogGroupIdentifiers   []string `json:"logGroupIdentifiers"`
	LogStreamNames        []string `json:"logStreamNames"`
	LogStreamNamePrefixes []string `json:"logStreamNamePrefixes"`
	LogEventFilterPattern *string  `json:"logEventFilterPattern"`
}

// validate checks a request as the API reference states its members.
func (q liveTailReq) validate() *apiError {
	switch {
	case !inRange(len(q.LogGroupIdentifiers), 1, liveTailMaxGroups):
		return invalidParam("logGroupIdentifiers must hold 1-%d log group ARNs", liveTailMaxGroups)
	case q.LogStreamNames != nil && q.LogStreamNamePrefixes != nil:
		return invalidParam("logStreamNames and logStreamNamePrefixes cannot both be specified")
	case (q.LogStreamNames != nil || q.LogStreamNamePrefixes != nil) && len(q.LogGroupIdentifiers) != 1:
		return invalidParam("logStreamNames or logStreamNamePrefixes need exactly one log group in logGroupIdentifiers")
	case q.LogStreamNames != nil && !inRange(len(q.LogStreamNames), 1, liveTailMaxFilters):
		return invalidParam("logStreamNames must hold 1-%d names", liveTailMaxFilters)
	case q.LogStreamNamePrefixes != nil && !inRange(len(q.LogStreamNamePrefixes), 1, liveTailMaxFilters):
		return invalidParam("logStreamNamePrefixes must hold 1-%d prefixes", liveTailMaxFilters)
	case q.LogEventFilterPattern != nil && *q.LogEventFilterPattern != "":
		return invalidParam("logEventFilterPattern is not modeled by the emulator")
	}
	for _, id := range q.LogGroupIdentifiers {
		if !strings.HasPrefix(id, "arn:") || !strings.Contains(id, ":log-group:") || strings.HasSuffix(id, "*") {
			return invalidParam("logGroupIdentifiers: %q is not a log group ARN (without a trailing *)", id)
		}
	}
	return nil
}

// liveSession is one open StartLiveTail stream.
type liveSession struct {
	req     liveTailReq
	groups  []string // names
	start   time.Time
	cursors map[*logStream]int

	mu     sync.Mutex
	queue  []queued
	events int
	notify chan struct{}
}

type liveUpdate struct {
	Metadata struct {
		Sampled bool `json:"sampled"`
	} `json:"sessionMetadata"`
	Results []liveEvent `json:"sessionResults"`
}

type liveEvent struct {
	Group         string `json:"logGroupIdentifier"`
	Stream        string `json:"logStreamName"`
	Message       string `json:"message"`
	Timestamp     int64  `json:"timestamp"`
	IngestionTime int64  `json:"ingestionTime"`
}

// serveLiveTail answers StartLiveTail: refusals as JSON errors, else an
// event stream (application/vnd.amazon.eventstream) of initial-response,
// sessionStart, and a sessionUpdate every second until the session times
// out, fails, or the client goes.
func (e *Emulator) serveLiveTail(w http.ResponseWriter, r *http.Request, body []byte) {
	fault, ok := e.injectFault(r, "logs", liveTailOp)
	if !ok {
		return
	}
	if fault != nil {
		writeAPIError(w, fault)
		return
	}
	s, ae := e.openLiveTail(body)
	if ae != nil {
		writeAPIError(w, ae)
		return
	}
	defer e.closeLiveTail()
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.Header().Set("X-Amzn-RequestId", newID()[:32])
	w.WriteHeader(http.StatusOK)
	out := &liveWriter{w: w, enc: eventstream.NewEncoder()}
	out.event("initial-response", map[string]any{})
	out.event("sessionStart", map[string]any{
		"requestId": newID()[:32], "sessionId": newID(), "logGroupIdentifiers": s.req.LogGroupIdentifiers,
		"logStreamNames": s.req.LogStreamNames, "logStreamNamePrefixes": s.req.LogStreamNamePrefixes,
	})
	done := make(chan struct{})
	defer close(done)
	go e.tickLiveTail(r, s, done)
	out.drain(r, s, e.closing)
}

// openLiveTail validates a request and counts the session against the
// account's limit.
func (e *Emulator) openLiveTail(body []byte) (*liveSession, *apiError) {
	var req liveTailReq
	if err := decode(body, &req); err != nil {
		return nil, err.(*apiError)
	}
	if ae := req.validate(); ae != nil {
		return nil, ae
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &liveSession{req: req, start: time.Now(), cursors: map[*logStream]int{}, notify: make(chan struct{}, 1)}
	for _, id := range req.LogGroupIdentifiers {
		name := groupName("", id)
		if _, err := e.group(name); err != nil {
			return nil, err.(*apiError)
		}
		s.groups = append(s.groups, name)
	}
	if code := e.faults.LiveTail.Refuse; code != "" {
		return nil, errf(code, "StartLiveTail refused (emulator setting)")
	}
	if e.liveSessions >= e.faults.LiveTail.sessions() {
		return nil, errf("LimitExceededException", "You have reached the maximum number of concurrent Live Tail sessions (%d)", e.faults.LiveTail.sessions())
	}
	e.liveSessions++
	return s, nil
}

func (e *Emulator) closeLiveTail() {
	e.mu.Lock()
	e.liveSessions--
	e.mu.Unlock()
}

// LiveTailSessions is how many live tail sessions are open.
func (e *Emulator) LiveTailSessions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.liveSessions
}

// tickLiveTail queues a sessionUpdate every second, and the exception that
// ends the session when it times out or fails.
func (e *Emulator) tickLiveTail(r *http.Request, s *liveSession, done <-chan struct{}) {
	t := time.NewTicker(liveTailTick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-r.Context().Done():
			return
		case now := <-t.C:
			if end := e.liveTailEnd(s, now); end != "" {
				s.push(liveUpdate{}, end)
				return
			}
			s.push(e.liveUpdate(s, now), "")
		}
	}
}

// liveTailEnd is the exception that ends the session at now, if any.
func (e *Emulator) liveTailEnd(s *liveSession, now time.Time) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case now.Sub(s.start) >= e.faults.LiveTail.duration():
		return "SessionTimeoutException"
	case e.chance(e.faults.LiveTail.ErrorRate):
		return "SessionStreamingException"
	}
	return ""
}

// liveUpdate gathers the events that became visible since the last update, a
// sample of 500 when there are more.
func (e *Emulator) liveUpdate(s *liveSession, now time.Time) liveUpdate {
	e.mu.Lock()
	defer e.mu.Unlock()
	var u liveUpdate
	for i, name := range s.groups {
		g, ok := e.logs[name]
		if !ok {
			continue
		}
		for _, st := range s.streams(g) {
			u.Results = append(u.Results, s.fresh(st, s.req.LogGroupIdentifiers[i], now)...)
		}
	}
	u.Results = slices.Clip(u.Results)
	slices.SortStableFunc(u.Results, func(a, b liveEvent) int { return int(a.IngestionTime - b.IngestionTime) })
	if n := len(u.Results); n > liveTailMaxEvents {
		u.Metadata.Sampled = true
		keep := e.rng.Perm(n)[:liveTailMaxEvents]
		slices.Sort(keep)
		sample := make([]liveEvent, 0, liveTailMaxEvents)
		for _, k := range keep {
			sample = append(sample, u.Results[k])
		}
		u.Results = sample
	}
	return u
}

// streams are the group's streams the session's filter takes.
func (s *liveSession) streams(g *logGroup) []*logStream {
	var out []*logStream
	if s.req.LogStreamNames != nil {
		for _, n := range s.req.LogStreamNames {
			if st, ok := g.streams[n]; ok {
				out = append(out, st)
			}
		}
		return out
	}
	for _, st := range g.streams {
		if s.req.LogStreamNamePrefixes == nil || slices.ContainsFunc(s.req.LogStreamNamePrefixes, func(p string) bool { return strings.HasPrefix(st.name, p) }) {
			out = append(out, st)
		}
	}
	return out
}

// fresh returns a stream's events that became visible since the session
// last looked: those ingested after the session started, never earlier.
func (s *liveSession) fresh(st *logStream, group string, now time.Time) []liveEvent {
	from, ok := s.cursors[st]
	if !ok {
		from = sort.Search(len(st.events), func(i int) bool { return st.events[i].visible.After(s.start) })
	}
	to := max(from, st.visibleEvents(now))
	s.cursors[st] = to
	out := make([]liveEvent, 0, to-from)
	for _, ev := range st.events[from:to] {
		out = append(out, liveEvent{Group: group, Stream: st.name, Message: ev.msg, Timestamp: ev.ts, IngestionTime: ev.ingestion})
	}
	return out
}

// queued is an update for the writer, or the exception (end) that ends
// the session.
type queued struct {
	u   liveUpdate
	end string
}

// push queues an update (or the exception named end) for the writer,
// dropping the oldest updates past 10 queued or 5,000 events.
func (s *liveSession) push(u liveUpdate, end string) {
	s.mu.Lock()
	s.queue = append(s.queue, queued{u, end})
	s.events += len(u.Results)
	for len(s.queue) > 1 && (len(s.queue) > liveTailQueueUpdates || s.events > liveTailQueueEvents) {
		s.events -= len(s.queue[0].u.Results)
		s.queue = s.queue[1:]
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// pop takes the oldest queued update.
func (s *liveSession) pop() (queued, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return queued{}, false
	}
	q := s.queue[0]
	s.queue = s.queue[1:]
	s.events -= len(q.u.Results)
	return q, true
}

// liveWriter encodes event stream messages onto the response.
type liveWriter struct {
	w   http.ResponseWriter
	enc *eventstream.Encoder
	err error
}

// drain writes queued updates until the session ends.
func (o *liveWriter) drain(r *http.Request, s *liveSession, closing <-chan struct{}) {
	for o.err == nil {
		select {
		case <-r.Context().Done():
			return
		case <-closing:
			o.exception("SessionStreamingException", "the emulator is shutting down")
			return
		case <-s.notify:
		}
		for o.err == nil {
			q, ok := s.pop()
			if !ok {
				break
			}
			if q.end != "" {
				o.exception(q.end, "the Live Tail session ended")
				return
			}
			o.event("sessionUpdate", q.u)
		}
	}
}

func (o *liveWriter) event(typ string, v any) {
	o.write(typ, eventstream.EventMessageType, eventstream.EventTypeHeader, v)
}

func (o *liveWriter) exception(typ, msg string) {
	o.write(typ, eventstream.ExceptionMessageType, eventstream.ExceptionTypeHeader, map[string]string{"message": msg})
}

func (o *liveWriter) write(typ, msgType, typeHeader string, v any) {
	if o.err != nil {
		return
	}
	payload, err := json.Marshal(v)
	if err != nil {
		o.err = err
		return
	}
	var msg eventstream.Message
	msg.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(msgType))
	msg.Headers.Set(typeHeader, eventstream.StringValue(typ))
	msg.Headers.Set(eventstream.ContentTypeHeader, eventstream.StringValue("application/json"))
	msg.Payload = payload
	var buf bytes.Buffer
	if o.err = o.enc.Encode(&buf, msg); o.err != nil {
		return
	}
	if _, o.err = o.w.Write(buf.Bytes()); o.err == nil {
		http.NewResponseController(o.w).Flush()
	}
}

// SetLiveTail replaces the live tail knobs; open sessions take them at
// their next update.
func (e *Emulator) SetLiveTail(l LiveTail) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults.LiveTail = l
}
