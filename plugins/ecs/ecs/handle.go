package ecs

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// handleVersion is bumped on an incompatible change to Handle. Version 1
// handles (every name spelled out, log streams by name) are still read, so
// a rollout can resume what the previous version launched.
const handleVersion = 2

// Handle is the checkpointed state of a job's ECS tasks. It is checkpointed
// before each RunTask (with the launch's attempt and try, from which the
// client token is derived), right after it (with the task), when a task
// settles, and with the output copied since the last one.
//
// It is kept compact because a job may have 1,000 tasks and is checkpointed
// while they run. What can be derived is not stored (startedBy and client
// tokens from the job ID, stream names from the task definition and task
// ID), task ARNs share one prefix, and a settled task keeps only its
// outcome.
type Handle struct {
	Version int `json:"v"`
	// Job is the job's startedBy stem ("tether-" + hash of the job ID), so
	// a handle is never taken for another job's.
	Job               string `json:"j"`
	JobAttempt        int    `json:"a"`
	Cluster           string `json:"c"`
	TaskDefinitionARN string `json:"td,omitempty"`
	// ARNPrefix is what every task ARN of the job starts with
	// ("arn:aws:ecs:<region>:<account>:task/<cluster>/"). Tasks store the rest.
	ARNPrefix string `json:"ap,omitempty"`
	StartedAt int64  `json:"t0,omitempty"` // unix seconds of the first launch; the timeout counts from here across agents
	// Unsent is the launch frontier of Execute's first pass: the task
	// indexes from Unsent up were never sent to RunTask, though their
	// first launch is recorded. Each is checkpointed here before its
	// RunTask is sent. 0 means unknown (a handle without it): any index
	// may have been sent.
	Unsent int         `json:"f,omitempty"`
	Tasks  []TaskState `json:"t"`
}

// TaskState is one task index of the job.
type TaskState struct {
	Attempts int `json:"n,omitempty"` // launches begun that count against max_fail_count
	Infra    int `json:"i,omitempty"` // relaunches after an infrastructure stop
	Try      int `json:"r,omitempty"` // RunTask tries of the current launch refused for capacity (each its own client token)
	// ID is the current launch's task: the ARN without the handle's prefix.
	ID         string `json:"id,omitempty"`
	LaunchedAt int64  `json:"lt,omitempty"` // unix milliseconds the current launch's RunTask was first issued
	Seen       bool   `json:"s,omitempty"`  // DescribeTasks has reported the task (it is past the consistency window)
	// Prev are the tasks of earlier launches, so a resume never adopts one.
	Prev    []string         `json:"p,omitempty"`
	Logs    []LogCursor      `json:"l,omitempty"` // per awslogs container of the task definition, in its order
	Outcome string           `json:"o,omitempty"` // "", succeeded, failed, infra (stopped by the infrastructure)
	Reason  string           `json:"why,omitempty"`
	Exit    map[string]int32 `json:"x,omitempty"` // exit codes, kept once settled
}

// begun reports whether a launch of the task index was ever begun.
func (t TaskState) begun() bool { return t.Attempts > 0 || t.Infra > 0 }

// LogCursor is how far one container's awslogs stream has been copied to
// the job's output: the nextForwardToken after the last event read, the
// number of events after it the live tail copied already (a read from the
// token skips them), and the last event's timestamp (to start again by
// time if the token expired).
type LogCursor struct {
	Token string `json:"k,omitempty"`
	Live  int    `json:"n,omitempty"`
	Last  int64  `json:"ts,omitempty"` // milliseconds
}

// arn is task index i's current task ARN ("" before its RunTask answered).
func (h *Handle) arn(i int) string { return h.taskARN(&h.Tasks[i]) }

func (h *Handle) taskARN(t *TaskState) string { return h.expand(t.ID) }

// expand is the ARN of a stored task: id itself when it is "" or a whole
// ARN, else the handle's prefix and id.
func (h *Handle) expand(id string) string {
	if id == "" || strings.HasPrefix(id, "arn:") {
		return id
	}
	return h.ARNPrefix + id
}

