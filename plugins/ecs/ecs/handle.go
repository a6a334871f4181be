package ecs

import (
	"encoding/json"
	"fmt"
	"time"
)

// handleVersion is bumped on an incompatible change to Handle.
const handleVersion = 1

// Handle is the checkpointed state of a job's ECS tasks. It is checkpointed
// before each RunTask (with the launch's attempt and client token), right
// after it (with the task ARN), and on every later change: status, log
// position, outcome.
type Handle struct {
	Version           int         `json:"v"`
	JobAttempt        int         `json:"job_attempt"`
	Cluster           string      `json:"cluster"`
	TaskDefinitionARN string      `json:"task_definition_arn,omitempty"`
	StartedAt         time.Time   `json:"started_at"` // first launch; timeout counts from here across agents
	Tasks             []TaskState `json:"tasks"`
}

// TaskState is one task index of the job.
type TaskState struct {
	Index       int    `json:"index"`
	StartedBy   string `json:"started_by"`
	Attempts    int    `json:"attempts"`               // launch attempts begun (RunTask issued or about to be)
	ClientToken string `json:"client_token,omitempty"` // of the latest attempt
	TaskARN     string `json:"task_arn,omitempty"`     // of the latest attempt, once known
	// PreviousARNs are the tasks of earlier attempts, so a resume never adopts
	// one of them as the current attempt.
	PreviousARNs  []string         `json:"previous_arns,omitempty"`
	LastStatus    string           `json:"last_status,omitempty"`
	ExitCodes     map[string]int32 `json:"exit_codes,omitempty"`
	StopCode      string           `json:"stop_code,omitempty"`
	StoppedReason string           `json:"stopped_reason,omitempty"`
	Logs          []LogCursor      `json:"logs,omitempty"`
	Outcome       string           `json:"outcome,omitempty"` // "", succeeded, failed
	Reason        string           `json:"reason,omitempty"`  // why it failed
}

// LogCursor is how far a container's awslogs stream has been copied to the
// job's output: the nextForwardToken after the last event written.
type LogCursor struct {
	Container string `json:"container"`
	Group     string `json:"group"`
	Stream    string `json:"stream"`
	Token     string `json:"token,omitempty"`
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
	for i, t := range h.Tasks {
		if t.Index != i {
			return nil, fmt.Errorf("decoding handle: task %d has index %d", i, t.Index)
		}
	}
	return &h, nil
}

// newHandle is the state of a job none of whose tasks was launched yet.
func newHandle(jobID string, jobAttempt int, cluster string, taskCount int) *Handle {
	h := &Handle{Version: handleVersion, JobAttempt: jobAttempt, Cluster: cluster}
	for i := range taskCount {
		h.Tasks = append(h.Tasks, TaskState{Index: i, StartedBy: StartedBy(jobID, i)})
	}
	return h
}
