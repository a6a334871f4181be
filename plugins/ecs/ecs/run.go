package ecs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// maxPollFailures is how many rounds in a row may refuse to describe a
	// job's tasks as a wrong request (AccessDenied, a deleted cluster)
	// before the job gives up watching. Throttling, 5xx and network errors
	// never end a job. Its timeout does.
	maxPollFailures = 10
	// checkpointEvery coalesces checkpoints of log positions. Output copied
	// from CloudWatch is held by the agent until the checkpoint that records
	// how far it was copied (so a resume copies on from there, exactly once),
	// so it becomes visible at most this late, and a 1,000-task job writes
	// its handle at most this often however fast its logs move.
	checkpointEvery = 2 * time.Second
	// stopTimeout bounds stopping an attempt's tasks when it ends with an
	// error. It runs detached from the job's context, which may be gone.
	stopTimeout = time.Minute
)

// Tags tether puts on every task it launches.
const (
	tagJobID      = "tether:job-id"
	tagJobAttempt = "tether:job-attempt"
	tagTaskIndex  = "tether:task-index"
	tagCommand    = "tether:command"
)

var tetherTagKeys = []string{tagJobID, tagJobAttempt, tagTaskIndex, tagCommand}

// run is one Execute or Resume of a job.
type run struct {
	p   *Plugin
	job *plugin.Job
	rt  plugin.Runtime
	cfg Config
	cl  *clients
	h   *Handle
	td  taskDef
	sub *watchSub

	tasks  []taskRun
	ticket *ticket // the run's one outstanding log read, if any
	tprio  int
	live   runLive // the live tails it follows (livetailrun.go)

	dirty bool // the handle changed since the last checkpoint
	// storedUnsent is Handle.Unsent as last checkpointed.
	storedUnsent int
	lastCkpt     time.Time
	pollFails    int
	// fatal is set when the agent refuses the job's checkpoints or output
	// (its lease is gone). Watching on could only repeat the failure, and
	// the tasks are left to whoever holds the job now.
	fatal error
	// end is set when the job's outcome is decided outside decide (a task
	// seen and then gone).
	end error
}

// taskRun is what a run knows about one task index beyond the handle.
type taskRun struct {
	stoppedAt time.Time   // when the poller first reported it STOPPED
	final     *types.Task // that description
	streams   []*stream
}

func (p *Plugin) newRun(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*run, error) {
	cfg, err := parseConfig(job.Config, job.Context)
	if err != nil {
		return nil, err
	}
	cl, err := p.clients.get(ctx, cfg.Region, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	cl.setRates(cfg.APIRates)
	return &run{p: p, job: job, rt: rt, cfg: cfg, cl: cl, live: newRunLive()}, nil
}

func (r *run) stderrf(format string, args ...any) {
	fmt.Fprintf(r.rt.Stderr(), "ecs: "+format+"\n", args...)
}

// start subscribes to the cluster's poller and builds the per-task state.
// The handle and task definition must be set.
func (r *run) start() {
	r.sub = r.cl.poller(r.h.Cluster).subscribe(r.cfg.PollInterval)
	r.tasks = make([]taskRun, len(r.h.Tasks))
	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		if t.ID != "" && t.Outcome == "" {
			r.track(i)
		}
	}
}

// close ends the run's subscription and log read, however it ended.
func (r *run) close() {
	if r.sub != nil {
		r.sub.close()
	}
	r.dropTicket()
	r.closeLive()
}

// track starts following task i's current launch. The poller describes it
// and its log streams are read from the handle's positions.
func (r *run) track(i int) {
	t := &r.h.Tasks[i]
	arn := r.h.taskARN(t)
	r.unfollowLive(i)
	r.tasks[i] = taskRun{}
	logged := r.td.logged()
	if len(t.Logs) != len(logged) {
		t.Logs = make([]LogCursor, len(logged))
	}
	for ci, c := range logged {
		// The streams live in the awslogs-region, else the tasks' region.
		// streamClient finds the client on the first read.
		r.tasks[i].streams = append(r.tasks[i].streams, &stream{
			task: i, cursor: ci, container: c.Name, group: c.LogGroup, region: cmp.Or(c.LogRegion, r.cfg.Region),
			name: c.LogPrefix + "/" + c.Name + "/" + taskID(arn),
		})
	}
	r.followLive(i)
	r.sub.watch(arn)
}

