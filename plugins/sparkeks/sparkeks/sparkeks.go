// Package sparkeks is tether's Spark-on-Kubernetes plugin: a job runs a
// Spark SQL query as a SparkApplication (sparkoperator.k8s.io/v1beta2, as
// kubeflow spark-operator defines it), followed to its end through one
// shared informer per namespace (informer.go), its driver's log copied into
// the job's output. The
// application outlives the agent watching it. The plugin checkpoints a
// Handle, and Resume reattaches by the name derived from the job ID, never
// submitting the same job twice.
package sparkeks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// PluginVersion is reported in Info.
const PluginVersion = "0.2.0"

// requestTimeout bounds one API call of Cleanup and HealthCheck.
const requestTimeout = 30 * time.Second

// Plugin implements plugin.Plugin, Resumer, Cleaner, HealthChecker and
// Validator.
// One value serves every job of the plugin process and shares its clients.
type Plugin struct {
	clients clientCache
	// watchers are the shared informers every job follows its application
	// through: one per (cluster access, namespace).
	watchers appWatchers
	log      *slog.Logger
}

// New returns the Spark-on-EKS plugin.
func New() *Plugin {
	p := &Plugin{log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	p.watchers.log = p.log
	return p
}

var (
	_ plugin.Resumer       = (*Plugin)(nil)
	_ plugin.Cleaner       = (*Plugin)(nil)
	_ plugin.HealthChecker = (*Plugin)(nil)
	_ plugin.Validator     = (*Plugin)(nil)
)

// Info implements plugin.Plugin.
func (p *Plugin) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "sparkeks", Version: PluginVersion}, nil
}

// Execute submits the job's SparkApplication and follows it to the end.
func (p *Plugin) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	r, err := p.newRun(ctx, job, rt)
	if err != nil {
		return nil, err
	}
	if err := r.submit(ctx); err != nil {
		return nil, err
	}
	return r.follow(ctx)
}

// Resume reattaches to the SparkApplication an earlier Execute or Resume
// submitted and follows it to the end. It submits only when this attempt of
// the job never did.
func (p *Plugin) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	r, err := p.newRun(ctx, job, rt)
	if err != nil {
		return nil, err
	}
	if done, res, err := r.reattach(ctx); done {
		return res, err
	}
	return r.follow(ctx)
}

// Cleanup deletes the SparkApplication of the attempt being cleaned up
// (foreground propagation, so its driver and executors go first) and its
// query ConfigMap, fenced so it never deletes another attempt's: with the
// attempt's handle (job.Handle), the application with the handle's UID in
// the handle's namespace (whichever attempt created it: an adopted one
// included). Without one (nothing was checkpointed), only an application
// whose tether.dev/job-attempt label is job.Attempt. Both missing is
// success. A transient failure is Retriable (the host's cleanup queue
// retries it). An attempt whose outcome was decided blind is looked at
// first (lookBeforeDeleting).
func (p *Plugin) Cleanup(ctx context.Context, job *plugin.Job) error {
	cfg, err := parseJob(job)
	if err != nil {
		// Execute validates the same settings before creating anything, so
		// a job whose settings do not parse has nothing to delete. Failing
		// here would only make the agent call Cleanup forever.
		p.log.Warn("cleanup: job settings do not parse; nothing can have been created", "job", job.ID, "err", err)
		return nil
	}
	cl, err := p.clients.get(ctx, cfg.Access)
	if err != nil {
		return err
	}
	namespace, uid := cfg.Namespace, ""
	if len(job.Handle) > 0 {
		h, err := decodeHandle(job.Handle)
		switch {
		case err != nil:
			// Fall back to the attempt label, which is as safe.
			p.log.Warn("cleanup: unreadable handle; deleting by the attempt label", "job", job.ID, "err", err)
		case h.Blind:
			if keep, err := p.lookBeforeDeleting(ctx, cl, cfg, job, h); keep || err != nil {
				return err
			}
		}
		if err == nil {
			namespace, uid = cmp.Or(h.Namespace, namespace), h.UID
		}
	}
	return deleteJobObjects(ctx, cl, namespace, job.ID, uid, max(job.Attempt, 1), requestTimeout)
}

// parseJob is the job's settings, once its ID is known to make valid
// Kubernetes names.
func parseJob(job *plugin.Job) (Config, error) {
	cfg, err := parseConfig(job.Config, job.Context)
	if err != nil {
		return Config{}, err
	}
	return cfg, checkNames(job.ID)
}

// deleteJobObjects deletes a job's SparkApplication and its ConfigMap, of
// one attempt only. It deletes the application with uid when uid is set,
// else the one
// whose attempt label is attempt (read first, then deleted with its UID as
// precondition). It deletes the ConfigMap only when owned by that
// application or labelled with that attempt. Deletion propagates in the
// foreground. NotFound (and a
// failed precondition: the name belongs to another application now) is
// success. A transient failure is Retriable.
func deleteJobObjects(ctx context.Context, cl *clients, namespace, jobID, uid string, attempt int, timeout time.Duration) error {
	d := &jobDeletion{cl: cl, namespace: namespace, jobID: jobID, attempt: attempt, timeout: timeout}
	if uid == "" {
		uid = d.appUID(ctx)
	}
	if uid != "" {
		d.deleteApp(ctx, uid)
	}
	d.deleteConfigMap(ctx, uid)
	return d.err(ctx)
}