// setARN stores arn as t's task, sharing the handle's prefix when it fits.
// The prefix is the first ARN's up to its last '/' ("" without one).
func (h *Handle) setARN(t *TaskState, arn string) {
	if h.ARNPrefix == "" {
		h.ARNPrefix = arn[:strings.LastIndexByte(arn, '/')+1]
	}
	t.ID = h.shorten(arn)
}

func (h *Handle) shorten(arn string) string { return strings.TrimPrefix(arn, h.ARNPrefix) }

func (h *Handle) prevARNs(t *TaskState) []string {
	out := make([]string, 0, len(t.Prev))
	for _, p := range t.Prev {
		out = append(out, h.expand(p))
	}
	return out
}

func (h *Handle) encode() ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding handle: %w", err)
	}
	return b, nil
}

func decodeHandle(b []byte) (*Handle, error) {
	var v struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decoding handle: %w", err)
	}
	switch v.V {
	case 1:
		return decodeHandleV1(b)
	case handleVersion:
	default:
		return nil, fmt.Errorf("decoding handle: version %d, this plugin reads versions 1 and %d", v.V, handleVersion)
	}
	var h Handle
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decoding handle: %w", err)
	}
	return &h, nil
}

// handleV1 is the handle plugin 0.1 wrote.
type handleV1 struct {
	JobAttempt        int       `json:"job_attempt"`
	Cluster           string    `json:"cluster"`
	TaskDefinitionARN string    `json:"task_definition_arn"`
	StartedAt         time.Time `json:"started_at"`
	Tasks             []struct {
		Index        int              `json:"index"`
		StartedBy    string           `json:"started_by"`
		Attempts     int              `json:"attempts"`
		TaskARN      string           `json:"task_arn"`
		PreviousARNs []string         `json:"previous_arns"`
		LastStatus   string           `json:"last_status"`
		ExitCodes    map[string]int32 `json:"exit_codes"`
		Logs         []struct {
			Token string `json:"token"`
		} `json:"logs"`
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
	} `json:"tasks"`
}

// decodeHandleV1 converts a version 1 handle. Its log streams were listed
// per awslogs container in task definition order, as version 2's are.
func decodeHandleV1(b []byte) (*Handle, error) {
	var o handleV1
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("decoding version 1 handle: %w", err)
	}
	h := &Handle{Version: handleVersion, JobAttempt: o.JobAttempt, Cluster: o.Cluster, TaskDefinitionARN: o.TaskDefinitionARN}
	if len(o.Tasks) > 0 {
		stem, _, ok := strings.Cut(o.Tasks[0].StartedBy, "-"+"0")
		if ok {
			h.Job = stem
		}
	}
	if !o.StartedAt.IsZero() {
		h.StartedAt = o.StartedAt.Unix()
	}
	for i, t := range o.Tasks {
		if t.Index != i {
			return nil, fmt.Errorf("decoding version 1 handle: task %d has index %d", i, t.Index)
		}
		s := TaskState{Attempts: t.Attempts, Outcome: t.Outcome, Reason: t.Reason, Exit: t.ExitCodes}
		if t.TaskARN != "" {
			h.setARN(&s, t.TaskARN)
			// Version 1 did not record launch times. The launch is at most as
			// old as the job's first one.
			s.LaunchedAt = h.StartedAt * 1000
			s.Seen = t.LastStatus != ""
		}
		for _, p := range t.PreviousARNs {
			s.Prev = append(s.Prev, h.shorten(p))
		}
		if s.Outcome == "" {
			for _, l := range t.Logs {
				s.Logs = append(s.Logs, LogCursor{Token: l.Token})
			}
		}
		h.Tasks = append(h.Tasks, s)
	}
	return h, nil
}

// newHandle is the state of a job none of whose tasks was launched yet.
func newHandle(jobID string, jobAttempt int, cluster string, taskCount int) *Handle {
	return &Handle{Version: handleVersion, Job: jobStem(jobID), JobAttempt: jobAttempt, Cluster: cluster, Tasks: make([]TaskState, taskCount)}
}
