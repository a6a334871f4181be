package ecs

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// reattach finds each task index of the loaded handle's current task, and
// launches only what was never launched. Tasks with an ARN are left to
// watch. The poller reads their state, and one seen before and now MISSING
// ends the job outcome_unknown.
func (r *run) reattach(ctx context.Context) error {
	if err := r.loadTaskDef(ctx); err != nil {
		return err
	}
	r.stderrf("resuming job %s: cluster %s, task definition %s, %d task(s)", r.job.ID, r.h.Cluster, r.h.TaskDefinitionARN, len(r.h.Tasks))
	r.start()

	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		if t.ID != "" || t.Outcome != "" {
			continue
		}
		if err := r.resumeTask(ctx, i); err != nil {
			return err
		}
	}
	r.h.StartedAt = cmp.Or(r.h.StartedAt, time.Now().Unix())
	return r.checkpoint(ctx)
}

// loadHandle sets r.h from the stored handle of this run of the job, or to
// a new handle when there is none.
func (r *run) loadHandle() error {
	h, err := r.storedHandle()
	if err != nil {
		return err
	}
	if h == nil {
		h = newHandle(r.job.ID, r.job.Attempt, r.cfg.Cluster, r.cfg.TaskCount)
	}
	r.h, r.storedUnsent = h, h.Unsent
	// The tasks are where they were launched, whatever the config says now.
	r.h.Cluster = cmp.Or(r.h.Cluster, r.cfg.Cluster)
	// The task count is what was launched. Only a job none of whose tasks
	// was launched yet takes today's task_count. Its tasks hold no state.
	if !r.launchedAny() {
		r.h.Tasks = make([]TaskState, max(len(r.h.Tasks), r.cfg.TaskCount))
	}
	return nil
}

// storedHandle decodes the handle the host stored for the job. It returns
// nil when there is none or it is of an earlier run of the job.
func (r *run) storedHandle() (*Handle, error) {
	raw := r.rt.Handle()
	if len(raw) == 0 {
		return nil, nil
	}
	h, err := decodeHandle(raw)
	if err != nil {
		return nil, plugin.Errorf(plugin.OutcomeUnknown, "ecs: resuming job %s: %v", r.job.ID, err)
	}
	if h.Job != "" && h.Job != jobStem(r.job.ID) {
		return nil, plugin.Errorf(plugin.OutcomeUnknown, "ecs: resuming job %s: the stored handle's tasks were started by %s-*, not by this job", r.job.ID, h.Job)
	}
	if h.JobAttempt != r.job.Attempt {
		// A handle of an earlier run of the job. Its tasks are not this run's.
		r.stderrf("ignoring the handle of run %d of job %s; this is run %d", h.JobAttempt, r.job.ID, r.job.Attempt)
		return nil, nil
	}
	return h, nil
}

// loadTaskDef sets r.td. It is the revision the handle names, or the config's
// task definition resolved (and registered) when the handle names none.
func (r *run) loadTaskDef(ctx context.Context) error {
	var err error
	if r.h.TaskDefinitionARN == "" {
		r.td, err = resolveTaskDef(ctx, r.cl, r.cfg)
		r.h.TaskDefinitionARN = r.td.ARN
	} else {
		r.td, err = describeTaskDef(ctx, r.cl, r.h.TaskDefinitionARN)
	}
	return err
}

