package sparkeks

import (
	"encoding/json"
	"fmt"
	"time"
)

// handleVersion is bumped on an incompatible change to Handle. Fields added
// since (ever_running, adopted_attempt) are optional. A version 1 handle
// without them reads as before.
const handleVersion = 1

// Outcomes stored in the handle once the job's end is known.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeUnknown   = "outcome_unknown"
)

// Handle is the checkpointed state of a job's SparkApplication. It is
// checkpointed right after the SparkApplication is created (or found and
// attached), on every state change, when the driver log position advances
// (at most once per poll) and when the outcome is known.
type Handle struct {
	Version            int          `json:"v"`
	JobAttempt         int          `json:"job_attempt"`
	Name               string       `json:"name"`
	Namespace          string       `json:"namespace"`
	UID                string       `json:"uid,omitempty"`
	Submitted          bool         `json:"submitted"`
	CreatedAt          time.Time    `json:"created_at"` // the timeout counts from here, across agents
	State              string       `json:"state,omitempty"`
	ErrorMessage       string       `json:"error_message,omitempty"`
	SparkApplicationID string       `json:"spark_application_id,omitempty"`
	DriverPod          string       `json:"driver_pod,omitempty"`
	Log                *LogPosition `json:"log,omitempty"`
	UnknownSince       *time.Time   `json:"unknown_since,omitempty"`
	// EverRunning means the application was seen past its startup (RUNNING or
	// later). startup_timeout no longer applies to it.
	EverRunning bool `json:"ever_running,omitempty"`
	// Interrupted says how the driver pod was seen stopped from outside
	// (deleted or evicted while it ran). The pod may be gone when the
	// operator reports the application FAILED, so it is kept here.
	Interrupted string `json:"interrupted,omitempty"`
	// AdoptedAttempt is set when this attempt follows an application an
	// earlier attempt created (it was running or done: a retry never
	// deletes such an application): that attempt's number.
	AdoptedAttempt int `json:"adopted_attempt,omitempty"`
	// UIDMismatch notes that the SparkApplication found by name on resume was
	// not the one this handle recorded (and which one that was).
	UIDMismatch string `json:"uid_mismatch,omitempty"`
	Outcome     string `json:"outcome,omitempty"` // succeeded, failed, outcome_unknown
	Message     string `json:"message,omitempty"` // why, for failed and outcome_unknown
	// Blind says Outcome (outcome_unknown) was decided by losing sight of
	// the application (the API server refused the plugin past auth_grace),
	// not by anything it did. A Resume looks again before it reports it.
	Blind bool `json:"blind,omitempty"`
}

// LogPosition is how far the driver's log has been copied. It holds the
// timestamp of the last line written and how many lines with exactly that
// timestamp were written.
type LogPosition struct {
	Time  time.Time `json:"time"`
	Lines int       `json:"lines"`
}

func (h *Handle) encode() ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding handle: %w", err)
	}
	return b, nil
}

func decodeHandle(b []byte) (*Handle, error) {
	var h Handle
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decoding handle: %w", err)
	}
	if h.Version != handleVersion {
		return nil, fmt.Errorf("decoding handle: version %d, this plugin reads version %d", h.Version, handleVersion)
	}
	return &h, nil
}
