package kubetest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Spark conf keys a test sets (through the job's spark_conf) to script what
// the simulated operator does with an application.
const (
	// SimOutcome: completed (default), failed, submission_failed, unknown,
	// hang (RUNNING for ever), driver_lost (the driver pod is deleted while
	// RUNNING: "driver pod not found"), image_pull (SUBMITTED for ever, the
	// driver pod's container waiting in ImagePullBackOff).
	SimOutcome = "tether.sim.outcome"
	SimMessage = "tether.sim.message" // errorMessage for failed / submission_failed
	SimSubmit  = "tether.sim.submit"  // delay before SUBMITTED (default 100ms)
	SimRun     = "tether.sim.run"     // time spent RUNNING (default 500ms)
)

// Simulator moves SparkApplications through the states spark-operator would
// (→ SUBMITTED with a sparkApplicationId and a driver pod object → RUNNING →
// COMPLETED / FAILED, or SUBMISSION_FAILED), and finishes foreground
// deletions as the garbage collector would (envtest runs no controller
// manager). It checks, as the driver would need, that the query ConfigMap
// exists and is owned by the application. When it is not, the application
// fails with a message saying so.
type Simulator struct {
	dyn dynamic.Interface
	cs  kubernetes.Interface
	log *slog.Logger

	mu      sync.Mutex
	uids    map[string]map[types.UID]bool // namespace/name → every UID seen
	running map[types.UID]context.CancelFunc
}

// NewSimulator returns a simulator for env. Run starts it.
func NewSimulator(env *Env, log *slog.Logger) *Simulator {
	return &Simulator{dyn: env.Dynamic, cs: env.Clientset, log: log,
		uids: map[string]map[types.UID]bool{}, running: map[types.UID]context.CancelFunc{}}
}

// Created is how many distinct SparkApplications (by UID) were ever seen
// under namespace/name.
func (s *Simulator) Created(namespace, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uids[namespace+"/"+name])
}

// Run watches every SparkApplication until ctx ends. It lists first, so
// nothing created before Run is missed, and re-watches from the last seen
// resourceVersion when a watch ends.
func (s *Simulator) Run(ctx context.Context) error {
	res := s.dyn.Resource(SparkApplications)
	// The first list is retried like the watch. Under load the apiserver
	// can refuse it for a moment, and a simulator that gave up then left a
	// test waiting for applications nobody drives (seen in make test).
	list, err := res.List(ctx, metav1.ListOptions{})
	for err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("simulator: listing SparkApplications: %w", err)
		}
		s.log.Warn("simulator: list", "err", err)
		if !sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("simulator: listing SparkApplications: %w", err)
		}
		list, err = res.List(ctx, metav1.ListOptions{})
	}
	for i := range list.Items {
		s.observe(ctx, &list.Items[i])
	}
	rv := list.GetResourceVersion()
	for ctx.Err() == nil {
		w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			s.log.Warn("simulator: watch", "err", err)
			if !sleep(ctx, 200*time.Millisecond) {
				break
			}
			continue
		}
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				if ev.Type == watch.Error {
					rv = "" // too old: start from now
				}
				continue
			}
			rv = u.GetResourceVersion()
			if ev.Type == watch.Deleted {
				s.forget(u.GetUID())
				continue
			}
			if ev.Type != watch.Bookmark {
				s.observe(ctx, u)
			}
		}
		w.Stop()
	}
	s.mu.Lock()
	for _, cancel := range s.running {
		cancel()
	}
	s.mu.Unlock()
	return nil
}

func (s *Simulator) observe(ctx context.Context, u *unstructured.Unstructured) {
	key := u.GetNamespace() + "/" + u.GetName()
	s.mu.Lock()
	if s.uids[key] == nil {
		s.uids[key] = map[types.UID]bool{}
	}
	s.uids[key][u.GetUID()] = true
	_, driving := s.running[u.GetUID()]
	var actx context.Context
	if !driving && u.GetDeletionTimestamp() == nil {
		var cancel context.CancelFunc
		actx, cancel = context.WithCancel(ctx)
		s.running[u.GetUID()] = cancel
	}
	s.mu.Unlock()
	if u.GetDeletionTimestamp() != nil {
		s.forget(u.GetUID())
		go s.collect(ctx, u)
		return
	}
	if actx != nil {
		state, _, _ := unstructured.NestedString(u.Object, "status", "applicationState", "state")
		if state == "" {
			go s.drive(actx, u.GetNamespace(), u.GetName(), u.GetUID(), u)
		}
	}
}

