// Package ecs is tether's ECS plugin: a job runs as task_count Amazon ECS
// tasks, followed to the end by polling DescribeTasks and copying their
// CloudWatch Logs into the job's output. The tasks outlive the agent
// watching them. The plugin checkpoints a Handle, and Resume reattaches by
// the handle or by names derived from the job ID (StartedBy, ClientToken).
package ecs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Version is reported in Info.
const Version = "0.2.0"

// Plugin implements plugin.Plugin, Resumer, Cleaner, HealthChecker and
// Validator.
// One value serves every job of the plugin process and shares its clients.
type Plugin struct {
	clients clientCache
	log     *slog.Logger
}

// New returns the ECS plugin.
func New() *Plugin {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	return &Plugin{log: log, clients: clientCache{log: log, m: map[clientKey]*clients{}}}
}

var (
	_ plugin.Resumer       = (*Plugin)(nil)
	_ plugin.Cleaner       = (*Plugin)(nil)
	_ plugin.HealthChecker = (*Plugin)(nil)
	_ plugin.Validator     = (*Plugin)(nil)
)

// Info implements plugin.Plugin.
func (p *Plugin) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "ecs", Version: Version}, nil
}

// Execute launches the job's tasks and follows them to the end.
func (p *Plugin) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (res *plugin.Result, err error) {
	r, err := p.newRun(ctx, job, rt)
	if err != nil {
		return nil, err
	}
	r.h = newHandle(job.ID, job.Attempt, r.cfg.Cluster, r.cfg.TaskCount)
	if r.td, err = resolveTaskDef(ctx, r.cl, r.cfg); err != nil {
		return nil, err
	}
	r.h.TaskDefinitionARN = r.td.ARN
	defer r.close()
	defer func() { r.stopOnError(ctx, err) }()
	r.start()
	fmt.Fprintf(rt.Stderr(), "ecs: cluster %s, task definition %s, %d task(s)\n", r.cfg.Cluster, r.td.ARN, r.cfg.TaskCount)
	r.awaitLive(ctx)
	// Every task's first launch is recorded in one checkpoint before the
	// first RunTask (a 1,000-task job would otherwise write its handle
	// twice per task while launching).
	// The handle's frontier says which were never sent to RunTask, so a
	// late resume launches those instead of taking them for lost.
	now := time.Now()
	r.h.StartedAt = now.Unix()
	for i := range r.h.Tasks {
		r.h.Tasks[i].Attempts, r.h.Tasks[i].LaunchedAt = 1, now.UnixMilli()
	}
	r.h.Unsent = 1
	r.raiseFrontier(0)
	if err := r.checkpoint(ctx); err != nil {
		return nil, err
	}
	for i := range r.h.Tasks {
		r.launching(i)
		if err := r.launch(ctx, i, recordedLaunch); err != nil {
			return nil, err
		}
	}
	return r.watch(ctx)
}

// Resume reattaches to the tasks an earlier Execute or Resume launched and
// follows them to the end. It never launches a task that may already exist.
func (p *Plugin) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (res *plugin.Result, err error) {
	r, err := p.newRun(ctx, job, rt)
	if err != nil {
		return nil, err
	}
	if err := r.loadHandle(); err != nil {
		return nil, err
	}
	defer r.close()
	defer func() { r.stopOnError(ctx, err) }()
	if err := r.reattach(ctx); err != nil {
		return nil, err
	}
	return r.watch(ctx)
}

// Cleanup stops every task the attempt that left remote work may have
// running: the tasks its handle names, where the handle says they were
// launched (the cluster in the config may have changed since), and, for
// task indexes whose launch was in flight or when there is no handle, the
// tasks listed by their startedBy that belong to that attempt or an
// earlier one of the job (never a later attempt's: tags say which).
func (p *Plugin) Cleanup(ctx context.Context, job *plugin.Job) error {
	cfg, err := parseConfig(job.Config, job.Context)
	if err != nil {
		// Execute validates the same settings before launching anything, so
		// a job whose settings do not parse has no tasks to stop. Failing
		// here would only make the agent call Cleanup forever.
		p.log.Warn("cleanup: job settings do not parse; nothing can have been launched", "job", job.ID, "err", err)
		return nil
	}
	cl, err := p.clients.get(ctx, cfg.Region, cfg.Endpoint)
	if err != nil {
		return err
	}
	cl.setRates(cfg.APIRates)
	h := p.cleanupHandle(job, cfg)
	reason := "tether cleanup of job " + job.ID
	list, err := stopHandled(ctx, cl, h, reason, cfg.ConsistencyWindow)
	if err != nil {
		return err
	}
	var unsure []int
	for _, i := range list {
		found, err := stopStartedBy(ctx, cl, h.Cluster, job, i, reason)
		if err != nil {
			return err
		}
		if !found && launchedWithin(h, i, cfg.ConsistencyWindow, time.Now()) {
			unsure = append(unsure, i)
		}
	}
	if len(unsure) > 0 {
		// ECS lists a task late after RunTask (eventual consistency): an
		// empty listing inside the window does not mean nothing runs. Say
		// so, and the agent's Cleanup queue calls again after a backoff.
		return plugin.Errorf(plugin.Retriable, "ecs: cleanup of job %s: task index(es) %v were launched less than consistency_window (%s) ago and ECS does not list them yet; try again", job.ID, unsure, cfg.ConsistencyWindow)
	}
	return nil
}

