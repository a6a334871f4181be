package sparkeks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// logDrain bounds how long the rest of the driver's log is read once
	// the application has ended.
	logDrain = 10 * time.Second
)

// errTimedOut is returned by call when the job's timeout passes while it
// retries.
var errTimedOut = errors.New("timed out")

// run is one Execute or Resume of a job.
type run struct {
	p   *Plugin
	job *plugin.Job
	rt  plugin.Runtime
	cfg Config
	cl  *clients
	// h is the job's handle. It holds only the application's name until
	// the application is created or found (Submitted).
	h *Handle
	// started is when this run began. The timeout counts from it until the
	// application's creation is known.
	started     time.Time
	callTimeout time.Duration
	logs        *logFollower
}

func (p *Plugin) newRun(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*run, error) {
	cfg, err := parseJob(job)
	if err != nil {
		return nil, err
	}
	cl, err := p.clients.get(ctx, cfg.Access)
	if err != nil {
		return nil, err
	}
	j := *job
	j.Attempt = max(j.Attempt, 1)
	return &run{
		p: p, job: &j, rt: rt, cfg: cfg, cl: cl,
		h:           &Handle{Version: handleVersion, JobAttempt: j.Attempt, Name: AppName(j.ID), Namespace: cfg.Namespace},
		started:     time.Now(),
		callTimeout: min(max(3*cfg.PollInterval, 5*time.Second), 30*time.Second),
	}, nil
}

func (r *run) notef(format string, args ...any) {
	fmt.Fprintf(r.rt.Stderr(), "sparkeks: "+format+"\n", args...)
}

func (r *run) apps() dynamic.ResourceInterface {
	return r.cl.dyn.Resource(GVR).Namespace(r.cfg.Namespace)
}

func (r *run) name() string { return AppName(r.job.ID) }

// ref is the application as messages name it.
func (r *run) ref() string { return r.cfg.Namespace + "/" + r.name() }

// checkpoint stores the handle, even when ctx was just cancelled. It must
// record an application that now exists.
func (r *run) checkpoint(ctx context.Context) error {
	b, err := r.h.encode()
	if err != nil {
		return plugin.WithClass(plugin.OutcomeUnknown, err)
	}
	// No timeout of our own. The host holds a checkpoint while its database
	// is away and answers once it is stored, or when it stops the job (its
	// self-fence). Giving up sooner would fail a healthy job.
	if err := r.rt.Checkpoint(context.WithoutCancel(ctx), b); err != nil {
		// The application exists and runs on. Not Retriable. The host
		// cleans up a retriable failure and retries, which would delete a
		// running query and run it again. When the lease moved or the
		// agent is stopping, the host does not record this error at all
		// (the next holder resumes by name). Otherwise the outcome is
		// truthfully unknown and the host's Cleanup deletes the application.
		return plugin.WithClass(plugin.OutcomeUnknown, fmt.Errorf("sparkeks: checkpointing job %s (SparkApplication %s exists): %w", r.job.ID, r.ref(), err))
	}
	return nil
}

func (r *run) ctxErr(err error) error {
	return fmt.Errorf("sparkeks: following SparkApplication %s: %w", r.ref(), err)
}

// deadline is when the job times out (zero: never).
func (r *run) deadline() time.Time {
	if r.cfg.Timeout == 0 {
		return time.Time{}
	}
	if !r.h.CreatedAt.IsZero() {
		return r.h.CreatedAt.Add(r.cfg.Timeout)
	}
	return r.started.Add(r.cfg.Timeout)
}

// call runs one API request, repeating it with backoff while it fails
// transiently. It returns the request's other errors as they are, ctx's
// error (wrapped), or errTimedOut.
func (r *run) call(ctx context.Context, what string, f func(context.Context) error) error {
	b := newBackoff(r.cfg.PollInterval)
	var refusedSince time.Time
	for failures := 1; ; failures++ {
		cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return r.ctxErr(ctx.Err())
		}
		if err := r.keepTrying(err, &refusedSince); err != nil {
			return err
		}
		if noted(failures) {
			r.notef("%s: %v (retrying)", what, err)
		}
		r.p.log.Warn("sparkeks: transient API error", "job", r.job.ID, "what", what, "err", err, "failures", failures)
		d, err := r.capToDeadline(b.next())
		if err != nil {
			return err
		}
		if err := sleep(ctx, d); err != nil {
			return r.ctxErr(err)
		}
	}
}

// keepTrying returns nil when a failed request is to be repeated, else the
// error call returns. A refusal is repeated for auth_grace from the first
// one (refusedSince). It may be an EKS token that expired or is not
// accepted yet (the transport dropped it on the 401, so the next request
// carries a new one), or an access entry being replaced.
func (r *run) keepTrying(err error, refusedSince *time.Time) error {
	switch {
	case transient(err): // never a refusal
		return nil
	case !apiRefused(err):
		return err
	}
	*refusedSince = cmp.Or(*refusedSince, time.Now()) // set once: zero until then
	if time.Since(*refusedSince) >= r.cfg.AuthGrace {
		return &refusedError{err: err, grace: r.cfg.AuthGrace}
	}
	return nil
}

// noted says whether the nth failure in a row of a retried request is
// reported: the first and every tenth.
func noted(n int) bool { return n == 1 || n%10 == 0 }

// capToDeadline shortens a wait to the job's deadline, if it has one. It
// returns errTimedOut once the deadline has passed.
func (r *run) capToDeadline(d time.Duration) (time.Duration, error) {
	dl := r.deadline()
	if dl.IsZero() {
		return d, nil
	}
	left := time.Until(dl)
	if left <= 0 {
		return 0, errTimedOut
	}
	return min(d, left), nil
}