// checkpoint stores the handle (with the output written since the last
// one), even when ctx was just cancelled.
func (r *run) checkpoint(ctx context.Context) error {
	b, err := r.h.encode()
	if err != nil {
		return plugin.WithClass(plugin.OutcomeUnknown, err)
	}
	// No timeout of our own. The host holds a checkpoint while its database
	// is away and answers once it is stored, or when it stops the job (its
	// self-fence). Giving up sooner would fail a healthy job.
	if err := r.rt.Checkpoint(context.WithoutCancel(ctx), b); err != nil {
		// The tasks run on. A later Resume finds them by the handle it has.
		r.fatal = plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: checkpointing job %s: %w", r.job.ID, err))
		return r.fatal
	}
	r.dirty, r.lastCkpt, r.storedUnsent = false, time.Now(), r.h.Unsent
	return nil
}

// flush checkpoints a changed handle now (force) or when checkpointEvery
// has passed since the last checkpoint.
func (r *run) flush(ctx context.Context, force bool) error {
	if !r.dirty || (!force && time.Since(r.lastCkpt) < checkpointEvery) {
		return nil
	}
	return r.checkpoint(ctx)
}

// watch follows the tasks until every one succeeded, one failed past its
// budgets, the timeout passed, or ctx ended. On ctx's end the tasks are
// left running. The agent decides (Cleanup on a cancel; another agent's
// Resume on a handoff).
func (r *run) watch(ctx context.Context) (*plugin.Result, error) {
	// Execute and reattach set StartedAt before watching.
	var deadline time.Time
	if r.cfg.Timeout > 0 {
		deadline = time.Unix(r.h.StartedAt, 0).Add(r.cfg.Timeout)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		if err := r.ended(ctx, deadline, now); err != nil {
			return nil, err
		}
		if done, res, err := r.decide(ctx); done {
			return res, err
		}
		if err := r.flush(ctx, false); err != nil {
			return nil, err
		}
		// Since Go 1.23 Reset also drops a tick not received.
		timer.Reset(r.nextWait(now, deadline))
		select {
		case <-ctx.Done():
			return nil, r.ctxErr(ctx.Err())
		case <-r.sub.ready:
			r.onRound()
		case <-r.ticketReady():
			r.ticket = nil
			r.readLog(ctx)
		case <-r.live.box.ready:
			r.onLive()
		case <-timer.C:
		}
	}
}

// ended returns why watching is over before anything is decided: ctx's
// end, a refused write, a task gone, or the timeout. It returns nil while
// watching goes on.
func (r *run) ended(ctx context.Context, deadline, now time.Time) error {
	switch {
	case ctx.Err() != nil:
		return r.ctxErr(ctx.Err())
	case r.fatal != nil:
		return r.fatal
	case r.end != nil:
		return r.end
	case !deadline.IsZero() && !now.Before(deadline):
		return r.timedOut(ctx)
	}
	return nil
}

// nextWait is how long watch may sleep when nothing arrives. It is until the
// next log read is due, a coalesced checkpoint is due, or the deadline.
func (r *run) nextWait(now, deadline time.Time) time.Duration {
	wake := r.planLogs(now)
	if r.dirty {
		wake = earliest(wake, r.lastCkpt.Add(checkpointEvery))
	}
	wake = earliest(wake, deadline)
	wake = earliest(wake, r.liveWake(now))
	if wake.IsZero() {
		return time.Hour
	}
	return max(time.Until(wake), time.Millisecond)
}