func (s *Simulator) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel, ok := s.running[uid]; ok {
		cancel()
		delete(s.running, uid)
	}
}

// drive plays spark-operator for one new application.
func (s *Simulator) drive(ctx context.Context, ns, name string, uid types.UID, u *unstructured.Unstructured) {
	conf, _, _ := unstructured.NestedStringMap(u.Object, "spec", "sparkConf")
	outcome := conf[SimOutcome]
	if outcome == "" {
		outcome = "completed"
	}
	submit := durationOr(conf[SimSubmit], 100*time.Millisecond)
	run := durationOr(conf[SimRun], 500*time.Millisecond)
	if !sleep(ctx, submit) {
		return
	}
	restart, _, _ := unstructured.NestedString(u.Object, "spec", "restartPolicy", "type")
	if outcome == "submission_failed" {
		s.setState(ctx, ns, name, uid, "SUBMISSION_FAILED", conf[SimMessage], nil)
		// spark-operator v2.5.2 reconcileFailedSubmissionSparkApplication.
		// With no retry due (restartPolicy Never, pkg/util ShouldRetry) the
		// application becomes FAILED with a terminationTime, keeping its
		// errorMessage.
		if restart == "" || restart == "Never" {
			if sleep(ctx, 50*time.Millisecond) {
				s.setState(ctx, ns, name, uid, "FAILED", conf[SimMessage], nil)
			}
		}
		return
	}
	if msg := s.checkQuery(ctx, ns, name, uid); msg != "" {
		s.setState(ctx, ns, name, uid, "FAILED", msg, nil)
		return
	}
	driver := name + "-driver"
	appID := "spark-" + string(uid)[:8]
	if err := s.createDriverPod(ctx, ns, driver, name, uid, u.GetLabels()); err != nil {
		s.log.Warn("simulator: creating driver pod", "app", name, "err", err)
	}
	s.setState(ctx, ns, name, uid, "SUBMITTED", "", map[string]any{
		"sparkApplicationId": appID,
		"submissionID":       string(uid),
		"driverInfo":         map[string]any{"podName": driver},
	})
	if outcome == "image_pull" {
		// The kubelet cannot pull the image. The pod stays Pending and the
		// operator keeps the application SUBMITTED (DriverStatePending →
		// ApplicationStateSubmitted, pkg/util DriverStateToApplicationState).
		s.setPodWaiting(ctx, ns, driver, "ImagePullBackOff", `Back-off pulling image "`+conf[SimMessage]+`"`)
		return
	}
	if !sleep(ctx, 50*time.Millisecond) {
		return
	}
	s.setState(ctx, ns, name, uid, "RUNNING", "", nil)
	if !sleep(ctx, run) {
		return
	}
	// The operator passes through FAILING / SUCCEEDING (the driver pod's
	// phase, DriverStateToApplicationState) before the terminal state
	// (reconcileFailing/SucceedingSparkApplication with restartPolicy Never).
	switch outcome {
	case "failed":
		s.setState(ctx, ns, name, uid, "FAILING", conf[SimMessage], nil)
		if sleep(ctx, 20*time.Millisecond) {
			s.setState(ctx, ns, name, uid, "FAILED", conf[SimMessage], nil)
		}
	case "driver_lost":
		// updateDriverState: no driver pod → FAILING "driver pod not
		// found"; reconcileFailingSparkApplication → FAILED, message kept.
		_ = s.cs.CoreV1().Pods(ns).Delete(ctx, driver, metav1.DeleteOptions{})
		s.setState(ctx, ns, name, uid, "FAILING", "driver pod not found", nil)
		if sleep(ctx, 20*time.Millisecond) {
			s.setState(ctx, ns, name, uid, "FAILED", "driver pod not found", nil)
		}
	case "unknown":
		s.setState(ctx, ns, name, uid, "UNKNOWN", "", nil)
	case "hang":
	default:
		s.setState(ctx, ns, name, uid, "SUCCEEDING", "", nil)
		if sleep(ctx, 20*time.Millisecond) {
			s.setState(ctx, ns, name, uid, "COMPLETED", "", nil)
		}
	}
}

// setPodWaiting gives a pod's containers a waiting state, as the kubelet
// reports an image it cannot pull.
func (s *Simulator) setPodWaiting(ctx context.Context, ns, pod, reason, msg string) {
	p, err := s.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return
	}
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
		})
	}
	if _, err := s.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		s.log.Warn("simulator: setting pod status", "pod", pod, "err", err)
	}
}