// getApp gets the job's application, retrying transient errors.
func (r *run) getApp(ctx context.Context) (*unstructured.Unstructured, error) {
	var app *unstructured.Unstructured
	err := r.call(ctx, "getting SparkApplication "+r.ref(), func(c context.Context) error {
		var err error
		app, err = r.apps().Get(c, r.name(), metav1.GetOptions{})
		return err
	})
	return app, err
}

// fail turns an error of submit's or reattach's steps into the job's error.
func (r *run) fail(ctx context.Context, what string, err error) error {
	var pe *plugin.Error
	switch {
	case errors.Is(err, errTimedOut):
		return r.timedOut(ctx)
	case ctx.Err() != nil, errors.As(err, &pe):
		return err
	case r.h.Submitted && apiRefused(err):
		// The application exists and runs on. Only this agent's access is
		// refused. Its outcome is unknown, and the host's Cleanup (durable,
		// retried) looks at it again before deleting it.
		return r.decideBlind(ctx, fmt.Sprintf("%s: %v; SparkApplication %s keeps running, its outcome is unknown (the agent's Cleanup looks at it again, and deletes it unless it completed)", what, err, r.ref()))
	case apierrors.IsNotFound(err):
		return plugin.Errorf(plugin.Permanent, "sparkeks: %s: %v (is the SparkApplication CRD installed, and does namespace %q exist?)", what, err, r.cfg.Namespace)
	default:
		return plugin.Errorf(plugin.Permanent, "sparkeks: %s: %v", what, err)
	}
}

// submit creates the job's application, or attaches to the one this
// attempt already created. An earlier attempt's application holding the
// name is adopted (followed as this attempt's) unless it really failed. Only
// then is it replaced (decideExisting).
func (r *run) submit(ctx context.Context) error {
	r.notef("submitting SparkApplication %s (job %s, attempt %d)", r.ref(), r.job.ID, r.job.Attempt)
	obj := buildApp(r.job, r.cfg)
	spec, _ := obj.Object["spec"].(map[string]any)
	if vols := webhookVolumes(spec); len(vols) > 0 {
		r.notef("spec.volumes %s reach the pods only through spark-operator's mutating webhook: without it they are dropped silently (put them in spec.driver.template and spec.executor.template to do without it)",
			strings.Join(vols, ", "))
	}
	for {
		var created *unstructured.Unstructured
		err := r.call(ctx, "creating SparkApplication "+r.ref(), func(c context.Context) error {
			var err error
			created, err = r.apps().Create(c, obj.DeepCopy(), metav1.CreateOptions{})
			return err
		})
		if err == nil {
			return r.attach(ctx, created, 0)
		}
		if !apierrors.IsAlreadyExists(err) {
			return r.fail(ctx, "creating SparkApplication "+r.ref(), err)
		}
		// Created by an earlier call whose answer was lost, by another agent
		// running this attempt, or by an earlier attempt.
		existing, err := r.getApp(ctx)
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return r.failRead(ctx, "getting SparkApplication "+r.ref(), err)
		}
		attempt, ok := attemptOf(existing)
		switch {
		case !ok || attempt > r.job.Attempt:
			return plugin.Errorf(plugin.Permanent,
				"sparkeks: SparkApplication %s already exists and is not attempt %d of job %s (its %s label is %q); not touching it",
				r.ref(), r.job.Attempt, r.job.ID, labelJobAttempt, existing.GetLabels()[labelJobAttempt])
		case attempt == r.job.Attempt:
			r.notef("SparkApplication %s already exists for this attempt (uid %s); attaching", r.ref(), existing.GetUID())
			return r.attach(ctx, existing, 0)
		}
		// An earlier attempt's: adopted, or replaced and submitted again.
		if again, err := r.earlier(ctx, existing, attempt); !again {
			return err
		}
	}
}

// earlier deals with an earlier attempt's application holding the job's
// name, as decideExisting says. again is true when the name is free now
// and this attempt's application is to be created. Otherwise err is nil
// when the run follows the adopted application.
func (r *run) earlier(ctx context.Context, app *unstructured.Unstructured, attempt int) (again bool, err error) {
	st := statusOf(app)
	act, why := decideExisting(st)
	uid := string(app.GetUID())
	r.p.log.Info("sparkeks: earlier attempt's application", "job", r.job.ID, "attempt", attempt, "state", st.State, "action", act.String())
	switch act {
	case actReplace:
		return true, r.replace(ctx, app, attempt, why)
	case actWaitGone:
		r.notef("SparkApplication %s (uid %s) of attempt %d is being deleted; waiting until it is gone before submitting attempt %d", r.ref(), uid, attempt, r.job.Attempt)
		return true, r.waitGone(ctx, uid)
	case actAdopt:
		r.notef("SparkApplication %s (uid %s) of attempt %d exists and %s; adopting it as attempt %d's instead of submitting the query again", r.ref(), uid, attempt, why, r.job.Attempt)
		return false, r.attach(ctx, app, attempt)
	default:
		msg := fmt.Sprintf("SparkApplication %s (uid %s) of attempt %d exists and %s; neither adopting nor replacing it: the outcome is unknown", r.ref(), uid, attempt, why)
		r.notef("%s", msg)
		return false, plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: %s", msg)
	}
}

