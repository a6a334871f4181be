package sparkeks

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// An outcome decided blind is one the plugin decided because the API server
// refused it past auth_grace (Handle.Blind): the job ended outcome_unknown
// while its application ran on, and may complete. The host stores that end
// and queues Cleanup, so a Cleanup that deleted the application would
// destroy a success nobody has seen. Instead Cleanup looks at it first
// (decideBlindCleanup), and Resume follows it again (reattach).

// lookBeforeDeleting is Cleanup's look at the application of an attempt
// whose outcome was decided blind. keep is true when it is to be left
// alone (it completed). err is Retriable while it cannot be seen or still
// runs within its job's timeout, so the host's queue asks again. Otherwise
// Cleanup deletes as usual.
func (p *Plugin) lookBeforeDeleting(ctx context.Context, cl *clients, cfg Config, job *plugin.Job, h *Handle) (keep bool, err error) {
	ref := h.Namespace + "/" + h.Name
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	app, err := cl.dyn.Resource(GVR).Namespace(h.Namespace).Get(cctx, h.Name, metav1.GetOptions{})
	cancel()
	if err != nil && !apierrors.IsNotFound(err) {
		return false, plugin.Errorf(plugin.Retriable,
			"sparkeks: the outcome of job %s was decided while the API server refused the plugin; SparkApplication %s is not deleted before it has been seen (it may have completed): getting it: %v",
			job.ID, ref, err)
	}
	found := err == nil && attemptsApp(app, h, max(job.Attempt, 1))
	var st appStatus
	if found {
		st = statusOf(app)
	}
	var deadline time.Time
	if cfg.Timeout > 0 {
		deadline = h.CreatedAt.Add(cfg.Timeout)
	}
	act, why := decideBlindCleanup(found, st, time.Now(), deadline)
	switch act {
	case blindKeep:
		p.log.Warn("cleanup: the job's outcome was decided blind (outcome_unknown) but its SparkApplication completed; keeping it (spark-operator deletes it time_to_live after its end). Requeue the job to record the success: the requeue adopts the completed application without running the query again",
			"job", job.ID, "attempt", job.Attempt, "app", ref, "uid", h.UID)
		return true, nil
	case blindWait:
		return false, plugin.Errorf(plugin.Retriable,
			"sparkeks: SparkApplication %s: %s; its job's outcome was decided while the API server refused the plugin, so it is not deleted %s",
			ref, why, untilNote(cfg.Timeout, deadline))
	}
	p.log.Info("cleanup: looked at the application of an outcome decided blind; deleting it", "job", job.ID, "app", ref, "why", why)
	return false, nil
}

// attemptsApp reports whether app is the one h recorded (by UID), or, when
// h has no UID (the create's answer was lost), the attempt's by its label.
func attemptsApp(app *unstructured.Unstructured, h *Handle, attempt int) bool {
	if h.UID != "" {
		return string(app.GetUID()) == h.UID
	}
	a, ok := attemptOf(app)
	return ok && a == attempt
}

// untilNote says until when a running application is kept.
func untilNote(timeout time.Duration, deadline time.Time) string {
	if deadline.IsZero() {
		return "before it ends (its job has no timeout)"
	}
	return fmt.Sprintf("before it ends or its timeout %s passes (at %s)", timeout, deadline.UTC().Format(time.RFC3339))
}
