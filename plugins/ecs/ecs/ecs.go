// Package ecs is tether's ECS plugin: a job runs as task_count Amazon ECS
// tasks, followed to the end by polling DescribeTasks and copying their
// CloudWatch Logs into the job's output. The tasks outlive the agent
// watching them: the plugin checkpoints a Handle, and Resume reattaches by
// the handle or by names derived from the job ID (StartedBy, ClientToken).
package ecs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Version is reported in Info.
const Version = "0.1.0"

// Plugin implements plugin.Plugin, Resumer, Cleaner and HealthChecker.
// One value serves every job of the plugin process and shares its clients.
type Plugin struct {
	clients clientCache
	log     *slog.Logger
}

// New returns the ECS plugin.
func New() *Plugin {
	return &Plugin{log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
}

var (
	_ plugin.Resumer       = (*Plugin)(nil)
	_ plugin.Cleaner       = (*Plugin)(nil)
	_ plugin.HealthChecker = (*Plugin)(nil)
)

// Info implements plugin.Plugin.
func (p *Plugin) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "ecs", Version: Version}, nil
}

// Execute launches the job's tasks and follows them to the end.
func (p *Plugin) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	r, err := p.newRun(ctx, job, rt)
	if err != nil {
		return nil, err
	}
	r.h = newHandle(job.ID, job.Attempt, r.cfg.Cluster, r.cfg.TaskCount)
	if r.td, err = resolveTaskDef(ctx, r.cl, r.cfg); err != nil {
		return nil, err
	}
	r.h.TaskDefinitionARN = r.td.ARN
	fmt.Fprintf(rt.Stderr(), "ecs: cluster %s, task definition %s, %d task(s)\n", r.cfg.Cluster, r.td.ARN, r.cfg.TaskCount)
	for i := range r.h.Tasks {
		if err := r.launch(ctx, i, false); err != nil {
			return nil, err
		}
	}
	return r.watch(ctx)
}

// Resume reattaches to the tasks an earlier Execute or Resume launched and
// follows them to the end. It never launches a task that may already exist.
func (p *Plugin) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	r, err := p.newRun(ctx, job, rt)
	if err != nil {
		return nil, err
	}
	if err := r.reattach(ctx); err != nil {
		return nil, err
	}
	return r.watch(ctx)
}

// Cleanup stops every running task of the job. Cleanup gets no handle, so
// it finds the tasks by the startedBy of each task index.
func (p *Plugin) Cleanup(ctx context.Context, job *plugin.Job) error {
	cfg, err := parseConfig(job.Config, job.Context)
	if err != nil {
		// Execute validates the same settings before launching anything, so
		// a job whose settings do not parse has no tasks to stop; failing
		// here would only make the agent call Cleanup forever.
		p.log.Warn("cleanup: job settings do not parse; nothing can have been launched", "job", job.ID, "err", err)
		return nil
	}
	cl, err := p.clients.get(ctx, cfg.Region, cfg.Endpoint)
	if err != nil {
		return err
	}
	reason := "tether cleanup of job " + job.ID
	for i := range cfg.TaskCount {
		startedBy := StartedBy(job.ID, i)
		arns, err := listTasks(ctx, cl, cfg.Cluster, startedBy, types.DesiredStatusRunning)
		if err != nil {
			return err
		}
		for _, arn := range arns {
			if err := stopTask(ctx, cl, cfg.Cluster, arn, reason); err != nil {
				return err
			}
		}
	}
	return nil
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

// listTasks lists a startedBy's tasks of one desired status, every page.
// startedBy cannot be combined with family, serviceName, launchType or
// containerInstance, so the listing is by cluster and startedBy only.
func listTasks(ctx context.Context, cl *clients, cluster, startedBy string, status types.DesiredStatus) ([]string, error) {
	var arns []string
	pages := ecs.NewListTasksPaginator(cl.ecs, &ecs.ListTasksInput{
		Cluster:       aws.String(cluster),
		StartedBy:     aws.String(startedBy),
		DesiredStatus: status,
	})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(fmt.Sprintf("listing %s tasks started by %s", status, startedBy), err)
		}
		arns = append(arns, out.TaskArns...)
	}
	return arns, nil
}

// stopTask stops a task; a task ECS no longer knows is already stopped.
func stopTask(ctx context.Context, cl *clients, cluster, arn, reason string) error {
	_, err := cl.ecs.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(arn), Reason: aws.String(reason)})
	if err != nil && !notFound(err) {
		return classify("stopping task "+arn, err)
	}
	return nil
}

// notFound reports errors that mean the task is gone, which for stopping it
// is success.
func notFound(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "ResourceNotFoundException", "TaskNotFoundException":
		return true
	case "InvalidParameterException", "ClientException":
		// ECS reports unknown tasks this way ("The referenced task was not found").
		return strings.Contains(strings.ToLower(ae.ErrorMessage()), "not found")
	}
	return false
}