// replace deletes an earlier attempt's application that failed (and its
// ConfigMap), and waits until it is gone, so this attempt can take the name.
func (r *run) replace(ctx context.Context, old *unstructured.Unstructured, attempt int, why string) error {
	uid := string(old.GetUID())
	r.notef("deleting SparkApplication %s (uid %s) of attempt %d (%s) before submitting attempt %d", r.ref(), uid, attempt, why, r.job.Attempt)
	fg := metav1.DeletePropagationForeground
	err := r.call(ctx, "deleting SparkApplication "+r.ref(), func(c context.Context) error {
		err := r.apps().Delete(c, r.name(), metav1.DeleteOptions{PropagationPolicy: &fg, Preconditions: metav1.NewUIDPreconditions(uid)})
		if deleted(err) {
			return nil // gone, or already replaced
		}
		return err
	})
	if err != nil {
		return r.fail(ctx, "deleting SparkApplication "+r.ref()+" of attempt "+fmt.Sprint(attempt), err)
	}
	if err := r.deleteConfigMap(ctx); err != nil {
		return err
	}
	return r.waitGone(ctx, uid)
}

// waitGone waits until the application with uid no longer holds the name.
func (r *run) waitGone(ctx context.Context, uid string) error {
	for {
		app, err := r.getApp(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return r.fail(ctx, "waiting for SparkApplication "+r.ref()+" to be deleted", err)
		case string(app.GetUID()) != uid:
			return nil // replaced already
		}
		if dl := r.deadline(); !dl.IsZero() && time.Now().After(dl) {
			return r.timedOut(ctx)
		}
		if err := sleep(ctx, r.cfg.PollInterval); err != nil {
			return r.ctxErr(err)
		}
	}
}

func (r *run) deleteConfigMap(ctx context.Context) error {
	cms := r.cl.kube.CoreV1().ConfigMaps(r.cfg.Namespace)
	err := r.call(ctx, "deleting ConfigMap "+ConfigMapName(r.job.ID), func(c context.Context) error {
		err := cms.Delete(c, ConfigMapName(r.job.ID), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return r.fail(ctx, "deleting ConfigMap "+r.cfg.Namespace+"/"+ConfigMapName(r.job.ID), err)
	}
	return nil
}

// attach makes app the job's application. The handle records it (right
// after its creation, or when it was found) and its query ConfigMap is
// created if missing. adopted is the earlier attempt that created it (0:
// this attempt).
func (r *run) attach(ctx context.Context, app *unstructured.Unstructured, adopted int) error {
	uid := string(app.GetUID())
	if r.h.UID != "" && r.h.UID != uid {
		r.h.UIDMismatch = fmt.Sprintf("the handle recorded uid %s; found uid %s by name", r.h.UID, uid)
		r.notef("SparkApplication %s has uid %s, not %s as recorded; following the one that exists", r.ref(), uid, r.h.UID)
	}
	r.h.UID = uid
	r.h.Submitted = true
	if adopted > 0 {
		r.h.AdoptedAttempt = adopted
		// Its timeout and startup_timeout count from its own creation.
		r.h.CreatedAt = time.Time{}
	}
	if r.h.CreatedAt.IsZero() {
		// A zero time's UTC() is the zero Time, which cmp.Or skips.
		r.h.CreatedAt = cmp.Or(app.GetCreationTimestamp().UTC(), time.Now().UTC())
	}
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	r.notef("following SparkApplication %s (uid %s)", r.ref(), uid)
	if phaseOf(statusOf(app).State) != phaseRunning {
		return nil // ended: its driver needs no query any more
	}
	// The driver pod cannot start without the ConfigMap (its kubelet keeps
	// it in ContainerCreating), so a run cancelled right after the
	// checkpoint (a handoff, the agent shutting down) still creates it,
	// for up to configMapGrace after the cancel.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(configMapGrace, cancel) })
	defer stop()
	if err := r.ensureConfigMap(cctx, uid); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return r.ctxErr(ctx.Err())
	}
	return nil
}

// configMapGrace is how long the query's ConfigMap is still created for
// once the run's context has ended (within the plugin's ShutdownGrace).
const configMapGrace = 3 * time.Second

// ensureConfigMap creates the query's ConfigMap, owned by the application
// with uid. One left by another application (whose garbage collection has
// not happened) is replaced.
func (r *run) ensureConfigMap(ctx context.Context, uid string) error {
	cms := r.cl.kube.CoreV1().ConfigMaps(r.cfg.Namespace)
	cm := buildConfigMap(r.job, r.cfg, r.name(), uid)
	what := "creating ConfigMap " + r.cfg.Namespace + "/" + cm.Name
	for range 3 {
		err := r.call(ctx, what, func(c context.Context) error {
			_, err := cms.Create(c, cm.DeepCopy(), metav1.CreateOptions{})
			return err
		})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return r.configMapFailed(ctx, r.fail(ctx, what, err))
		}
		var existing *corev1.ConfigMap
		err = r.call(ctx, "getting ConfigMap "+cm.Name, func(c context.Context) error {
			var err error
			existing, err = cms.Get(c, cm.Name, metav1.GetOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return r.configMapFailed(ctx, r.fail(ctx, "getting ConfigMap "+cm.Name, err))
		}
		if ownedBy(existing.OwnerReferences, uid) {
			return nil
		}
		r.notef("ConfigMap %s belongs to another SparkApplication; replacing it", cm.Name)
		if err := r.deleteConfigMap(ctx); err != nil {
			return r.configMapFailed(ctx, err)
		}
	}
	return r.configMapFailed(ctx, plugin.Errorf(plugin.Permanent, "sparkeks: %s: it keeps being replaced", what))
}

// configMapFailed ends a job whose query could not be stored. Its driver
// cannot start without it, so the application is deleted.
func (r *run) configMapFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return err
	}
	var pe *plugin.Error
	if errors.As(err, &pe) && pe.Class == plugin.Permanent {
		if derr := deleteJobObjects(context.WithoutCancel(ctx), r.cl, r.cfg.Namespace, r.job.ID, r.h.UID, r.job.Attempt, r.callTimeout); derr != nil {
			r.notef("deleting SparkApplication %s after the ConfigMap failed: %v", r.ref(), derr)
		}
		r.h.Outcome, r.h.Message = outcomeFailed, pe.Message
		_ = r.checkpoint(ctx)
	}
	return err
}