// jobDeletion is deleteJobObjects under way. It holds what it deletes and what
// failed so far.
type jobDeletion struct {
	cl        *clients
	namespace string
	jobID     string
	attempt   int
	timeout   time.Duration

	errs      []string
	retriable bool // a failure may pass with time
}

func (d *jobDeletion) note(what string, err error) {
	d.errs = append(d.errs, fmt.Sprintf("%s: %v", what, err))
	d.retriable = d.retriable || transient(err) || apiRefused(err)
}

// appUID reads the UID of the job's application when it is of the
// attempt. "" when there is none.
func (d *jobDeletion) appUID(ctx context.Context) string {
	name := AppName(d.jobID)
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	app, err := d.cl.dyn.Resource(GVR).Namespace(d.namespace).Get(cctx, name, metav1.GetOptions{})
	cancel()
	switch {
	case err == nil:
		if a, ok := attemptOf(app); ok && a == d.attempt {
			return string(app.GetUID())
		}
	case !apierrors.IsNotFound(err):
		d.note(fmt.Sprintf("getting SparkApplication %s/%s", d.namespace, name), err)
	}
	return ""
}

// deleteApp deletes the application with uid, in the foreground.
func (d *jobDeletion) deleteApp(ctx context.Context, uid string) {
	name := AppName(d.jobID)
	fg := metav1.DeletePropagationForeground
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	err := d.cl.dyn.Resource(GVR).Namespace(d.namespace).Delete(cctx, name, metav1.DeleteOptions{PropagationPolicy: &fg, Preconditions: metav1.NewUIDPreconditions(uid)})
	cancel()
	if !deleted(err) {
		d.note(fmt.Sprintf("deleting SparkApplication %s/%s (uid %s)", d.namespace, name, uid), err)
	}
}

// deleteConfigMap deletes the job's ConfigMap when it is owned by the
// application with uid or labelled with the attempt.
func (d *jobDeletion) deleteConfigMap(ctx context.Context, uid string) {
	cms := d.cl.kube.CoreV1().ConfigMaps(d.namespace)
	cmName := ConfigMapName(d.jobID)
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	cm, err := cms.Get(cctx, cmName, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		d.note(fmt.Sprintf("getting ConfigMap %s/%s", d.namespace, cmName), err)
		return
	case !(uid != "" && ownedBy(cm.OwnerReferences, uid)) && cm.Labels[labelJobAttempt] != strconv.Itoa(d.attempt):
		return
	}
	var opts metav1.DeleteOptions
	if cm.UID != "" {
		opts.Preconditions = metav1.NewUIDPreconditions(string(cm.UID))
	}
	cctx, cancel = context.WithTimeout(ctx, d.timeout)
	err = cms.Delete(cctx, cmName, opts)
	cancel()
	if !deleted(err) {
		d.note(fmt.Sprintf("deleting ConfigMap %s/%s", d.namespace, cmName), err)
	}
}

// deleted reports whether a delete left nothing of ours behind. It worked,
// the object was gone already, or its UID precondition failed (a Conflict:
// the name now belongs to another object, which is not ours to delete).
func deleted(err error) bool {
	return err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// err is what the deletion failed at, Retriable when that may pass.
func (d *jobDeletion) err(ctx context.Context) error {
	if len(d.errs) == 0 {
		return nil
	}
	class := plugin.Permanent
	if d.retriable || ctx.Err() != nil {
		class = plugin.Retriable
	}
	return plugin.Errorf(class, "sparkeks: %s", strings.Join(d.errs, "; "))
}

// HealthCheck checks that the API server answers and serves the
// SparkApplication resource.
func (p *Plugin) HealthCheck(ctx context.Context, config json.RawMessage) error {
	access, err := parseClusterConfig(config)
	if err != nil {
		return err
	}
	cl, err := p.clients.get(ctx, access)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	disc := cl.kube.Discovery()
	if _, err := disc.ServerVersionWithContext(cctx); err != nil {
		return plugin.Errorf(plugin.Retriable, "sparkeks: the Kubernetes API server %s does not answer: %v (check the cluster access settings and the network)", cl.host, err)
	}
	list, err := disc.ServerResourcesForGroupVersionWithContext(cctx, APIVersion)
	if err != nil && !apierrors.IsNotFound(err) {
		return plugin.Errorf(plugin.Retriable, "sparkeks: listing the resources of %s on %s: %v", APIVersion, cl.host, err)
	}
	if list != nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == Resource }) {
		return nil
	}
	return plugin.Errorf(plugin.Permanent,
		"sparkeks: the API server %s does not serve %s %s: install the spark-operator CRDs (kubeflow spark-operator's Helm chart, or its sparkoperator.k8s.io_sparkapplications.yaml)",
		cl.host, APIVersion, Resource)
}

// Validate checks the plugin config and the commands' default contexts with
// the parsing Execute uses, without calling AWS or Kubernetes. The query,
// image and main application file may be left to jobs.
func (p *Plugin) Validate(_ context.Context, config json.RawMessage, contexts map[string]json.RawMessage) ([]plugin.Problem, error) {
	return dec.Validate(config, contexts, func(config, context json.RawMessage) error {
		_, err := decodeConfig(config, context)
		return err
	}), nil
}