// checkQuery waits briefly for the query ConfigMap, as a driver pod's volume
// mount would, and says what is wrong with it ("" when it is fine).
func (s *Simulator) checkQuery(ctx context.Context, ns, name string, uid types.UID) string {
	cmName := name + "-query"
	deadline := time.Now().Add(5 * time.Second)
	for {
		cm, err := s.cs.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		switch {
		case err == nil:
			owned := false
			for _, o := range cm.OwnerReferences {
				owned = owned || (o.UID == uid && o.Kind == "SparkApplication")
			}
			if !owned {
				return "configmap " + cmName + " is not owned by the application"
			}
			if cm.Data["query.sql"] == "" {
				return "configmap " + cmName + " has no query.sql"
			}
			return ""
		case !apierrors.IsNotFound(err) || time.Now().After(deadline):
			return "driver: query configmap " + cmName + ": " + err.Error()
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ""
		}
	}
}

// createDriverPod creates the driver pod with the application's labels
// (spark-operator v2.5.2 copies them onto it: submission.go
// driverConfOption) and those spark-operator and Spark add.
func (s *Simulator) createDriverPod(ctx context.Context, ns, pod, app string, uid types.UID, appLabels map[string]string) error {
	ctrl := true
	labels := map[string]string{}
	for k, v := range appLabels {
		labels[k] = v
	}
	labels["spark-role"], labels["sparkoperator.k8s.io/app-name"] = "driver", app
	_, err := s.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod, Namespace: ns,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: SparkApplications.GroupVersion().String(), Kind: "SparkApplication", Name: app, UID: uid, Controller: &ctrl}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "spark-kubernetes-driver", Image: "spark"}}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// setState writes status.applicationState (and extra status fields),
// retrying conflicts. It does nothing once the application is gone or
// replaced.
func (s *Simulator) setState(ctx context.Context, ns, name string, uid types.UID, state, msg string, extra map[string]any) {
	res := s.dyn.Resource(SparkApplications).Namespace(ns)
	for ctx.Err() == nil {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil || u.GetUID() != uid {
			return
		}
		status, _, _ := unstructured.NestedMap(u.Object, "status")
		if status == nil {
			status = map[string]any{}
		}
		for k, v := range extra {
			status[k] = v
		}
		// The real CRD requires status.driverInfo (the operator's
		// SparkApplicationStatus.DriverInfo has no omitempty).
		if _, ok := status["driverInfo"]; !ok {
			status["driverInfo"] = map[string]any{}
		}
		status["applicationState"] = map[string]any{"state": state, "errorMessage": msg}
		if state == "FAILING" || state == "SUCCEEDING" {
			status["terminationTime"] = time.Now().UTC().Format(time.RFC3339)
		}
		if state == "COMPLETED" || state == "FAILED" {
			status["terminationTime"] = time.Now().UTC().Format(time.RFC3339)
		}
		u.Object["status"] = status
		_, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !apierrors.IsConflict(err) {
			s.log.Warn("simulator: updating status", "app", name, "state", state, "err", err)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return
		}
	}
}

// collect finishes a deletion as the garbage collector would. Dependents
// (the driver pod, the query ConfigMap) go first, then the foregroundDeletion
// finalizer is removed so the application itself goes.
func (s *Simulator) collect(ctx context.Context, u *unstructured.Unstructured) {
	ns, uid := u.GetNamespace(), u.GetUID()
	pods, err := s.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			if ownedBy(p.OwnerReferences, uid) {
				_ = s.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
			}
		}
	}
	cms, err := s.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, c := range cms.Items {
			if ownedBy(c.OwnerReferences, uid) {
				_ = s.cs.CoreV1().ConfigMaps(ns).Delete(ctx, c.Name, metav1.DeleteOptions{})
			}
		}
	}
	res := s.dyn.Resource(SparkApplications).Namespace(ns)
	for ctx.Err() == nil {
		cur, err := res.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil || cur.GetUID() != uid {
			return
		}
		var keep []string
		for _, f := range cur.GetFinalizers() {
			if f != metav1.FinalizerDeleteDependents && f != metav1.FinalizerOrphanDependents {
				keep = append(keep, f)
			}
		}
		if len(keep) == len(cur.GetFinalizers()) {
			return
		}
		cur.SetFinalizers(keep)
		_, err = res.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !apierrors.IsConflict(err) {
			s.log.Warn("simulator: removing finalizer", "app", u.GetName(), "err", err)
			return
		}
	}
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func durationOr(s string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(s); err == nil {
		return d
	}
	if ms, err := strconv.Atoi(s); err == nil {
		return time.Duration(ms) * time.Millisecond
	}
	return def
}

// sleep waits d or until ctx ends. false means ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