// reattach loads the handle and finds the application by name. done is
// true when the job's end is already known (res, err are its outcome).
func (r *run) reattach(ctx context.Context) (done bool, res *plugin.Result, err error) {
	if err := r.loadHandle(); err != nil {
		return true, nil, err
	}
	// The application is where it was created, whatever the settings say now.
	r.cfg.Namespace = r.h.Namespace
	if r.h.Blind { // only ever with an Outcome
		// Decided while the plugin could not see the application: it
		// may have ended since (or be running on). Look again.
		r.notef("the recorded outcome (%s) was decided while the API server refused the plugin; looking at SparkApplication %s again", r.h.Outcome, r.ref())
		r.h.Outcome, r.h.Message, r.h.Blind = "", "", false
	}
	if r.h.Outcome != "" {
		res, err := r.recorded()
		return true, res, err
	}
	r.notef("resuming job %s (attempt %d): looking for SparkApplication %s", r.job.ID, r.job.Attempt, r.ref())
	app, err := r.getApp(ctx)
	switch {
	case err == nil:
		return r.reattachTo(ctx, app)
	case apierrors.IsNotFound(err):
		if r.h.Submitted {
			return true, nil, r.gone(ctx)
		}
		return false, nil, r.submit(ctx)
	default:
		// Never permanent. The application may exist and run on.
		return true, nil, r.failRead(ctx, "getting SparkApplication "+r.ref(), err)
	}
}

// loadHandle sets r.h to the stored handle when it is of this attempt.
func (r *run) loadHandle() error {
	raw := r.rt.Handle()
	if len(raw) == 0 {
		return nil
	}
	h, err := decodeHandle(raw)
	if err != nil {
		return plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: resuming job %s: %v", r.job.ID, err)
	}
	if h.Name != r.name() {
		return plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: resuming job %s: the stored handle names SparkApplication %q, not %q", r.job.ID, h.Name, r.name())
	}
	if h.JobAttempt != r.job.Attempt {
		r.notef("ignoring the handle of attempt %d of job %s; this is attempt %d", h.JobAttempt, r.job.ID, r.job.Attempt)
		return nil
	}
	r.h = h
	return nil
}

// reattachTo decides what to do with the application found under the
// job's name, by the attempt it was created for.
func (r *run) reattachTo(ctx context.Context, app *unstructured.Unstructured) (bool, *plugin.Result, error) {
	attempt, ok := attemptOf(app)
	switch {
	case !ok || attempt > r.job.Attempt:
		return true, nil, plugin.Errorf(plugin.Permanent,
			"sparkeks: SparkApplication %s exists but is not attempt %d of job %s (its %s label is %q); not touching it",
			r.ref(), r.job.Attempt, r.job.ID, labelJobAttempt, app.GetLabels()[labelJobAttempt])
	case attempt == r.job.Attempt:
		return false, nil, r.attach(ctx, app, 0)
	case r.h.Submitted && r.h.UID == string(app.GetUID()):
		// The earlier attempt's application this attempt adopted.
		return false, nil, r.attach(ctx, app, attempt)
	case r.h.Submitted:
		// This attempt's own application is gone.
		return true, nil, r.gone(ctx)
	}
	// An earlier attempt's, and this attempt never submitted. Adopt it or,
	// if it failed, replace it (the same rule as Execute).
	again, err := r.earlier(ctx, app, attempt)
	if !again {
		return err != nil, nil, err
	}
	return false, nil, r.submit(ctx)
}

// failRead ends a run whose read of the application failed for good (not
// transient; 401/403 past auth_grace). Whether an application exists, and
// what it does, is not known, so the outcome is unknown. The application,
// if any, runs on. The host's Cleanup (durable, retried) deletes it.
func (r *run) failRead(ctx context.Context, what string, err error) error {
	if errors.Is(err, errTimedOut) || ctx.Err() != nil {
		return r.fail(ctx, what, err)
	}
	var pe *plugin.Error
	if errors.As(err, &pe) {
		return err
	}
	msg := fmt.Sprintf("%s: %v; the SparkApplication, if it exists, keeps running and its outcome is unknown (the agent's Cleanup looks at it again, and deletes it unless it completed)", what, err)
	if apiRefused(err) {
		return r.decideBlind(ctx, msg)
	}
	return plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: %s", msg)
}

// gone ends a job whose submitted application no longer exists. Whether it
// ran is unknown, and submitting it again could run it twice.
func (r *run) gone(ctx context.Context) error {
	msg := fmt.Sprintf("SparkApplication %s (uid %s) no longer exists and its outcome was not recorded; not resubmitting", r.ref(), r.h.UID) +
		ifSet(" (last seen ", r.h.State, ")")
	r.stopLogs()
	r.recordOutcome(ctx, outcomeUnknown, msg)
	r.notef("%s", msg)
	return plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: %s", msg)
}

// recorded is the outcome a handle already holds.
func (r *run) recorded() (*plugin.Result, error) {
	switch r.h.Outcome {
	case outcomeSucceeded:
		return r.result(), nil
	case outcomeFailed:
		return nil, plugin.Errorf(plugin.Permanent, "sparkeks: %s", r.h.Message)
	default:
		return nil, plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: %s", r.h.Message)
	}
}

