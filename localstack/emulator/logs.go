package emulator

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type logEvent struct {
	ts        int64
	ingestion int64
	msg       string
	// visible is when GetLogEvents starts returning the event. It never
	// decreases along a stream, so the visible events are a prefix.
	visible time.Time
	// bytes counts the stream's message bytes up to this event.
	bytes int64
}

type logStream struct {
	name        string
	created     time.Time
	events      []logEvent
	lastVisible time.Time
	// bytes counts the message bytes of every event.
	bytes int64
	// hidden. An awslogs stream created under LogLag or LogStreamDelay
	// exists for readers only once its first event is visible.
	hidden bool
}

// visibleEvents is how many events readers see at now.
func (s *logStream) visibleEvents(now time.Time) int {
	return sort.Search(len(s.events), func(i int) bool { return s.events[i].visible.After(now) })
}

// exists reports whether readers see the stream at now.
func (s *logStream) exists(now time.Time) bool {
	return !s.hidden || s.visibleEvents(now) > 0
}

// add appends an event that becomes visible after a random delay in
// [0, LogLag], never before the stream's earlier events. e.mu must be held.
func (e *Emulator) add(s *logStream, ts int64, msg string, now time.Time) {
	if len(s.events) == 0 {
		s.lastVisible = now.Add(e.faults.LogStreamDelay) // the stream itself shows late
	}
	vis := now.Add(e.upTo(e.faults.LogLag))
	if vis.Before(s.lastVisible) {
		vis = s.lastVisible
	}
	s.lastVisible = vis
	s.bytes += int64(len(msg))
	s.events = append(s.events, logEvent{ts: ts, ingestion: vis.UnixMilli(), msg: msg, visible: vis, bytes: s.bytes})
}

type logGroup struct {
	name    string
	created time.Time
	streams map[string]*logStream
}

func (e *Emulator) logsOps() map[string]func([]byte) (any, error) {
	return map[string]func([]byte) (any, error){
		"CreateLogGroup":     op(e.createLogGroup),
		"CreateLogStream":    op(e.createLogStream),
		"PutLogEvents":       op(e.putLogEvents),
		"GetLogEvents":       op(e.getLogEvents),
		"DescribeLogStreams": op(e.describeLogStreams),
	}
}

func logGroupArn(name string) string {
	return "arn:aws:logs:" + region + ":" + account + ":log-group:" + name
}

// groupName accepts a name or, for logGroupIdentifier, an ARN.
func groupName(name, identifier string) string {
	if _, arnName, ok := strings.Cut(identifier, ":log-group:"); ok {
		identifier = strings.TrimSuffix(arnName, ":*")
	}
	return cmp.Or(name, identifier)
}

// ensureStream creates the group and stream if missing. awslogs in the
// emulator always behaves as if awslogs-create-group were true. A container
// without awslogs has no group, and nothing is created.
func (e *Emulator) ensureStream(group, stream string) {
	if group == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ensureStreamLocked(group, stream)
}

func (e *Emulator) ensureStreamLocked(group, stream string) *logStream {
	g, ok := e.logs[group]
	if !ok {
		g = &logGroup{name: group, created: time.Now(), streams: map[string]*logStream{}}
		e.logs[group] = g
	}
	s, ok := g.streams[stream]
	if !ok {
		s = &logStream{name: stream, created: time.Now(), hidden: e.faults.LogLag > 0 || e.faults.LogStreamDelay > 0}
		g.streams[stream] = s
	}
	return s
}

// appendEvent stores an awslogs line. A container without awslogs has no
// group, and its lines are dropped.
func (e *Emulator) appendEvent(group, stream, msg string, at time.Time) {
	if group == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.add(e.ensureStreamLocked(group, stream), at.UnixMilli(), msg, time.Now())
}

