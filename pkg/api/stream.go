package api

import "time"

// Event is one entry in a job's timeline.
type Event struct {
	ID         int64     `json:"id"`
	JobID      string    `json:"job_id"`
	At         time.Time `json:"at"`
	Kind       string    `json:"kind"`
	Agent      string    `json:"agent,omitempty"`
	Generation string    `json:"generation,omitempty"`
	Lease      int64     `json:"lease,omitempty"`
	Message    string    `json:"message,omitempty"`
}

// EventList is the answer of GET /api/v1/jobs/{id}/events.
type EventList struct {
	Events []Event `json:"events"`
}

// LogLine is one line of a format=jsonl log. Lines of one chunk share its
// seq.
type LogLine struct {
	Seq     int64     `json:"seq"`
	Attempt int       `json:"attempt"`
	Stream  string    `json:"stream"`
	Time    time.Time `json:"time"`
	Line    string    `json:"line"`
	Partial bool      `json:"partial"` // the line has no newline (yet)
}

// StreamEnd is the last record of a followed jsonl log or event stream. The
// job is finished and everything was sent.
type StreamEnd struct {
	End     bool      `json:"end"`
	Status  JobStatus `json:"status"`
	Attempt int       `json:"attempt"` // the job's last
}

// LogRecord is one record of a followed jsonl log as a reader decodes it: a
// LogLine, or the StreamEnd when End is set.
type LogRecord struct {
	LogLine
	End    bool      `json:"end"`
	Status JobStatus `json:"status"`
}

// EndRecord returns the StreamEnd r holds (End set).
func (r LogRecord) EndRecord() StreamEnd {
	return StreamEnd{End: r.End, Status: r.Status, Attempt: r.Attempt}
}

// EventRecord is one record of a followed event stream as a reader decodes
// it: an Event, or the StreamEnd when End is set.
type EventRecord struct {
	Event
	End     bool      `json:"end"`
	Status  JobStatus `json:"status"`
	Attempt int       `json:"attempt"`
}

// EndRecord returns the StreamEnd r holds (End set).
func (r EventRecord) EndRecord() StreamEnd {
	return StreamEnd{End: r.End, Status: r.Status, Attempt: r.Attempt}
}

// MaxLogTail is the most lines GET /api/v1/jobs/{id}/logs?tail= asks for.
const MaxLogTail = 100000