// follow follows the application through the plugin's shared informer
// (appWatchers: one LIST and WATCH per namespace, whatever the number of
// jobs) until it ends, the timeout passes or ctx ends. On ctx's end the
// application is left alone. The agent decides (Cleanup on a cancel;
// another agent's Resume on a handoff).
//
// Each wake-up (a change of the application or its driver pod, a change of
// the informer's health, and at least every poll interval. The wake-ups
// that advance startup_timeout and unknown_grace and checkpoint the log's
// position) reads the cache. An application missing from it is gone only
// once the informer has synced and one direct GET (confirmGone) answers
// 404. While the informer cannot serve (not synced within followFallback,
// or its LIST/WATCH failing) each wake-up GETs the application instead, so
// a job is followed through the informer's trouble as it was before it.
func (r *run) follow(ctx context.Context) (*plugin.Result, error) {
	defer r.stopLogs()
	s := r.p.watchers.subscribe(r.cl, r.cfg.Namespace, r.name(), r.cfg.PollInterval)
	defer s.close()
	f := r.newFollower(s)
	defer f.getT.Stop()
	var deadlineC <-chan time.Time
	if dl := r.deadline(); !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		deadlineC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil, r.ctxErr(ctx.Err())
		case <-deadlineC:
			return r.atDeadline(ctx, s)
		case <-s.wake():
		case <-f.getT.C:
		}
		if done, res, err := f.step(ctx, time.Now()); done {
			return res, err
		}
	}
}

// atDeadline ends a job whose timeout passed, unless its application ended
// just now.
func (r *run) atDeadline(ctx context.Context, s *appSubscription) (*plugin.Result, error) {
	app, _ := s.app()
	if app == nil {
		cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
		_, app, _ = s.confirmGone(cctx)
		cancel()
	}
	if app != nil {
		if done, res, err := r.observe(ctx, app, true, s); done {
			return res, err
		}
	}
	return nil, r.timedOut(ctx)
}

// follower is what follow keeps between wake-ups.
type follower struct {
	r          *run
	s          *appSubscription
	subscribed time.Time
	// fallback is how long an informer that has not synced is waited for
	// before the application is read with GETs.
	fallback time.Duration
	// A GET, when one is due, is retried on a timer of its own (backoff)
	// besides the wake-ups.
	getT          *time.Timer
	getB          backoff
	nextGet       time.Time // no GET before (backoff after a failure)
	missingSince  time.Time // when a synced cache first lacked the application
	lastLog       time.Time
	transientGets int
	refusedSince  time.Time
}

func (r *run) newFollower(s *appSubscription) *follower {
	f := &follower{
		r:          r,
		s:          s,
		subscribed: time.Now(),
		fallback:   min(max(r.cfg.AuthGrace, 3*r.cfg.PollInterval), followFallback),
		getT:       time.NewTimer(time.Hour),
		getB:       newBackoff(r.cfg.PollInterval),
	}
	f.getT.Stop()
	return f
}

// withLog says whether this wake-up records the log's position: about once
// per poll interval, however many events wake the run.
func (f *follower) withLog(now time.Time) bool {
	if now.Sub(f.lastLog) < f.r.cfg.PollInterval/2 {
		return false
	}
	f.lastLog = now
	return true
}

// step reads the application after a wake-up. It reads from the informer's
// cache while it serves, else with a GET when one is due. done is true when the
// job has ended (res, err are its outcome).
func (f *follower) step(ctx context.Context, now time.Time) (done bool, res *plugin.Result, err error) {
	r, s := f.r, f.s
	appsHealth, _ := s.health()
	// Each call gets its own auth_grace: a Resume after an outage may find
	// the shared informer still failing from before, about to recover.
	if refused := min(appsHealth.failingFor(now), now.Sub(f.subscribed)); appsHealth.refused() && refused >= r.cfg.AuthGrace {
		return true, nil, r.lostTrack(ctx, "listing and watching it", appsHealth.Err, refused)
	}
	app, synced := s.app()
	degraded := appsHealth.Err != nil || (!synced && now.Sub(f.subscribed) >= f.fallback)
	switch {
	case degraded:
	case app != nil:
		// A refusal or failure of earlier GETs is over.
		f.missingSince, f.refusedSince, f.nextGet, f.transientGets = time.Time{}, time.Time{}, time.Time{}, 0
		f.getB.reset()
		return r.observe(ctx, app, f.withLog(now), s)
	case !synced:
		return false, nil, nil // the first LIST has not completed: nothing is known yet
	case f.awaitDelivery(now):
		return false, nil, nil
	}
	if now.Before(f.nextGet) {
		f.getT.Reset(f.nextGet.Sub(now))
		return false, nil, nil
	}
	return f.get(ctx, now)
}

// awaitDelivery handles an application missing from a synced cache: just
// created and not delivered yet, or deleted. The watch gets a poll interval
// to deliver it before a GET asks. It reports whether to wait on.
func (f *follower) awaitDelivery(now time.Time) bool {
	f.missingSince = cmp.Or(f.missingSince, now) // set once: zero until then
	wait := f.missingSince.Add(goneConfirmDelay(f.r.cfg.PollInterval)).Sub(now)
	if wait <= 0 {
		return false
	}
	f.getT.Reset(wait)
	return true
}