// ticketReady is the channel closed when the run's log read may be made.
// nil, which never fires, when it has no ticket.
func (r *run) ticketReady() <-chan struct{} {
	if r.ticket == nil {
		return nil
	}
	return r.ticket.ready
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

func (r *run) ctxErr(err error) error {
	return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: watching the tasks of job %s: %w", r.job.ID, err))
}

// onRound takes what the poller said about the job's tasks.
func (r *run) onRound() {
	got, err := r.sub.take()
	if err != nil && len(got) == 0 {
		r.pollFailed(err)
		return
	}
	r.pollFails = 0
	now := time.Now()
	// Only watched tasks are in got, and a task seen stopped is unwatched.
	for i := range r.h.Tasks {
		if v, ok := got[r.h.arn(i)]; ok && r.tasks[i].stoppedAt.IsZero() {
			r.onSeen(i, v, now)
		}
	}
}

// pollFailed counts a round that described none of the job's tasks. Only
// refusals count, and maxPollFailures of them in a row end the job.
func (r *run) pollFailed(err error) {
	if plugin.ClassOf(err) != plugin.Permanent {
		return
	}
	r.pollFails++
	if r.pollFails >= maxPollFailures {
		r.end = plugin.Errorf(plugin.OutcomeUnknown, "ecs: lost track of the tasks of job %s after %d refused polls: %v", r.job.ID, r.pollFails, err)
	}
}

// onSeen takes what a round said about task i: missing, running, or
// stopped (then it is no longer watched).
func (r *run) onSeen(i int, v seen, now time.Time) {
	t := &r.h.Tasks[i]
	if v.missing {
		r.onMissing(i, now)
		return
	}
	if !t.Seen {
		t.Seen, r.dirty = true, true
	}
	if taskEnded(v.task) {
		task := v.task
		r.tasks[i].stoppedAt, r.tasks[i].final = now, &task
		r.sub.unwatch(r.h.taskARN(t))
	}
}

// onMissing handles DescribeTasks answering MISSING for task i. ECS is
// eventually consistent. A task RunTask just started may be MISSING for a
// while (the RunTask API reference says to retry DescribeTasks with a
// backoff from a couple of seconds up to five minutes), so a task never
// seen is waited for until consistency_window after its launch. A task
// seen and then MISSING stopped and was purged (ECS keeps stopped tasks
// about an hour) without anyone reading how it ended.
// https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_RunTask.html
func (r *run) onMissing(i int, now time.Time) {
	t := &r.h.Tasks[i]
	age := now.Sub(time.UnixMilli(t.LaunchedAt))
	switch {
	case t.Seen:
		r.end = plugin.Errorf(plugin.OutcomeUnknown,
			"ecs: task %d of job %s (%s) is gone from ECS and how it ended was never recorded", i, r.job.ID, r.h.taskARN(t))
	case t.LaunchedAt > 0 && age > r.cfg.ConsistencyWindow:
		r.end = plugin.Errorf(plugin.OutcomeUnknown,
			"ecs: task %d of job %s (%s) was never visible in DescribeTasks in the %s after its launch", i, r.job.ID, r.h.taskARN(t), r.cfg.ConsistencyWindow)
	}
}

// decide settles stopped tasks whose logs are in, relaunches failed tasks
// that have budget left, and ends the job when every task succeeded or one
// failed for good.
func (r *run) decide(ctx context.Context) (bool, *plugin.Result, error) {
	r.settleDrained(time.Now())
	all := true
	for i := range r.h.Tasks {
		succeeded, err := r.relaunchOrFail(ctx, i)
		if err != nil {
			return true, nil, err
		}
		all = all && succeeded
	}
	if !all {
		return false, nil, nil
	}
	if err := r.flush(ctx, true); err != nil {
		return true, nil, err
	}
	return true, r.result(), nil
}

// settleDrained settles the stopped tasks whose logs are in. It is recorded
// with the next checkpoint. A resume before it describes the stopped task
// again and settles it the same way, and a relaunch checkpoints first.
func (r *run) settleDrained(now time.Time) {
	for i := range r.h.Tasks {
		tr := &r.tasks[i]
		if tr.final == nil || !r.drained(i, now) {
			continue // not stopped, or settled already, or its logs are not in
		}
		r.settle(i, *tr.final)
		tr.final = nil
	}
}

// relaunchOrFail launches task i again when it failed or the infrastructure
// stopped it and its budget allows, and fails the job when the budget is
// spent. It reports whether the task succeeded.
func (r *run) relaunchOrFail(ctx context.Context, i int) (bool, error) {
	t := &r.h.Tasks[i]
	switch t.Outcome {
	case outcomeSucceeded:
		return true, nil
	case outcomeFailed:
		if t.Attempts >= r.cfg.MaxFailCount {
			return false, r.fail(ctx, fmt.Sprintf("task %d failed after %d launch attempt(s): %s", i, t.Attempts, t.Reason))
		}
		r.stderrf("task %d failed on launch %d of %d; launching it again", i, t.Attempts, r.cfg.MaxFailCount)
		r.launching(i)
		return false, r.launch(ctx, i, relaunchFailed)
	case outcomeInfra:
		if t.Infra >= r.cfg.MaxInfraRelaunches {
			return false, r.fail(ctx, fmt.Sprintf("task %d was stopped by the infrastructure %d time(s), the last: %s", i, t.Infra+1, t.Reason))
		}
		r.stderrf("task %d was stopped by the infrastructure (%s); relaunch %d of %d", i, t.Reason, t.Infra+1, r.cfg.MaxInfraRelaunches)
		r.launching(i)
		return false, r.launch(ctx, i, relaunchInfra)
	}
	return false, nil
}

// fail ends the job for good. The other tasks are stopped.
func (r *run) fail(ctx context.Context, msg string) error {
	if err := r.stopAll(ctx, fmt.Sprintf("tether: job %s failed", r.job.ID)); err != nil {
		msg += fmt.Sprintf(" (stopping the other tasks: %v)", err)
	}
	if err := r.flush(ctx, true); err != nil {
		return err // the agent refuses the job's writes: the outcome is not this run's to report
	}
	return plugin.Errorf(plugin.Permanent, "ecs: %s", msg)
}

// taskEnded reports whether the task's outcome can be read (ended).
func taskEnded(task types.Task) bool {
	var cs []string
	for _, c := range task.Containers {
		cs = append(cs, aws.ToString(c.LastStatus))
	}
	return ended(aws.ToString(task.LastStatus), cs)
}

// settle turns task i's ended task into its outcome.
func (r *run) settle(i int, task types.Task) {
	t := &r.h.Tasks[i]
	st := stoppedTask{StopCode: string(task.StopCode), StoppedReason: aws.ToString(task.StoppedReason)}
	for _, c := range task.Containers {
		st.Containers = append(st.Containers, containerResult{Name: aws.ToString(c.Name), ExitCode: c.ExitCode, Reason: aws.ToString(c.Reason)})
		if c.ExitCode != nil {
			if t.Exit == nil {
				t.Exit = map[string]int32{}
			}
			t.Exit[aws.ToString(c.Name)] = *c.ExitCode
		}
	}
	t.Outcome, t.Reason = evaluate(st, r.td.essential())
	t.Logs = nil
	r.dirty = true
	r.stderrf("task %d (%s) %s%s", i, r.h.taskARN(t), settledAs[t.Outcome], t.Reason)
}

// settledAs is how stderr tells each outcome evaluate returns, before its
// reason. A success has no reason.
var settledAs = map[string]string{
	outcomeSucceeded: "succeeded",
	outcomeFailed:    "failed: ",
	outcomeInfra:     "was stopped by the infrastructure: ",
}

func (r *run) timedOut(ctx context.Context) error {
	msg := fmt.Sprintf("timed out after %s", r.cfg.Timeout)
	if err := r.stopAll(ctx, fmt.Sprintf("tether: job %s %s", r.job.ID, msg)); err != nil {
		msg += fmt.Sprintf(" (stopping its tasks: %v)", err)
	}
	r.stderrf("job %s", msg)
	return plugin.Errorf(plugin.Permanent, "ecs: job %s %s", r.job.ID, msg)
}

// stopAll stops every task of the attempt that has not settled, detached
// from ctx (the job may be ending because it was cancelled) and bounded.
func (r *run) stopAll(ctx context.Context, reason string) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	var errs []string
	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		if t.ID == "" || t.Outcome != "" {
			continue
		}
		arn := r.h.taskARN(t)
		if err := stopTask(sctx, r.cl, r.h.Cluster, arn, reason); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		r.stderrf("stopped task %d (%s): %s", i, arn, reason)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// stopOnError stops what the attempt launched when it ends with an error
// that leaves nobody watching its tasks. The host may retry the job, and
// a retry beside the old tasks would run the work twice. Tasks are left
// running only when the agent stopped the call (a cancel's Cleanup or a
// handoff's Resume follows) or refused its checkpoints (the lease moved
// to another agent, which watches them now). It is deferred once r.h is set.
func (r *run) stopOnError(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil || r.fatal != nil {
		return
	}
	if serr := r.stopAll(ctx, fmt.Sprintf("tether: job %s attempt %d ended: %s", r.job.ID, r.h.JobAttempt, firstLine(err.Error()))); serr != nil {
		r.p.log.Warn("stopping the tasks of a failed attempt", "job", r.job.ID, "err", serr)
		r.stderrf("could not stop every task of this attempt: %v", serr)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// stopTask stops a task. A task ECS no longer knows is already stopped.
// stopTask stops the task. A task ECS does not know is taken as stopped.
// Its callers stop tasks ECS listed or described, or leave the rest to
// Cleanup, which uses stopTaskFound.
func stopTask(ctx context.Context, cl *clients, cluster, arn, reason string) error {
	_, err := stopTaskFound(ctx, cl, cluster, arn, reason)
	return err
}

// stopTaskFound stops the task and reports whether ECS knew it. Right after
// RunTask it may not yet (eventual consistency, see Cleanup), so "not
// found" then does not mean stopped.
func stopTaskFound(ctx context.Context, cl *clients, cluster, arn, reason string) (found bool, err error) {
	if err := cl.wait(ctx, apiStopTask); err != nil {
		return false, err
	}
	_, err = cl.ecs.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(arn), Reason: aws.String(truncate(reason, 255))})
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, classify("stopping task "+arn, err)
	}
	return true, nil
}

