package ecs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// describeBatch is DescribeTasks' limit of tasks per call.
	describeBatch = 100
	// maxPollFailures is how many polls in a row may fail (after the SDK's
	// own retries) before the job gives up watching with outcome_unknown.
	maxPollFailures = 10
	// maxLogPages bounds one poll's GetLogEvents calls per stream; the rest
	// is read on the next poll.
	maxLogPages = 100
	// clientTokenLife is how long a reissued RunTask may trust its client
	// token to be honoured (ECS keeps them 24 h).
	clientTokenLife = 23 * time.Hour
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
	// fatal is set when the agent refuses the job's checkpoints or output
	// (its lease is gone): watching on could only repeat the failure.
	fatal error
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
	return &run{p: p, job: job, rt: rt, cfg: cfg, cl: cl}, nil
}

func (r *run) stderrf(format string, args ...any) {
	fmt.Fprintf(r.rt.Stderr(), "ecs: "+format+"\n", args...)
}

// checkpoint stores the handle, even when ctx was just cancelled.
func (r *run) checkpoint(ctx context.Context) error {
	b, err := r.h.encode()
	if err != nil {
		return plugin.WithClass(plugin.OutcomeUnknown, err)
	}
	// No timeout of our own: the host holds a checkpoint while its database
	// is away and answers once it is stored, or when it stops the job (its
	// self-fence); giving up sooner would fail a healthy job.
	if err := r.rt.Checkpoint(context.WithoutCancel(ctx), b); err != nil {
		// The tasks run on; a later Resume finds them by startedBy.
		r.fatal = plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: checkpointing job %s: %w", r.job.ID, err))
		return r.fatal
	}
	return nil
}

// launch starts task index i: a new launch attempt, or (reissue) the latest
// attempt again with its own client token, which ECS answers with the task
// that attempt started if its RunTask got through.
func (r *run) launch(ctx context.Context, i int, reissue bool) error {
	t := &r.h.Tasks[i]
	if !reissue || t.ClientToken == "" {
		if t.TaskARN != "" {
			t.PreviousARNs = append(t.PreviousARNs, t.TaskARN)
		}
		if !reissue {
			t.Attempts++
		}
		t.ClientToken = ClientToken(r.job.ID, r.h.JobAttempt, i, t.Attempts)
		*t = TaskState{Index: t.Index, StartedBy: t.StartedBy, Attempts: t.Attempts, ClientToken: t.ClientToken, PreviousARNs: t.PreviousARNs}
	}
	if r.h.StartedAt.IsZero() {
		r.h.StartedAt = time.Now().UTC()
	}
	// Recorded before RunTask: a resume after a crash here reissues this very
	// launch instead of starting another.
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	r.stderrf("task %d launch %d of %d: startedBy %s, clientToken %s", i, t.Attempts, r.cfg.MaxFailCount, t.StartedBy, t.ClientToken)
	out, err := r.cl.ecs.RunTask(ctx, r.runTaskInput(i))
	if err != nil {
		if errorCode(err) == "ConflictException" {
			// The client token already started a task, with other parameters
			// (the config changed between agents): that task is not ours to
			// judge, nor to start again.
			return plugin.Errorf(plugin.OutcomeUnknown, "ecs: launching task %d of job %s again with client token %s: %v", i, r.job.ID, t.ClientToken, err)
		}
		if clientFault(err) {
			t.Outcome, t.Reason = outcomeFailed, "RunTask refused: "+err.Error()
			if cerr := r.checkpoint(ctx); cerr != nil {
				return cerr
			}
			return plugin.Errorf(plugin.Permanent, "ecs: launching task %d of job %s: %v", i, r.job.ID, err)
		}
		if ctx.Err() != nil {
			return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: launching task %d: %w", i, ctx.Err()))
		}
		if throttlingCodes[errorCode(err)] {
			// Throttled past the SDK's retries: the request was not run.
			return plugin.Errorf(plugin.Retriable, "ecs: launching task %d of job %s: %v", i, r.job.ID, err)
		}
		// A 5xx or a lost answer: the task may exist. A resume would find it
		// by startedBy or reissue this launch with the same client token.
		return plugin.Errorf(plugin.OutcomeUnknown, "ecs: launching task %d of job %s (startedBy %s): %v", i, r.job.ID, t.StartedBy, err)
	}
	if len(out.Tasks) == 0 {
		var reasons []string
		for _, f := range out.Failures {
			if aws.ToString(f.Reason) == "MISSING" {
				// ECS remembers the token but has forgotten its task: it ran
				// and stopped while nobody watched, with an unknown outcome.
				return plugin.Errorf(plugin.OutcomeUnknown,
					"ecs: task %d of job %s: launch %d started %s, which ECS no longer knows; its outcome is unknown",
					i, r.job.ID, t.Attempts, aws.ToString(f.Arn))
			}
			reasons = append(reasons, strings.TrimSpace(aws.ToString(f.Reason)+" "+aws.ToString(f.Detail)))
		}
		if len(reasons) == 0 {
			reasons = append(reasons, "no task and no failure returned")
		}
		t.Outcome, t.Reason = outcomeFailed, "RunTask failed: "+strings.Join(reasons, "; ")
		r.stderrf("task %d: %s", i, t.Reason)
		return r.checkpoint(ctx)
	}
	task := out.Tasks[0]
	t.TaskARN = aws.ToString(task.TaskArn)
	r.apply(t, task)
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	r.stderrf("task %d is %s", i, t.TaskARN)
	return nil
}