// launchedWithin reports whether task index i's current launch was begun
// less than window before now: ECS may not list it yet.
func launchedWithin(h *Handle, i int, window time.Duration, now time.Time) bool {
	ms := cmp.Or(h.Tasks[i].LaunchedAt, h.StartedAt*1000)
	return ms > 0 && now.Sub(time.UnixMilli(ms)) < window
}

// cleanupHandle decodes the job's handle for Cleanup. Without one (none, or
// it does not decode) every task index of the config may have been
// launched, at an unknown time.
func (p *Plugin) cleanupHandle(job *plugin.Job, cfg Config) *Handle {
	if len(job.Handle) > 0 {
		h, err := decodeHandle(job.Handle)
		if err == nil {
			return h
		}
		p.log.Warn("cleanup: the handle does not decode; listing the job's tasks by startedBy", "job", job.ID, "err", err)
	}
	h := newHandle(job.ID, job.Attempt, cfg.Cluster, cfg.TaskCount)
	for i := range h.Tasks {
		h.Tasks[i].Attempts = 1
	}
	return h
}

// stopHandled stops the unsettled tasks the handle names and returns the
// task indexes to find by startedBy. They are those whose launch was in
// flight, and those ECS did not know although launched less than window
// ago. The
// tasks are where the handle says they were launched (the cluster in the
// config may have changed since).
func stopHandled(ctx context.Context, cl *clients, h *Handle, reason string, window time.Duration) ([]int, error) {
	var list []int
	for i := range h.Tasks {
		switch t := &h.Tasks[i]; {
		case t.ID == "":
			if t.begun() && (h.Unsent == 0 || i < h.Unsent) {
				list = append(list, i) // its RunTask may have answered unseen
			}
		case t.Outcome == "":
			found, err := stopTaskFound(ctx, cl, h.Cluster, h.taskARN(t), reason)
			if err != nil {
				return nil, err
			}
			if !found && launchedWithin(h, i, window, time.Now()) {
				// ECS may not know a task it just started. Look for it by
				// startedBy too, and be unsure while the window lasts.
				list = append(list, i)
			}
		}
	}
	return list, nil
}

// stopStartedBy stops the running tasks of task index i listed by their
// startedBy, except those of a later attempt of the job. found says the
// listing named any task.
func stopStartedBy(ctx context.Context, cl *clients, cluster string, job *plugin.Job, i int, reason string) (found bool, err error) {
	arns, err := listTasks(ctx, cl, cluster, StartedBy(job.ID, i), types.DesiredStatusRunning)
	if err != nil || len(arns) == 0 {
		return false, err
	}
	tasks, err := describeTagged(ctx, cl, cluster, arns)
	if err != nil {
		return true, classify("describing the tasks of job "+job.ID, err)
	}
	for _, task := range tasks {
		if a := attemptTag(task); a > job.Attempt {
			continue // a later attempt's: not this Cleanup's to stop
		}
		if err := stopTask(ctx, cl, cluster, aws.ToString(task.TaskArn), reason); err != nil {
			return true, err
		}
	}
	return true, nil
}

// HealthCheck checks that the configured cluster exists and is ACTIVE.
func (p *Plugin) HealthCheck(ctx context.Context, config json.RawMessage) error {
	cluster, region, endpoint, err := parseClusterConfig(config)
	if err != nil {
		return err
	}
	cl, err := p.clients.get(ctx, region, endpoint)
	if err != nil {
		return err
	}
	out, err := cl.ecs.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{cluster}})
	if err != nil {
		return classify(fmt.Sprintf("describing cluster %q", cluster), err)
	}
	for _, c := range out.Clusters {
		if aws.ToString(c.Status) == "ACTIVE" {
			return nil
		}
		return plugin.Errorf(plugin.Retriable, "ecs: cluster %q is %s, not ACTIVE", cluster, aws.ToString(c.Status))
	}
	for _, f := range out.Failures {
		return plugin.Errorf(plugin.Permanent, "ecs: cluster %q: %s %s", cluster, aws.ToString(f.Reason), aws.ToString(f.Detail))
	}
	return plugin.Errorf(plugin.Permanent, "ecs: cluster %q not found", cluster)
}

// notFound reports errors that mean the task is gone, which for stopping it
// is success. ECS also reports unknown tasks as invalid parameters ("The
// referenced task was not found").
func notFound(err error) bool {
	return slices.Contains([]string{"ResourceNotFoundException", "TaskNotFoundException"}, errorCode(err)) ||
		errorSays(err, "not found", "InvalidParameterException", "ClientException")
}

// Validate checks the plugin config and the commands' default contexts with
// the parsing Execute uses, without calling AWS. A task definition may be
// left to jobs.
func (p *Plugin) Validate(_ context.Context, config json.RawMessage, contexts map[string]json.RawMessage) ([]plugin.Problem, error) {
	return dec.Validate(config, contexts, func(config, context json.RawMessage) error {
		_, err := decodeConfig(config, context)
		return err
	}), nil
}
