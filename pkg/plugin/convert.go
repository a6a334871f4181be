package plugin

import (
	"cmp"

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

// jobFromPB reads j. A nil j is the zero Job (the getters are nil-safe).
func jobFromPB(j *pb.Job) *Job {
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

// resultFromPB reads r. A nil r is the zero Result.
func resultFromPB(r *pb.Result) *Result {
	return &Result{Output: nilIfEmpty(r.GetOutput()), Message: r.GetMessage()}
}

// classToPB is each class on the wire. ClassOf only returns these.
var classToPB = map[ErrorClass]pb.ErrorClass{
	Retriable:      pb.ErrorClass_ERROR_CLASS_RETRIABLE,
	Permanent:      pb.ErrorClass_ERROR_CLASS_PERMANENT,
	OutcomeUnknown: pb.ErrorClass_ERROR_CLASS_OUTCOME_UNKNOWN,
}

// classFromPB reads the wire's classes. Any other (unspecified, or newer
// than this SDK) is Permanent.
var classFromPB = map[pb.ErrorClass]ErrorClass{
	pb.ErrorClass_ERROR_CLASS_RETRIABLE:       Retriable,
	pb.ErrorClass_ERROR_CLASS_PERMANENT:       Permanent,
	pb.ErrorClass_ERROR_CLASS_OUTCOME_UNKNOWN: OutcomeUnknown,
}

// errToPB keeps err's class (Permanent when it has none) and message.
func errToPB(err error) *pb.Error {
	if err == nil {
		return nil
	}
	return &pb.Error{Class: classToPB[ClassOf(err)], Message: err.Error()}
}

// errFromPB returns nil for a nil e and otherwise an *Error.
func errFromPB(e *pb.Error) error {
	if e == nil {
		return nil
	}
	return &Error{Class: cmp.Or(classFromPB[e.GetClass()], Permanent), Message: e.GetMessage()}
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