func (r *run) runTaskInput(i int) *ecs.RunTaskInput {
	t := r.h.Tasks[i]
	c := r.cfg
	in := &ecs.RunTaskInput{
		Cluster:        aws.String(c.Cluster),
		TaskDefinition: aws.String(r.td.ARN),
		Count:          aws.Int32(1),
		StartedBy:      aws.String(t.StartedBy),
		ClientToken:    aws.String(t.ClientToken),
	}
	if c.LaunchType != "" {
		in.LaunchType = types.LaunchType(c.LaunchType)
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
	for k, v := range c.Tags {
		tags[k] = v
	}
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

func (r *run) overrides() *types.TaskOverride {
	c := r.cfg
	o := &types.TaskOverride{}
	set := false
	if c.CPU != "" {
		o.Cpu, set = aws.String(c.CPU), true
	}
	if c.Memory != "" {
		o.Memory, set = aws.String(c.Memory), true
	}
	// With a template the roles are part of the registered revision.
	if c.Template == nil && c.TaskRoleARN != "" {
		o.TaskRoleArn, set = aws.String(c.TaskRoleARN), true
	}
	if c.Template == nil && c.ExecutionRoleARN != "" {
		o.ExecutionRoleArn, set = aws.String(c.ExecutionRoleARN), true
	}
	for _, co := range c.ContainerOverrides {
		x := types.ContainerOverride{Name: aws.String(co.Name), Command: co.Command, Cpu: co.CPU, Memory: co.Memory}
		for _, k := range slices.Sorted(maps.Keys(co.Environment)) {
			x.Environment = append(x.Environment, types.KeyValuePair{Name: aws.String(k), Value: aws.String(co.Environment[k])})
		}
		o.ContainerOverrides = append(o.ContainerOverrides, x)
		set = true
	}
	if !set {
		return nil
	}
	return o
}

// apply copies what DescribeTasks or RunTask says about a task into its
// state and reports whether anything changed.
func (r *run) apply(t *TaskState, task types.Task) bool {
	before, _ := json.Marshal(t)
	t.LastStatus = aws.ToString(task.LastStatus)
	t.StopCode = string(task.StopCode)
	t.StoppedReason = aws.ToString(task.StoppedReason)
	for _, c := range task.Containers {
		if c.ExitCode != nil {
			if t.ExitCodes == nil {
				t.ExitCodes = map[string]int32{}
			}
			t.ExitCodes[aws.ToString(c.Name)] = *c.ExitCode
		}
	}
	if len(t.Logs) == 0 && t.TaskARN != "" {
		for _, c := range r.td.Containers {
			if c.LogGroup != "" && c.LogPrefix != "" {
				t.Logs = append(t.Logs, LogCursor{
					Container: c.Name,
					Group:     c.LogGroup,
					Stream:    c.LogPrefix + "/" + c.Name + "/" + taskID(t.TaskARN),
				})
			}
		}
	}
	after, _ := json.Marshal(t)
	return string(before) != string(after)
}

// stopped turns a STOPPED task into its outcome.
func (r *run) settle(t *TaskState, task types.Task) {
	st := stoppedTask{StopCode: string(task.StopCode), StoppedReason: aws.ToString(task.StoppedReason)}
	for _, c := range task.Containers {
		st.Containers = append(st.Containers, containerResult{Name: aws.ToString(c.Name), ExitCode: c.ExitCode, Reason: aws.ToString(c.Reason)})
	}
	t.Outcome, t.Reason = evaluate(st, r.td.essential())
	if t.Outcome == outcomeSucceeded {
		r.stderrf("task %d (%s) succeeded", t.Index, t.TaskARN)
	} else {
		r.stderrf("task %d (%s) failed: %s", t.Index, t.TaskARN, t.Reason)
	}
}

// watch follows the tasks until every one succeeded, one failed its last
// launch attempt, the timeout passed, or ctx ended. On ctx's end the tasks
// are left running: the agent decides (Cleanup on a cancel; another agent's
// Resume on a handoff).
func (r *run) watch(ctx context.Context) (*plugin.Result, error) {
	var deadline time.Time
	if r.cfg.Timeout > 0 {
		deadline = r.h.StartedAt.Add(r.cfg.Timeout)
	}
	failures := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, r.ctxErr(err)
		}
		if err := r.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, r.ctxErr(ctx.Err())
			}
			if r.fatal != nil {
				return nil, r.fatal
			}
			if plugin.ClassOf(err) != plugin.Retriable {
				return nil, err
			}
			failures++
			r.p.log.Warn("polling ECS tasks", "job", r.job.ID, "err", err, "failures", failures)
			if failures >= maxPollFailures {
				return nil, plugin.Errorf(plugin.OutcomeUnknown, "ecs: lost track of the tasks of job %s after %d failed polls: %v", r.job.ID, failures, err)
			}
		} else {
			failures = 0
		}
		if done, res, err := r.decide(ctx); done {
			return res, err
		}
		wait := r.cfg.PollInterval
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return nil, r.timedOut(ctx)
			}
			wait = min(wait, left)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, r.ctxErr(ctx.Err())
		case <-timer.C:
		}
	}
}