// resumeTask finds task index i's task, which the handle has no ARN of,
// and launches it if it was never launched or reissues a launch that was
// begun and never listed.
func (r *run) resumeTask(ctx context.Context, i int) error {
	t := &r.h.Tasks[i]
	if r.h.Unsent > 0 && i >= r.h.Unsent {
		// Execute recorded its launch and never sent the RunTask: nothing
		// can have run, however long ago that was.
		r.stderrf("task %d: launch %d was recorded but never sent; sending it", i, t.Attempts)
		return r.launch(ctx, i, unsentLaunch)
	}
	found, err := r.discover(ctx, i)
	if err != nil {
		return err
	}
	launchAge := time.Since(time.UnixMilli(t.LaunchedAt))
	switch {
	case found:
		r.track(i)
		return nil
	case !t.begun():
		// Never submitted.
		return r.launch(ctx, i, firstLaunch)
	case t.LaunchedAt == 0 || launchAge > r.cfg.StoppedTaskRetention:
		// Its task may have run and been purged. ECS keeps a stopped
		// task for about an hour, and what reissuing a client token
		// whose task was purged does is not documented (it might start
		// the work again). So it is not reissued.
		return plugin.Errorf(plugin.OutcomeUnknown,
			"ecs: task %d of job %s: launch %d was begun %s ago, longer than stopped_task_retention (%s), and no task started by %s is listed; its outcome is unknown",
			i, r.job.ID, t.Attempts, launchAge.Round(time.Second), r.cfg.StoppedTaskRetention, StartedBy(r.job.ID, i))
	}
	// A launch was begun but its task is not listed (ListTasks is
	// eventually consistent too). Reissue it with the same client
	// token, so a RunTask that did get through is not repeated.
	r.stderrf("task %d: reissuing launch %d", i, t.Attempts)
	return r.launch(ctx, i, reissue)
}

func (r *run) launchedAny() bool {
	return slices.ContainsFunc(r.h.Tasks, func(t TaskState) bool { return t.begun() || t.ID != "" })
}

// discover looks for task i's task by its startedBy (running, then stopped
// ones ECS still remembers), ignoring tasks of earlier launches and of other
// runs of the job, and adopts the newest.
func (r *run) discover(ctx context.Context, i int) (bool, error) {
	t := &r.h.Tasks[i]
	startedBy := StartedBy(r.job.ID, i)
	arns, err := r.listStartedBy(ctx, startedBy, r.h.prevARNs(t))
	if err != nil || len(arns) == 0 {
		return false, err
	}
	tasks, err := describeTagged(ctx, r.cl, r.h.Cluster, arns)
	if err != nil {
		return false, classify("describing tasks started by "+startedBy, err)
	}
	// Keep this attempt's tasks and untagged ones.
	tasks = slices.DeleteFunc(tasks, func(task types.Task) bool { return !slices.Contains([]int{r.h.JobAttempt, 0}, attemptTag(task)) })
	if len(tasks) == 0 {
		return false, nil
	}
	r.adopt(i, tasks)
	return true, nil
}

// listStartedBy lists the ARNs of a startedBy's running, then stopped,
// tasks, leaving out those in prev.
func (r *run) listStartedBy(ctx context.Context, startedBy string, prev []string) ([]string, error) {
	got, err := listTasks(ctx, r.cl, r.h.Cluster, startedBy, types.DesiredStatusRunning, types.DesiredStatusStopped)
	if err != nil {
		return nil, err
	}
	var arns []string
	for _, a := range got {
		if !slices.Contains(arns, a) && !slices.Contains(prev, a) {
			arns = append(arns, a)
		}
	}
	return arns, nil
}

// adopt makes the newest of tasks task index i's current task and the
// others its earlier launches. The launch count is raised to what was
// found, so max_fail_count holds across agents.
func (r *run) adopt(i int, tasks []types.Task) {
	t := &r.h.Tasks[i]
	slices.SortFunc(tasks, func(a, b types.Task) int {
		return aws.ToTime(b.CreatedAt).Compare(aws.ToTime(a.CreatedAt)) // newest first
	})
	newest := tasks[0]
	// The timeout counts from the first launch, when the handle lost it.
	if first := aws.ToTime(tasks[len(tasks)-1].CreatedAt); !first.IsZero() && (r.h.StartedAt == 0 || first.Unix() < r.h.StartedAt) {
		r.h.StartedAt = first.Unix()
	}
	for _, old := range tasks[1:] {
		t.Prev = append(t.Prev, r.h.shorten(aws.ToString(old.TaskArn)))
	}
	t.Attempts = max(t.Attempts, len(t.Prev)+1-t.Infra)
	r.h.setARN(t, aws.ToString(newest.TaskArn))
	t.Seen = true
	if created := aws.ToTime(newest.CreatedAt); !created.IsZero() {
		t.LaunchedAt = created.UnixMilli()
	}
	r.stderrf("task %d: adopted %s (%s), launch %d", i, aws.ToString(newest.TaskArn), aws.ToString(newest.LastStatus), t.Attempts)
}