// get reads the application with a GET, which also says whether it is gone.
func (f *follower) get(ctx context.Context, now time.Time) (bool, *plugin.Result, error) {
	r := f.r
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	gone, got, err := f.s.confirmGone(cctx)
	cancel()
	switch {
	case gone: // only ever with a nil err
		return true, nil, r.gone(ctx)
	case err == nil:
		f.getB.reset()
		f.nextGet, f.transientGets, f.refusedSince = time.Time{}, 0, time.Time{}
		return r.observe(ctx, got, f.withLog(now), f.s)
	case ctx.Err() != nil:
		return false, nil, nil
	case transient(err):
		f.transientGetFailed(now, err)
		return false, nil, nil
	}
	return f.getRefused(ctx, now, err)
}

// transientGetFailed retries a GET that failed for a passing reason. It
// never fails the job by itself. The timeout or ctx ends it.
func (f *follower) transientGetFailed(now time.Time, err error) {
	f.transientGets++
	if noted(f.transientGets) {
		f.r.notef("getting SparkApplication %s: %v (retrying)", f.r.ref(), err)
	}
	f.getAgainIn(now, f.getB.next())
}

// getRefused retries a refused GET (401, 403, ...) for auth_grace before
// anything is decided. The EKS transport drops a token the server refused,
// so the next request carries a new one.
func (f *follower) getRefused(ctx context.Context, now time.Time, err error) (bool, *plugin.Result, error) {
	r := f.r
	if f.refusedSince.IsZero() {
		f.refusedSince = now
		r.notef("getting SparkApplication %s: %v (retrying for up to auth_grace %s)", r.ref(), err, r.cfg.AuthGrace)
	}
	if now.Sub(f.refusedSince) >= r.cfg.AuthGrace {
		return true, nil, r.lostTrack(ctx, "every get", err, now.Sub(f.refusedSince))
	}
	f.getAgainIn(now, min(f.getB.next(), max(time.Until(f.refusedSince.Add(r.cfg.AuthGrace)), time.Millisecond)))
	return false, nil, nil
}

func (f *follower) getAgainIn(now time.Time, d time.Duration) {
	f.nextGet = now.Add(d)
	f.getT.Reset(d)
}

// followFallback bounds how long follow waits for the informer's first
// LIST (one that hangs, or keeps failing) before reading the application
// with GETs.
const followFallback = time.Minute

// goneConfirmDelay is how long an application missing from a synced cache
// stays missing before a GET asks whether it is gone. It is long enough for the
// watch to deliver an application created just now, so that following
// costs no GET per job.
func goneConfirmDelay(poll time.Duration) time.Duration {
	return min(max(poll, time.Second), 10*time.Second)
}

// lostTrack ends a job whose application the API server keeps refusing to
// show. The application runs on, and its outcome is unknown. The host's
// Cleanup (durable, retried) deletes it later. what is what was refused.
func (r *run) lostTrack(ctx context.Context, what string, err error, refused time.Duration) error {
	r.stopLogs()
	return r.decideBlind(ctx, fmt.Sprintf("lost track of SparkApplication %s: the API server refused %s for %s (auth_grace %s): %v; it keeps running and its outcome is unknown (the agent's Cleanup looks at it again, and deletes it unless it completed)",
		r.ref(), what, refused.Round(time.Millisecond), r.cfg.AuthGrace, err))
}

// decideBlind ends the job outcome_unknown for msg, marked blind in the
// handle: decided by losing sight of the application, which may run on and
// complete. A Resume follows it again instead of reporting this, and
// Cleanup looks at it before deleting anything (lookBeforeDeleting).
func (r *run) decideBlind(ctx context.Context, msg string) error {
	r.h.Blind = true
	r.recordOutcome(ctx, outcomeUnknown, msg)
	r.notef("%s", msg)
	return plugin.Errorf(plugin.OutcomeUnknown, "sparkeks: %s", msg)
}

// observe takes in what the API server says about the application. done is
// true when the job has ended (res, err are its outcome) or following it
// cannot go on. withLog records the driver log's position in the handle
// (once per poll).
func (r *run) observe(ctx context.Context, app *unstructured.Unstructured, withLog bool, s *appSubscription) (done bool, res *plugin.Result, err error) {
	before := *r.h
	if !r.followUID(app) {
		return true, nil, r.gone(ctx)
	}
	st := statusOf(app)
	r.recordIDs(st)
	r.recordDriver(ctx, st, s)
	r.recordState(st)
	if withLog {
		r.recordLog()
	}
	if done, res, err := r.outcome(ctx, st, s); done {
		return true, res, err
	}
	// A Handle holds no slice or map: != compares all of it (a new log
	// position is a new pointer).
	if *r.h != before {
		if err := r.checkpoint(ctx); err != nil {
			return true, nil, err
		}
	}
	return false, nil, nil
}

// followUID follows the application by its name when the name belongs to
// another application now, as long as that one is of this attempt. It
// reports false when the application is not this attempt's.
func (r *run) followUID(app *unstructured.Unstructured) bool {
	uid := string(app.GetUID())
	if uid == r.h.UID {
		return true
	}
	if attempt, ok := attemptOf(app); !ok || attempt != r.job.Attempt {
		return false
	}
	r.h.UIDMismatch = fmt.Sprintf("followed uid %s; the name now has uid %s", r.h.UID, uid)
	r.notef("SparkApplication %s now has uid %s, not %s; following the one that exists", r.ref(), uid, r.h.UID)
	r.h.UID = uid
	return true
}

// recordIDs records the application's Spark ID (once it has one) and error
// message.
func (r *run) recordIDs(st appStatus) {
	r.h.SparkApplicationID = cmp.Or(st.SparkApplicationID, r.h.SparkApplicationID)
	r.h.ErrorMessage = st.ErrorMessage
}