func (r *run) ctxErr(err error) error {
	return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: watching the tasks of job %s: %w", r.job.ID, err))
}

// poll describes every task still running, copies new log events and
// settles tasks that stopped.
func (r *run) poll(ctx context.Context) error {
	var arns []string
	byARN := map[string]*TaskState{}
	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		if t.TaskARN != "" && t.Outcome == "" {
			arns = append(arns, t.TaskARN)
			byARN[t.TaskARN] = t
		}
	}
	changed := false
	described := map[string]types.Task{}
	for chunk := range slices.Chunk(arns, describeBatch) {
		out, err := r.cl.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(r.h.Cluster), Tasks: chunk})
		if err != nil {
			return classify("describing tasks", err)
		}
		for _, task := range out.Tasks {
			if t := byARN[aws.ToString(task.TaskArn)]; t != nil {
				described[t.TaskARN] = task
				if r.apply(t, task) {
					changed = true
				}
			}
		}
		for _, f := range out.Failures {
			t := byARN[aws.ToString(f.Arn)]
			if t == nil {
				continue
			}
			if aws.ToString(f.Reason) == "MISSING" {
				// Stopped long enough ago that ECS forgot it, and no outcome
				// was recorded: it may have succeeded or failed.
				return plugin.Errorf(plugin.OutcomeUnknown,
					"ecs: task %d of job %s (%s) is MISSING from ECS and its outcome was never recorded", t.Index, r.job.ID, t.TaskARN)
			}
			return plugin.Errorf(plugin.Retriable, "ecs: describing task %s: %s %s", t.TaskARN, aws.ToString(f.Reason), aws.ToString(f.Detail))
		}
	}
	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		if t.TaskARN == "" || t.Outcome != "" {
			continue
		}
		moved, err := r.copyLogs(ctx, t)
		if moved {
			changed = true
		}
		if err != nil {
			if cerr := r.checkpointIf(ctx, changed); cerr != nil {
				return cerr
			}
			return err
		}
		// Only after its log is copied, so the outcome comes after the output.
		if task, ok := described[t.TaskARN]; ok && t.LastStatus == statusStopped {
			r.settle(t, task)
			changed = true
		}
	}
	return r.checkpointIf(ctx, changed)
}

func (r *run) checkpointIf(ctx context.Context, changed bool) error {
	if !changed {
		return nil
	}
	return r.checkpoint(ctx)
}

