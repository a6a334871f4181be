package emulator

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// TaskInfo is what the emulator holds about one task, read in-process. It is
// never rate-limited, fault-injected, counted or hidden by the consistency
// window, so a benchmark can check a run without spending the API budget it
// measures.
type TaskInfo struct {
	ARN, ID       string
	StartedBy     string
	LastStatus    string
	StopCode      string
	StoppedReason string
	// CreatedAt is RunTask's launch. ExecutionStoppedAt is when its
	// containers had all exited (DEPROVISIONING), StoppedAt when it was
	// STOPPED; each is zero until then.
	CreatedAt, StartedAt, ExecutionStoppedAt, StoppedAt time.Time
}

func (t *task) info() TaskInfo {
	return TaskInfo{
		ARN: t.arn, ID: t.id, StartedBy: t.startedBy, LastStatus: t.lastStatus,
		StopCode: t.stopCode, StoppedReason: t.stoppedReason,
		CreatedAt: t.createdAt, StartedAt: t.startedAt, ExecutionStoppedAt: t.executionStoppedAt, StoppedAt: t.stoppedAt,
	}
}

// Task returns the task with this ARN or ID, as long as retention keeps it.
func (e *Emulator) Task(ref string) (TaskInfo, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.liveTask(refID(ref), time.Now())
	if !ok {
		return TaskInfo{}, false
	}
	return t.info(), true
}

// Tasks returns every task retention keeps, in launch order.
func (e *Emulator) Tasks() []TaskInfo {
	e.mu.Lock()
	now := time.Now()
	ts := slices.DeleteFunc(slices.Collect(maps.Values(e.tasks)), func(t *task) bool { return e.expired(t, now) })
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]TaskInfo, len(ts))
	for i, t := range ts {
		out[i] = t.info()
	}
	e.mu.Unlock()
	return out
}