// recordDriver records the application's driver pod and follows its log.
func (r *run) recordDriver(ctx context.Context, st appStatus, s *appSubscription) {
	if st.DriverPod != "" && st.DriverPod != r.h.DriverPod {
		// A new driver (the operator retried the submission), or the first
		// (no log followed nor copied yet). Its log starts over.
		r.stopLogs()
		r.h.Log = nil
		r.h.DriverPod = st.DriverPod
	}
	if r.logs == nil && r.h.DriverPod != "" {
		r.logs = startLogFollower(ctx, r.cl.kube, r.cfg.Namespace, r.h.DriverPod, r.cfg.PollInterval, r.rt.Stdout(), r.notef, r.h.Log,
			func() *corev1.Pod { p, _ := s.driverPod(); return p })
	}
	p, _ := s.driverPod() // one copy of the cached pod for both checks
	r.recordInterrupted(p)
	if !r.h.EverRunning {
		// The operator may lag behind its driver (down, crash-looping,
		// upgraded, behind in its workqueue): a driver that started is past
		// startup whatever the application's state still says.
		if driverStarted(p) {
			r.h.EverRunning = true
			r.notef("driver pod %s is %s while SparkApplication %s is still %s: spark-operator is behind; startup_timeout no longer applies",
				p.Name, p.Status.Phase, r.ref(), cmp.Or(st.State, "new"))
		}
	}
}

// recordState records the application's state, whether it ever ran, and
// since when it is UNKNOWN.
func (r *run) recordState(st appStatus) {
	if st.State != r.h.State {
		r.h.State = st.State
		r.notef("%s", stateNote(r.ref(), st))
	}
	if !isStartupState(st.State) && st.State != stateSubmissionFailed {
		r.h.EverRunning = true
	}
	switch {
	case phaseOf(st.State) != phaseUnknown:
		r.h.UnknownSince = nil
	case r.h.UnknownSince == nil:
		now := time.Now().UTC()
		r.h.UnknownSince = &now
	}
}

// stateNote says which state the application is in now.
func stateNote(ref string, st appStatus) string {
	return fmt.Sprintf("SparkApplication %s is %s", ref, cmp.Or(st.State, "-")) +
		ifSet(" (", st.SparkApplicationID, ")") + ifSet(": ", st.ErrorMessage, "")
}

// ifSet is s between before and after, or "" when s is.
func ifSet(before, s, after string) string {
	if s == "" {
		return ""
	}
	return before + s + after
}

// recordLog records how far the driver's log was copied.
func (r *run) recordLog() {
	if r.logs == nil {
		return
	}
	if pos, moved := r.logs.position(); moved {
		r.h.Log = &pos
	}
}

// recordInterrupted records a driver pod (p, as the cache holds it) seen
// deleted or evicted while it ran, once.
func (r *run) recordInterrupted(p *corev1.Pod) {
	if r.h.Interrupted != "" {
		return
	}
	if driverStarted(p) {
		if why := driverInterrupted(p); why != "" {
			r.h.Interrupted = why
			r.notef("%s", why)
		}
	}
}

// recordDriverGone records, for an application that ended FAILED, a driver
// pod that no longer exists. spark-operator leaves a failed driver's pod in
// place, so a pod gone before its application was deleted from outside:
// its kubelet recorded the container stopped (exit 143 or 137), and the
// pod went before the plugin saw it being deleted. Only the API server's
// "not found" counts. Any other answer leaves the outcome failed.
func (r *run) recordDriverGone(ctx context.Context, s *appSubscription) {
	if r.h.Interrupted != "" || r.h.DriverPod == "" {
		return
	}
	if p, synced := s.driverPod(); p != nil || !synced {
		return
	}
	_, err := r.cl.kube.CoreV1().Pods(r.cfg.Namespace).Get(ctx, r.h.DriverPod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.h.Interrupted = "driver pod " + r.h.DriverPod + " was deleted before its application ended"
		r.notef("%s", r.h.Interrupted)
	}
}

// outcome ends the job when the application's state decides it
// (decideOutcome): succeeded, failed, stuck before RUNNING, or UNKNOWN for
// unknown_grace.
func (r *run) outcome(ctx context.Context, st appStatus, s *appSubscription) (bool, *plugin.Result, error) {
	if st.State == stateFailed && st.ErrorMessage != driverPodNotFound {
		r.recordDriverGone(ctx, s)
	}
	d := decideOutcome(sight{
		State: st.State, ErrorMessage: st.ErrorMessage, Interrupted: r.h.Interrupted != "",
		Stuck:          decideStuck(st.State, r.h.EverRunning, r.h.CreatedAt, time.Now(), r.cfg.StartupTimeout),
		UnknownTooLong: r.h.UnknownSince != nil && time.Since(*r.h.UnknownSince) >= r.cfg.UnknownGrace,
	})
	var msg string
	switch d.Rule {
	case ruleRunning:
		return false, nil, nil
	case ruleCompleted:
		r.end(ctx, outcomeSucceeded, "")
		return true, r.result(), nil
	case ruleStuck:
		return true, nil, r.stuck(ctx, st, s)
	case ruleDriverVanished:
		msg = fmt.Sprintf("SparkApplication %s %s: %s: the driver pod vanished (deleted, or lost with its node), possibly after the query finished; the outcome is unknown",
			r.ref(), st.State, st.ErrorMessage)
	case ruleInterrupted:
		msg = fmt.Sprintf("SparkApplication %s %s: %s: %s, possibly after it did some or all of the query; the outcome is unknown",
			r.ref(), st.State, cmp.Or(st.ErrorMessage, "no error message"), r.h.Interrupted)
	case ruleUnknown:
		msg = fmt.Sprintf("SparkApplication %s has been in state UNKNOWN for %s (unknown_grace %s): spark-operator lost track of its driver; the outcome is unknown",
			r.ref(), time.Since(*r.h.UnknownSince).Round(time.Second), r.cfg.UnknownGrace)
	default: // ruleFailed
		msg = fmt.Sprintf("SparkApplication %s %s: %s", r.ref(), st.State, cmp.Or(st.ErrorMessage, "no error message"))
	}
	r.end(ctx, d.Outcome, msg)
	return true, nil, plugin.Errorf(d.Class, "sparkeks: %s", msg)
}