// copyLogs copies new events of t's awslogs streams to the job's stdout,
// following nextForwardToken from the position in the handle. CloudWatch
// Logs does not keep stdout and stderr apart, so both go to stdout.
func (r *run) copyLogs(ctx context.Context, t *TaskState) (bool, error) {
	prefix := len(r.h.Tasks) > 1 || len(t.Logs) > 1
	moved := false
	for ci := range t.Logs {
		c := &t.Logs[ci]
		for range maxLogPages {
			in := &cloudwatchlogs.GetLogEventsInput{
				LogGroupName:  aws.String(c.Group),
				LogStreamName: aws.String(c.Stream),
				StartFromHead: aws.Bool(true),
			}
			if c.Token != "" {
				in.NextToken = aws.String(c.Token)
			}
			out, err := r.cl.logs.GetLogEvents(ctx, in)
			if err != nil {
				if errorCode(err) == "ResourceNotFoundException" {
					break // the stream appears when the container starts
				}
				return moved, classify("reading log stream "+c.Stream, err)
			}
			if err := r.writeEvents(r.rt.Stdout(), prefix, t.Index, c.Container, out); err != nil {
				r.fatal = plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: writing the log of task %d: %w", t.Index, err))
				return moved, r.fatal
			}
			next := aws.ToString(out.NextForwardToken)
			if next == "" || next == c.Token {
				break // the end of the stream, for now
			}
			c.Token = next
			moved = true
		}
	}
	return moved, nil
}

func (r *run) writeEvents(w io.Writer, prefix bool, index int, container string, out *cloudwatchlogs.GetLogEventsOutput) error {
	if len(out.Events) == 0 {
		return nil
	}
	var b strings.Builder
	for _, ev := range out.Events {
		if prefix {
			fmt.Fprintf(&b, "[%d/%s] ", index, container)
		}
		msg := aws.ToString(ev.Message)
		b.WriteString(msg)
		if !strings.HasSuffix(msg, "\n") {
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// decide relaunches failed tasks that have launch attempts left, and ends
// the job when every task succeeded or one ran out of attempts.
func (r *run) decide(ctx context.Context) (bool, *plugin.Result, error) {
	all := true
	for i := range r.h.Tasks {
		t := &r.h.Tasks[i]
		switch t.Outcome {
		case outcomeSucceeded:
		case outcomeFailed:
			if t.Attempts < r.cfg.MaxFailCount {
				r.stderrf("task %d failed on launch %d of %d; launching it again", i, t.Attempts, r.cfg.MaxFailCount)
				if err := r.launch(ctx, i, false); err != nil {
					return true, nil, err
				}
				all = false
				continue
			}
			msg := fmt.Sprintf("task %d failed after %d launch attempt(s): %s", i, t.Attempts, t.Reason)
			if err := r.stopAll(ctx, fmt.Sprintf("tether: job %s failed: task %d failed", r.job.ID, i)); err != nil {
				msg += fmt.Sprintf(" (stopping the other tasks: %v)", err)
			}
			return true, nil, plugin.Errorf(plugin.Permanent, "ecs: %s", msg)
		default:
			all = false
		}
	}
	if !all {
		return false, nil, nil
	}
	return true, r.result(), nil
}

func (r *run) timedOut(ctx context.Context) error {
	msg := fmt.Sprintf("timed out after %s", r.cfg.Timeout)
	if err := r.stopAll(ctx, fmt.Sprintf("tether: job %s %s", r.job.ID, msg)); err != nil {
		msg += fmt.Sprintf(" (stopping its tasks: %v)", err)
	}
	r.stderrf("job %s", msg)
	return plugin.Errorf(plugin.Permanent, "ecs: job %s %s", r.job.ID, msg)
}

// stopAll stops every task that has not ended.
func (r *run) stopAll(ctx context.Context, reason string) error {
	var errs []string
	for _, t := range r.h.Tasks {
		if t.TaskARN == "" || t.Outcome != "" {
			continue
		}
		if err := stopTask(ctx, r.cl, r.h.Cluster, t.TaskARN, reason); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		r.stderrf("stopped task %d (%s): %s", t.Index, t.TaskARN, reason)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

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
	ExitCodes map[string]int32 `json:"exit_codes"`
}

func (r *run) result() *plugin.Result {
	o := Output{TaskDefinitionARN: r.h.TaskDefinitionARN}
	for _, t := range r.h.Tasks {
		o.Tasks = append(o.Tasks, TaskOutput{Index: t.Index, TaskARN: t.TaskARN, StartedBy: t.StartedBy, Attempts: t.Attempts, ExitCodes: t.ExitCodes})
	}
	b, _ := json.Marshal(o) // plain strings, ints and maps: cannot fail
	return &plugin.Result{Output: b, Message: fmt.Sprintf("%d ECS task(s) succeeded", len(r.h.Tasks))}
}