func (e *Emulator) createLogGroup(req struct {
	LogGroupName string `json:"logGroupName"`
}) (any, error) {
	if !inRange(len(req.LogGroupName), 1, 512) {
		return nil, invalidParam("logGroupName must be 1-512 characters")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.logs[req.LogGroupName]; ok {
		return nil, errf("ResourceAlreadyExistsException", "The specified log group already exists")
	}
	e.logs[req.LogGroupName] = &logGroup{name: req.LogGroupName, created: time.Now(), streams: map[string]*logStream{}}
	return map[string]any{}, nil
}

func (e *Emulator) group(name string) (*logGroup, error) {
	g, ok := e.logs[name]
	if !ok {
		return nil, errf("ResourceNotFoundException", "The specified log group does not exist.")
	}
	return g, nil
}

func (e *Emulator) stream(group, stream string) (*logStream, error) {
	g, err := e.group(group)
	if err != nil {
		return nil, err
	}
	s, ok := g.streams[stream]
	if !ok {
		return nil, errf("ResourceNotFoundException", "The specified log stream does not exist.")
	}
	return s, nil
}

func (e *Emulator) createLogStream(req struct {
	LogGroupName  string `json:"logGroupName"`
	LogStreamName string `json:"logStreamName"`
}) (any, error) {
	if !inRange(len(req.LogStreamName), 1, 512) || strings.ContainsAny(req.LogStreamName, ":*") {
		return nil, invalidParam("logStreamName must be 1-512 characters without ':' or '*'")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	g, err := e.group(req.LogGroupName)
	if err != nil {
		return nil, err
	}
	if _, ok := g.streams[req.LogStreamName]; ok {
		return nil, errf("ResourceAlreadyExistsException", "The specified log stream already exists")
	}
	g.streams[req.LogStreamName] = &logStream{name: req.LogStreamName, created: time.Now()}
	return map[string]any{}, nil
}

func (e *Emulator) putLogEvents(req struct {
	LogGroupName  string          `json:"logGroupName"`
	LogStreamName string          `json:"logStreamName"`
	LogEvents     []inputLogEvent `json:"logEvents"`
}) (any, error) {
	if !inRange(len(req.LogEvents), 1, 10000) {
		return nil, invalidParam("logEvents must hold 1-10000 events")
	}
	if !slices.IsSortedFunc(req.LogEvents, func(a, b inputLogEvent) int { return cmp.Compare(a.Timestamp, b.Timestamp) }) {
		return nil, invalidParam("Log events in a single PutLogEvents request must be in chronological order.")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.stream(req.LogGroupName, req.LogStreamName)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for _, ev := range req.LogEvents {
		e.add(s, ev.Timestamp, ev.Message, now)
	}
	return map[string]any{"nextSequenceToken": strconv.Itoa(len(s.events))}, nil
}

type inputLogEvent struct {
	Timestamp int64  `json:"timestamp"`
	Message   string `json:"message"`
}

type eventOut struct {
	Timestamp     int64  `json:"timestamp"`
	Message       string `json:"message"`
	IngestionTime int64  `json:"ingestionTime"`
}

// getLogEvents pages by event index. "f/<n>" reads forward from event n,
// "b/<n>" reads the events before n. At the end of the stream the forward
// token stays the same, as in CloudWatch Logs.
func (e *Emulator) getLogEvents(req struct {
	LogGroupName       string `json:"logGroupName"`
	LogGroupIdentifier string `json:"logGroupIdentifier"`
	LogStreamName      string `json:"logStreamName"`
	StartFromHead      bool   `json:"startFromHead"`
	NextToken          string `json:"nextToken"`
	Limit              *int   `json:"limit"`
	StartTime          *int64 `json:"startTime"`
	EndTime            *int64 `json:"endTime"`
}) (any, error) {
	limit, err := pageSize(req.Limit, 10000, "limit")
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.stream(groupName(req.LogGroupName, req.LogGroupIdentifier), req.LogStreamName)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if !s.exists(now) {
		return nil, errf("ResourceNotFoundException", "The specified log stream does not exist.")
	}
	lo, hi := s.window(now, req.StartTime, req.EndTime)
	start, end, err := eventRange(req.NextToken, req.StartFromHead, lo, hi, limit)
	if err != nil {
		return nil, err
	}
	if start < end && e.chance(e.faults.EmptyLogPageRate) {
		// A page with nothing in it mid-stream: the same position under a
		// new forward token, which eventRange reads past its second "/".
		e.emptyPages++
		return map[string]any{
			"events":            []eventOut{},
			"nextForwardToken":  "f/" + strconv.Itoa(start) + "/" + strconv.Itoa(e.emptyPages),
			"nextBackwardToken": "b/" + strconv.Itoa(start),
		}, nil
	}
	events := make([]eventOut, 0, end-start)
	for _, ev := range s.events[start:end] {
		events = append(events, eventOut{Timestamp: ev.ts, Message: ev.msg, IngestionTime: ev.ingestion})
	}
	return map[string]any{
		"events":            events,
		"nextForwardToken":  "f/" + strconv.Itoa(end),
		"nextBackwardToken": "b/" + strconv.Itoa(start),
	}, nil
}

// window is the index range of the events readers see at now: the visible
// prefix, narrowed by the time filters the tokens move through.
func (s *logStream) window(now time.Time, startTime, endTime *int64) (lo, hi int) {
	lo, hi = 0, s.visibleEvents(now)
	if startTime != nil {
		for lo < hi && s.events[lo].ts < *startTime {
			lo++
		}
	}
	if endTime != nil {
		for hi > lo && s.events[hi-1].ts >= *endTime {
			hi--
		}
	}
	return lo, hi
}

// eventRange is the page of events [start, end) of the window [lo, hi) a
// GetLogEvents reads: from its token, else the first or the last limit
// events.
func eventRange(token string, fromHead bool, lo, hi, limit int) (start, end int, err error) {
	switch {
	case token != "":
		// Without a "/", nStr is empty and fails to parse. What follows a
		// second "/" tells an empty page's token apart and is ignored.
		dir, rest, _ := strings.Cut(token, "/")
		nStr, _, _ := strings.Cut(rest, "/")
		n, err := strconv.Atoi(nStr)
		if err != nil || n < 0 || (dir != "f" && dir != "b") {
			return 0, 0, invalidParam("The specified nextToken is invalid.")
		}
		n = max(lo, min(n, hi))
		if dir == "f" {
			return n, min(n+limit, hi), nil
		}
		return max(lo, n-limit), n, nil
	case fromHead:
		return lo, min(lo+limit, hi), nil
	}
	return max(lo, hi-limit), hi, nil
}

type streamOut struct {
	LogStreamName       string `json:"logStreamName"`
	Arn                 string `json:"arn"`
	CreationTime        int64  `json:"creationTime"`
	FirstEventTimestamp *int64 `json:"firstEventTimestamp,omitempty"`
	LastEventTimestamp  *int64 `json:"lastEventTimestamp,omitempty"`
	LastIngestionTime   *int64 `json:"lastIngestionTime,omitempty"`
	StoredBytes         int64  `json:"storedBytes"`
}

// describe is the stream as DescribeLogStreams shows it at now.
func (s *logStream) describe(group string, now time.Time) streamOut {
	o := streamOut{LogStreamName: s.name, CreationTime: millis(s.created),
		Arn: logGroupArn(group) + ":log-stream:" + s.name}
	if n := s.visibleEvents(now); n > 0 {
		first, last, ing := s.events[0].ts, s.events[n-1].ts, s.events[n-1].ingestion
		o.FirstEventTimestamp, o.LastEventTimestamp, o.LastIngestionTime = &first, &last, &ing
		o.StoredBytes = s.events[n-1].bytes
	}
	return o
}

// compareStreams orders streams by name, or by last event time (name for a
// tie) when orderBy is LastEventTime. descending reverses it. Names are
// unique in a group, so no two streams compare equal.
func compareStreams(a, b streamOut, orderBy string, descending bool) int {
	c := strings.Compare(a.LogStreamName, b.LogStreamName)
	if orderBy == "LastEventTime" {
		c = cmp.Or(cmp.Compare(lastEventTime(a), lastEventTime(b)), c)
	}
	if descending {
		return -c
	}
	return c
}

func lastEventTime(o streamOut) int64 {
	if o.LastEventTimestamp == nil {
		return 0
	}
	return *o.LastEventTimestamp
}

func (e *Emulator) describeLogStreams(req struct {
	LogGroupName        string `json:"logGroupName"`
	LogGroupIdentifier  string `json:"logGroupIdentifier"`
	LogStreamNamePrefix string `json:"logStreamNamePrefix"`
	OrderBy             string `json:"orderBy"`
	Descending          bool   `json:"descending"`
	Limit               *int   `json:"limit"`
	NextToken           string `json:"nextToken"`
}) (any, error) {
	if req.OrderBy == "LastEventTime" && req.LogStreamNamePrefix != "" {
		return nil, invalidParam("Cannot order by LastEventTime with a logStreamNamePrefix.")
	}
	limit, err := pageSize(req.Limit, 50, "limit")
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	name := groupName(req.LogGroupName, req.LogGroupIdentifier)
	g, err := e.group(name)
	if err != nil {
		return nil, err
	}
	var list []streamOut
	now := time.Now()
	for _, s := range g.streams {
		if strings.HasPrefix(s.name, req.LogStreamNamePrefix) && s.exists(now) {
			list = append(list, s.describe(name, now))
		}
	}
	slices.SortFunc(list, func(a, b streamOut) int { return compareStreams(a, b, req.OrderBy, req.Descending) })
	page, next, err := paginate(list, req.NextToken, limit, "The specified nextToken is invalid.")
	if err != nil {
		return nil, err
	}
	// Fields in name order, as a map would marshal them.
	return struct {
		LogStreams []streamOut `json:"logStreams"`
		NextToken  string      `json:"nextToken,omitempty"`
	}{page, next}, nil
}

// LoggedEvent is one stored log event, for tests and benchmarks: its
// timestamp (when the container wrote it) and when readers see it.
type LoggedEvent struct {
	Timestamp time.Time
	Visible   time.Time
	Message   string
}

// LogEvents returns a stream's events, visible or not, nil when it does
// not exist.
func (e *Emulator) LogEvents(group, stream string) []LoggedEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.stream(group, stream)
	if err != nil {
		return nil
	}
	out := make([]LoggedEvent, 0, len(s.events))
	for _, ev := range s.events {
		out = append(out, LoggedEvent{Timestamp: time.UnixMilli(ev.ts), Visible: ev.visible, Message: ev.msg})
	}
	return out
}