// end records the job's outcome once the driver's log is drained.
func (r *run) end(ctx context.Context, outcome, msg string) {
	if r.logs != nil {
		r.logs.finish(logDrain)
		pos, _ := r.logs.position()
		if !pos.Time.IsZero() {
			r.h.Log = &pos
		}
		r.logs = nil
	}
	r.recordOutcome(ctx, outcome, msg)
}

// recordOutcome checkpoints the job's outcome. A failed checkpoint is
// logged: the outcome is known all the same, and the agent records it.
func (r *run) recordOutcome(ctx context.Context, outcome, msg string) {
	r.h.Outcome, r.h.Message = outcome, msg
	if err := r.checkpoint(ctx); err != nil {
		r.p.log.Warn("checkpointing the outcome", "job", r.job.ID, "err", err)
	}
}

func (r *run) stopLogs() {
	if r.logs != nil {
		r.logs.abort()
		r.logs = nil
	}
}

// timedOut deletes the application and its ConfigMap and fails the job.
func (r *run) timedOut(ctx context.Context) error {
	r.stopLogs()
	return r.failAndDelete(ctx, fmt.Sprintf("timed out after %s", r.cfg.Timeout))
}

// stuck fails a job whose application did not reach RUNNING within
// startup_timeout of its creation, saying why (the driver pod's waiting
// reason, from the informer's cache, or that there is none), and deletes
// the application.
func (r *run) stuck(ctx context.Context, st appStatus, s *appSubscription) error {
	r.stopLogs()
	reason := fmt.Sprintf("no driver pod after %s (state %s)", r.cfg.StartupTimeout, cmp.Or(st.State, "new"))
	p, synced := s.driverPod()
	_, podsHealth := s.health()
	switch {
	case p != nil:
		reason = "driver pod " + p.Name + " " + podWaiting(p)
	case podsHealth.Err != nil:
		reason += fmt.Sprintf("; listing driver pods: %v", podsHealth.Err)
	case !synced:
		reason += "; the driver pods were not listed yet"
	}
	return r.failAndDelete(ctx, fmt.Sprintf("did not reach RUNNING within startup_timeout %s of its creation (state %s): %s", r.cfg.StartupTimeout, cmp.Or(st.State, "new"), reason))
}

// podWaiting says why a pod has not started: its containers' waiting
// reasons and messages (ImagePullBackOff, ...), else its phase and
// conditions.
func podWaiting(p *corev1.Pod) string {
	var parts []string
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, "container "+cs.Name+" waiting: "+w.Reason+ifSet(": ", w.Message, ""))
		}
	}
	if len(parts) == 0 {
		s := "is " + cmp.Or(string(p.Status.Phase), "Pending")
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// failAndDelete fails the job permanently for why, deleting its application
// (UID precondition) and ConfigMap. The failure is the truth whether or not
// the delete worked. When it did not, the message says the application may
// still run and the host's Cleanup (the plugin declares cleanup; the host
// queues it durably for every failed attempt and retries it) deletes it.
// The handle, checkpointed here, names the UID Cleanup deletes.
func (r *run) failAndDelete(ctx context.Context, why string) error {
	msg := "SparkApplication " + r.ref() + " " + why
	if err := deleteJobObjects(context.WithoutCancel(ctx), r.cl, r.cfg.Namespace, r.job.ID, r.h.UID, r.job.Attempt, r.callTimeout); err != nil {
		msg += fmt.Sprintf("; deleting it failed (%v): it may still be running until the agent's Cleanup, which retries, deletes it", err)
	} else {
		msg += "; deleted it"
	}
	r.notef("%s", msg)
	if r.h.Submitted {
		r.recordOutcome(ctx, outcomeFailed, msg)
	}
	return plugin.Errorf(plugin.Permanent, "sparkeks: %s", msg)
}

// Output is the job's result.
type Output struct {
	Name               string `json:"name"`
	Namespace          string `json:"namespace"`
	UID                string `json:"uid"`
	State              string `json:"state"`
	SparkApplicationID string `json:"spark_application_id"`
	DriverPod          string `json:"driver_pod"`
}

func (r *run) result() *plugin.Result {
	o := Output{
		Name: r.h.Name, Namespace: r.h.Namespace, UID: r.h.UID, State: r.h.State,
		SparkApplicationID: r.h.SparkApplicationID, DriverPod: r.h.DriverPod,
	}
	b, _ := json.Marshal(o) // plain strings: cannot fail
	msg := fmt.Sprintf("SparkApplication %s/%s %s", o.Namespace, o.Name, o.State) + ifSet(" (", o.SparkApplicationID, ")")
	return &plugin.Result{Output: b, Message: msg}
}

// ownedBy reports whether refs name the object with uid.
func ownedBy(refs []metav1.OwnerReference, uid string) bool {
	return slices.ContainsFunc(refs, func(ref metav1.OwnerReference) bool { return string(ref.UID) == uid })
}