// attemptTag is the job attempt a task was launched for (0 when the task
// carries no tags: an endpoint that does not return them).
func attemptTag(task types.Task) int {
	n, _ := strconv.Atoi(tagValue(task.Tags, tagJobAttempt))
	return n
}

// tagValue is the value of the tag key ("" when there is none).
func tagValue(tags []types.Tag, key string) string {
	for _, tag := range tags {
		if aws.ToString(tag.Key) == key {
			return aws.ToString(tag.Value)
		}
	}
	return ""
}

// describeTagged describes tasks with their tags, 100 per call.
func describeTagged(ctx context.Context, cl *clients, cluster string, arns []string) ([]types.Task, error) {
	var tasks []types.Task
	for chunk := range slices.Chunk(arns, describeBatch) {
		if err := cl.wait(ctx, apiDescribeTasks); err != nil {
			return nil, err
		}
		out, err := cl.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{
			Cluster: aws.String(cluster),
			Tasks:   chunk,
			Include: []types.TaskField{types.TaskFieldTags},
		})
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, out.Tasks...)
	}
	return tasks, nil
}

// listTasks lists a startedBy's tasks of the desired statuses given, in
// that order, every page.
//
// The ListTasks reference says of startedBy: "When you specify startedBy as
// the filter, it must be the only filter that you use." ECS answers a
// startedBy with desiredStatus all the same (moto, a second emulator,
// combines them too), and the listing by status is what finds a stopped
// task. So the combined request goes first. If ECS refuses it
// (InvalidParameterException naming startedBy), the client lists by
// startedBy alone from then on, once for all the statuses, and keeps the
// tasks of the wanted ones by describing them (DescribeTasks returns
// desiredStatus). A
// startedBy alone may list only RUNNING tasks (the default status filter):
// a stopped task then goes unseen, and Resume falls back on reissuing the
// launch under its client token.
func listTasks(ctx context.Context, cl *clients, cluster, startedBy string, statuses ...types.DesiredStatus) ([]string, error) {
	var arns []string
	for _, status := range statuses {
		if cl.startedByOnly.Load() {
			break
		}
		got, err := listPages(ctx, cl, &ecs.ListTasksInput{Cluster: aws.String(cluster), StartedBy: aws.String(startedBy), DesiredStatus: status})
		switch {
		case err == nil:
			arns = append(arns, got...)
			continue
		case !errorSays(err, "startedby", "InvalidParameterException"): // combining startedBy with another filter
			return nil, classify("listing "+string(status)+" tasks started by "+startedBy, err)
		}
		cl.startedByOnly.Store(true)
		cl.log.Warn("ECS refused ListTasks with startedBy and desiredStatus together: listing by startedBy alone from now on", "err", errorMessage(err))
	}
	if !cl.startedByOnly.Load() {
		return arns, nil
	}
	all, err := listPages(ctx, cl, &ecs.ListTasksInput{Cluster: aws.String(cluster), StartedBy: aws.String(startedBy)})
	if err != nil {
		return nil, classify("listing the tasks started by "+startedBy, err)
	}
	tasks, err := describeTagged(ctx, cl, cluster, all)
	if err != nil {
		return nil, classify("describing the tasks started by "+startedBy, err)
	}
	arns = nil
	for _, status := range statuses {
		for _, t := range tasks {
			if aws.ToString(t.DesiredStatus) == string(status) {
				arns = append(arns, aws.ToString(t.TaskArn))
			}
		}
	}
	return arns, nil
}

// listPages runs a ListTasks request through every page.
func listPages(ctx context.Context, cl *clients, in *ecs.ListTasksInput) ([]string, error) {
	var arns []string
	pages := ecs.NewListTasksPaginator(cl.ecs, in)
	for pages.HasMorePages() {
		if err := cl.wait(ctx, apiListTasks); err != nil {
			return nil, err
		}
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		arns = append(arns, out.TaskArns...)
	}
	return arns, nil
}
