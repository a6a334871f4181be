package plugin

import (
	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

func jobToPB(j *Job) *pb.Job {
	if j == nil {
		return nil
	}
	return &pb.Job{
		Id:      j.ID,
		Command: j.Command,
		Attempt: int64(j.Attempt),
		Context: j.Context,
		Config:  j.Config,
	}
}

func jobFromPB(j *pb.Job) *Job {
	if j == nil {
		return &Job{}
	}
	return &Job{
		ID:      j.GetId(),
		Command: j.GetCommand(),
		Attempt: int(j.GetAttempt()),
		Context: nilIfEmpty(j.GetContext()),
		Config:  nilIfEmpty(j.GetConfig()),
	}
}

func resultToPB(r *Result) *pb.Result {
	if r == nil {
		return &pb.Result{}
	}
	return &pb.Result{Output: r.Output, Message: r.Message}
}

func resultFromPB(r *pb.Result) *Result {
	if r == nil {
		return &Result{}
	}
	return &Result{Output: nilIfEmpty(r.GetOutput()), Message: r.GetMessage()}
}

// errToPB keeps err's class (Permanent when it has none) and message.
func errToPB(err error) *pb.Error {
	if err == nil {
		return nil
	}
	var c pb.ErrorClass
	switch ClassOf(err) {
	case Retriable:
		c = pb.ErrorClass_ERROR_CLASS_RETRIABLE
	case OutcomeUnknown:
		c = pb.ErrorClass_ERROR_CLASS_OUTCOME_UNKNOWN
	default:
		c = pb.ErrorClass_ERROR_CLASS_PERMANENT
	}
	return &pb.Error{Class: c, Message: err.Error()}
}

// errFromPB returns nil for a nil e and otherwise an *Error.
func errFromPB(e *pb.Error) error {
	if e == nil {
		return nil
	}
	c := Permanent
	switch e.GetClass() {
	case pb.ErrorClass_ERROR_CLASS_RETRIABLE:
		c = Retriable
	case pb.ErrorClass_ERROR_CLASS_OUTCOME_UNKNOWN:
		c = OutcomeUnknown
	}
	return &Error{Class: c, Message: e.GetMessage()}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func resourcesToPB(rs []Resource) []*pb.Resource {
	out := make([]*pb.Resource, 0, len(rs))
	for _, r := range rs {
		out = append(out, &pb.Resource{Kind: r.Kind, Name: r.Name, Label: r.Label, Url: r.URL, Command: r.Command})
	}
	return out
}

func resourcesFromPB(rs []*pb.Resource) []Resource {
	out := make([]Resource, 0, len(rs))
	for _, r := range rs {
		out = append(out, Resource{Kind: r.GetKind(), Name: r.GetName(), Label: r.GetLabel(), URL: r.GetUrl(), Command: r.GetCommand()})
	}
	return out
}
