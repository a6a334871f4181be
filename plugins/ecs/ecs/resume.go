package ecs

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// reattach loads the handle (or starts from nothing when there is none),
// finds each task index's current task, and launches only what was never
// launched. What happens to tasks with an ARN is left to watch: DescribeTasks
// reads their state, and a MISSING one without a stored outcome ends the job
// outcome_unknown.
func (r *run) reattach(ctx context.Context) error {
	if raw := r.rt.Handle(); len(raw) > 0 {
		h, err := decodeHandle(raw)
		if err != nil {
			return plugin.Errorf(plugin.OutcomeUnknown, "ecs: resuming job %s: %v", r.job.ID, err)
		}
		for i, t := range h.Tasks {
			if t.StartedBy != StartedBy(r.job.ID, i) {
				return plugin.Errorf(plugin.OutcomeUnknown, "ecs: resuming job %s: the stored handle's task %d was started by %q, not by this job", r.job.ID, i, t.StartedBy)
			}
		}
		r.h = h
	}
	if r.h != nil && r.h.JobAttempt != r.job.Attempt {
		// A handle of an earlier run of the job: its tasks are not this run's.
		r.stderrf("ignoring the handle of run %d of job %s; this is run %d", r.h.JobAttempt, r.job.ID, r.job.Attempt)
		r.h = nil
	}
	if r.h == nil {
		r.h = newHandle(r.job.ID, r.job.Attempt, r.cfg.Cluster, r.cfg.TaskCount)
	}
	// The tasks are where they were launched, whatever the config says now.
	if r.h.Cluster == "" {
		r.h.Cluster = r.cfg.Cluster
	}
	r.cfg.Cluster = r.h.Cluster
	for i := len(r.h.Tasks); i < r.cfg.TaskCount; i++ {
		r.h.Tasks = append(r.h.Tasks, TaskState{Index: i, StartedBy: StartedBy(r.job.ID, i)})
	}
	var err error
	if r.h.TaskDefinitionARN == "" {
		r.td, err = resolveTaskDef(ctx, r.cl, r.cfg)
		r.h.TaskDefinitionARN = r.td.ARN
	} else {
		r.td, err = describeTaskDef(ctx, r.cl, r.h.TaskDefinitionARN)
	}
	if err != nil {
		return err
	}
	r.stderrf("resuming job %s: cluster %s, task definition %s, %d task(s)", r.job.ID, r.h.Cluster, r.h.TaskDefinitionARN, len(r.h.Tasks))

	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		if t.TaskARN != "" || t.Outcome != "" {
			continue
		}
		found, err := r.discover(ctx, t)
		if err != nil {
			return err
		}
		switch {
		case found:
		case t.Attempts == 0:
			// Never submitted.
			if err := r.launch(ctx, i, false); err != nil {
				return err
			}
		case time.Since(r.h.StartedAt) > clientTokenLife:
			return plugin.Errorf(plugin.OutcomeUnknown,
				"ecs: task %d of job %s: launch %d was begun more than %s ago and no task started by %s is left; its outcome is unknown",
				i, r.job.ID, t.Attempts, clientTokenLife, t.StartedBy)
		default:
			// A launch was begun but its task is nowhere: reissue it with the
			// same client token, so a RunTask that did get through is not
			// repeated.
			r.stderrf("task %d: reissuing launch %d", i, t.Attempts)
			if err := r.launch(ctx, i, true); err != nil {
				return err
			}
		}
	}
	if r.h.StartedAt.IsZero() {
		r.h.StartedAt = time.Now().UTC()
	}
	return r.checkpoint(ctx)
}

// discover looks for t's task by its startedBy (running, then stopped ones
// ECS still remembers), ignoring tasks of earlier attempts and of other runs
// of the job, and adopts the newest. The launch attempt count is raised to
// what was found, so max_fail_count holds across agents.
func (r *run) discover(ctx context.Context, t *TaskState) (bool, error) {
	var arns []string
	for _, st := range []types.DesiredStatus{types.DesiredStatusRunning, types.DesiredStatusStopped} {
		got, err := listTasks(ctx, r.cl, r.h.Cluster, t.StartedBy, st)
		if err != nil {
			return false, err
		}
		for _, a := range got {
			if !slices.Contains(arns, a) && !slices.Contains(t.PreviousARNs, a) {
				arns = append(arns, a)
			}
		}
	}
	if len(arns) == 0 {
		return false, nil
	}
	var tasks []types.Task
	for chunk := range slices.Chunk(arns, describeBatch) {
		out, err := r.cl.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{
			Cluster: aws.String(r.h.Cluster),
			Tasks:   chunk,
			Include: []types.TaskField{types.TaskFieldTags},
		})
		if err != nil {
			return false, classify("describing tasks started by "+t.StartedBy, err)
		}
		for _, task := range out.Tasks {
			if r.ours(task) {
				tasks = append(tasks, task)
			}
		}
	}
	if len(tasks) == 0 {
		return false, nil
	}
	slices.SortFunc(tasks, func(a, b types.Task) int {
		return aws.ToTime(b.CreatedAt).Compare(aws.ToTime(a.CreatedAt)) // newest first
	})
	newest := tasks[0]
	// The timeout counts from the first launch, when the handle lost it.
	if first := aws.ToTime(tasks[len(tasks)-1].CreatedAt); !first.IsZero() && (r.h.StartedAt.IsZero() || first.Before(r.h.StartedAt)) {
		r.h.StartedAt = first.UTC()
	}
	for _, old := range tasks[1:] {
		t.PreviousARNs = append(t.PreviousARNs, aws.ToString(old.TaskArn))
	}
	t.Attempts = max(t.Attempts, len(t.PreviousARNs)+1)
	if t.ClientToken == "" {
		t.ClientToken = ClientToken(r.job.ID, r.h.JobAttempt, t.Index, t.Attempts)
	}
	t.TaskARN = aws.ToString(newest.TaskArn)
	r.apply(t, newest)
	r.stderrf("task %d: adopted %s (%s), launch %d", t.Index, t.TaskARN, t.LastStatus, t.Attempts)
	return true, nil
}

// ours reports whether a task found by startedBy belongs to this run of the
// job. Tasks carry the job attempt as a tag; a task without tags (an
// endpoint that does not return them) is taken as ours.
func (r *run) ours(task types.Task) bool {
	for _, tag := range task.Tags {
		if aws.ToString(tag.Key) == tagJobAttempt {
			return aws.ToString(tag.Value) == strconv.Itoa(r.h.JobAttempt)
		}
	}
	return true
}