func truncate(s string, n int) string { return s[:min(len(s), n)] }

// Output is the job's result.
type Output struct {
	TaskDefinitionARN string       `json:"task_definition_arn"`
	Tasks             []TaskOutput `json:"tasks"`
}

// TaskOutput is one task's part of Output.
type TaskOutput struct {
	Index     int              `json:"index"`
	TaskARN   string           `json:"task_arn"`
	StartedBy string           `json:"started_by"`
	Attempts  int              `json:"attempts"`
	Relaunch  int              `json:"infrastructure_relaunches,omitempty"`
	ExitCodes map[string]int32 `json:"exit_codes"`
}

func (r *run) result() *plugin.Result {
	o := Output{TaskDefinitionARN: r.h.TaskDefinitionARN}
	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		o.Tasks = append(o.Tasks, TaskOutput{Index: i, TaskARN: r.h.taskARN(t), StartedBy: StartedBy(r.job.ID, i), Attempts: t.Attempts, Relaunch: t.Infra, ExitCodes: t.Exit})
	}
	b, _ := json.Marshal(o) // plain strings, ints and maps: cannot fail
	return &plugin.Result{Output: b, Message: fmt.Sprintf("%d ECS task(s) succeeded", len(r.h.Tasks))}
}

func (r *run) runTaskInput(i int) *ecs.RunTaskInput {
	t := r.h.Tasks[i]
	c := r.cfg
	in := &ecs.RunTaskInput{
		Cluster:        aws.String(r.h.Cluster),
		TaskDefinition: aws.String(r.td.ARN),
		Count:          aws.Int32(1),
		StartedBy:      aws.String(StartedBy(r.job.ID, i)),
		ClientToken:    aws.String(r.clientToken(i, &t)),
		LaunchType:     types.LaunchType(c.LaunchType), // "" is not sent
	}
	if n := c.Network; n != nil {
		ip := types.AssignPublicIpDisabled
		if n.AssignPublicIP {
			ip = types.AssignPublicIpEnabled
		}
		in.NetworkConfiguration = &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
			Subnets: n.Subnets, SecurityGroups: n.SecurityGroups, AssignPublicIp: ip,
		}}
	}
	in.Overrides = r.overrides()
	// Sorted, so a reissued RunTask carries exactly the same parameters
	// (ECS refuses a known client token with different ones).
	tags := map[string]string{}
	maps.Copy(tags, c.Tags)
	tags[tagJobID] = r.job.ID
	tags[tagJobAttempt] = strconv.Itoa(r.h.JobAttempt)
	tags[tagTaskIndex] = strconv.Itoa(i)
	if r.job.Command != "" {
		tags[tagCommand] = r.job.Command
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		in.Tags = append(in.Tags, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return in
}

func (r *run) clientToken(i int, t *TaskState) string {
	return ClientToken(r.job.ID, r.h.JobAttempt, i, t.Attempts+t.Infra, t.Try)
}

// overrides is the RunTask override the config asks for, nil when it sets
// none.
func (r *run) overrides() *types.TaskOverride {
	c := r.cfg
	o := &types.TaskOverride{Cpu: optional(c.CPU), Memory: optional(c.Memory)}
	// With a template the roles are part of the registered revision.
	if c.Template == nil {
		o.TaskRoleArn, o.ExecutionRoleArn = optional(c.TaskRoleARN), optional(c.ExecutionRoleARN)
	}
	for _, co := range c.ContainerOverrides {
		x := types.ContainerOverride{Name: aws.String(co.Name), Command: co.Command, Cpu: co.CPU, Memory: co.Memory}
		for _, k := range slices.Sorted(maps.Keys(co.Environment)) {
			x.Environment = append(x.Environment, types.KeyValuePair{Name: aws.String(k), Value: aws.String(co.Environment[k])})
		}
		o.ContainerOverrides = append(o.ContainerOverrides, x)
	}
	if reflect.ValueOf(*o).IsZero() {
		return nil
	}
	return o
}
