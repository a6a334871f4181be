package kubetest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Driver pod annotations that script the kubelet stand-in. The stand-in
// spark-submit (internal/kubetest/sparksubmit) copies every tether.sim.*
// spark conf to the driver pod's annotations, so a test sets them in the
// SparkApplication's spec.sparkConf (or spec.driver.annotations). The
// outcome, run and message keys are the Simulator's (SimOutcome, SimRun,
// SimMessage), read here as:
//
//	tether.sim.outcome    completed (default): exit 0, phase Succeeded
//	                      failed: exit KubeletExitCode, phase Failed
//	                      hang: Running until deleted
//	                      vanish: the pod is deleted (grace 0) after the run
//	                      evicted: after the run, exit 137, phase Failed,
//	                      reason Evicted (node pressure)
//	                      image_pull: Pending, waiting ErrImagePull then
//	                      ImagePullBackOff, forever
//	tether.sim.run        how long the container runs (default 200ms)
//	tether.sim.message    failed: the container's termination message, and
//	                      the driver's last log line
//	tether.sim.pull       wait this long in ErrImagePull/ImagePullBackOff
//	                      before starting (any outcome)
//	tether.sim.exit_code  failed: the exit code (default 1)
//	tether.sim.log_lines  the driver prints this many lines, spread over the
//	                      run ("driver line i of n")
const (
	KubeletPull     = "tether.sim.pull"
	KubeletExitCode = "tether.sim.exit_code"
	KubeletLogLines = "tether.sim.log_lines"
)

// DriverContainer is the container Spark names the driver's, and the one
// spark-operator reads the exit code of.
const DriverContainer = "spark-kubernetes-driver"

// Kubelet stands in for a node's kubelet. It registers a Ready Node, binds
// every unscheduled pod to it (pods/binding: there is no scheduler), keeps a
// pod whose ConfigMap volume's ConfigMap is missing Pending in
// ContainerCreating until it appears (printing "query: <first line>" first
// in the driver's log when the driver mounts a ConfigMap with the key
// QueryKey), moves each pod's status as its annotations script, finishes graceful pod
// deletions (a running pod's containers recorded ended by SIGTERM, exit
// 143, the pod Failed, then deleted with grace 0, as the kubelet does once
// the containers are gone) and serves the containers' logs on /containerLogs over HTTPS,
// where the apiserver proxies pods/log.
type Kubelet struct {
	Node string

	cs  kubernetes.Interface
	log *slog.Logger
	srv *http.Server
	ln  net.Listener

	mu    sync.Mutex
	pods  map[types.UID]*podRun
	logs  map[string]*containerLog // namespace/name → the latest pod's
	bound map[types.UID]bool
	wg    sync.WaitGroup
}

type podRun struct {
	cancel   context.CancelFunc
	deleting bool
}

// StartKubelet registers the node and starts serving. It runs until ctx
// ends, and Stop waits for it.
func StartKubelet(ctx context.Context, env *Env, node string, log *slog.Logger) (*Kubelet, error) {
	cert, err := tls.LoadX509KeyPair(env.kubeletCert, env.kubeletKey)
	if err != nil {
		return nil, fmt.Errorf("kubelet: serving certificate: %w", err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("kubelet: listen: %w", err)
	}
	k := &Kubelet{Node: node, cs: env.Clientset, log: log, ln: ln,
		pods: map[types.UID]*podRun{}, logs: map[string]*containerLog{}, bound: map[types.UID]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/{namespace}/{pod}/{container}", k.serveLogs)
	k.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = k.srv.Serve(ln) }()

	if err := k.register(ctx, ln.Addr().(*net.TCPAddr).Port); err != nil {
		k.srv.Close()
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(env.Clientset, 0)
	inf := factory.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.sync(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { k.sync(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				k.forget(p)
			}
		},
	})
	if err != nil {
		k.srv.Close()
		return nil, fmt.Errorf("kubelet: pod informer: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		k.srv.Close()
		return nil, errors.New("kubelet: pod informer did not sync")
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		<-ctx.Done()
		factory.Shutdown()
		k.mu.Lock()
		for _, r := range k.pods {
			r.cancel()
		}
		k.mu.Unlock()
	}()
	return k, nil
}

// Stop stops serving logs and waits for the pod scripts, once the context
// StartKubelet was given has ended.
func (k *Kubelet) Stop() {
	k.srv.Close()
	k.wg.Wait()
}

func (k *Kubelet) register(ctx context.Context, port int) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.Node, Labels: map[string]string{
		"kubernetes.io/hostname": k.Node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubelet: registering node %s: %w", k.Node, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods:   resource.MustParse("1000"),
		}
		n.Status = corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kubelet stand-in is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.Node}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
			NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "tether-kubelet-stand-in", OperatingSystem: "linux", Architecture: "amd64"},
		}
		_, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func (k *Kubelet) sync(ctx context.Context, pod *corev1.Pod) {
	if ctx.Err() != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case pod.Spec.NodeName == "":
		if k.bound[pod.UID] || pod.DeletionTimestamp != nil {
			return
		}
		k.bound[pod.UID] = true
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			err := k.cs.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: k.Node},
			}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				k.log.Warn("kubelet: binding", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			}
		}()
	case pod.Spec.NodeName != k.Node:
	case pod.DeletionTimestamp != nil:
		r := k.pods[pod.UID]
		if r != nil && r.deleting {
			return
		}
		if r == nil {
			r = &podRun{cancel: func() {}}
			k.pods[pod.UID] = r
		}
		r.deleting = true
		r.cancel()
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			k.finishDeletion(ctx, pod)
		}()
	case k.pods[pod.UID] == nil:
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return
		}
		runCtx, cancel := context.WithCancel(ctx)
		k.pods[pod.UID] = &podRun{cancel: cancel}
		cl := newContainerLog(pod)
		k.logs[pod.Namespace+"/"+pod.Name] = cl
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			defer cl.finish()
			k.run(runCtx, pod, cl)
		}()
	}
}

func (k *Kubelet) forget(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r := k.pods[pod.UID]; r != nil {
		r.cancel()
	}
	delete(k.pods, pod.UID)
	delete(k.bound, pod.UID)
	if cl := k.logs[pod.Namespace+"/"+pod.Name]; cl != nil && cl.uid == pod.UID {
		cl.finish()
		delete(k.logs, pod.Namespace+"/"+pod.Name)
	}
}

// finishDeletion is the kubelet's part of a graceful deletion. A running
// pod's containers are stopped by SIGTERM and recorded so (exit 143, the
// pod Failed), as a kubelet does before the object goes. Then the pod
// object goes (grace 0).
func (k *Kubelet) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	k.stopForDeletion(ctx, pod)
	zero := int64(0)
	err := k.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.log.Warn("kubelet: finishing deletion", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// sigtermExit is the exit code of a container that SIGTERM ended (128+15).
const sigtermExit = 143

// stopForDeletion records a running pod's containers as ended by SIGTERM
// and the pod Failed (restartPolicy Never). A pod that is not running is
// left as it is.
func (k *Kubelet) stopForDeletion(ctx context.Context, pod *corev1.Pod) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != pod.UID || p.Status.Phase != corev1.PodRunning {
			return nil
		}
		var started metav1.Time
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
			started = p.Status.ContainerStatuses[0].State.Running.StartedAt
		}
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = conditions(false)
		p.Status.ContainerStatuses = containerStatuses(p, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: sigtermExit, Reason: "Error", StartedAt: started, FinishedAt: metav1.Now()}}, false)
		_, err = k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.log.Warn("kubelet: stopping a pod being deleted", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// run plays the pod's script.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod, cl *containerLog) {
	ann := pod.Annotations
	outcome := ann[SimOutcome]
	if outcome == "" {
		outcome = "completed"
	}
	runFor := annDuration(ann[SimRun], 200*time.Millisecond)
	lines, _ := strconv.Atoi(ann[KubeletLogLines])
	exitCode := int32(1)
	if v, err := strconv.Atoi(ann[KubeletExitCode]); err == nil {
		exitCode = int32(v)
	}
	start := metav1.Now()
	podIP := fmt.Sprintf("10.244.%d.%d", (start.Nanosecond()>>8)%250+1, start.Nanosecond()%250+1)

	waiting := func(reason, message string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.HostIP, p.Status.StartTime = "127.0.0.1", &start
			p.Status.Conditions = conditions(false)
			p.Status.ContainerStatuses = containerStatuses(p, corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}, false)
		}
	}
	if !k.update(ctx, pod, waiting("ContainerCreating", "")) {
		return
	}
	// The volumes first. A pod whose ConfigMap volume's ConfigMap does not
	// exist stays Pending in ContainerCreating (a FailedMount event), the
	// mount retried until it appears, as a real kubelet does.
	query, ok := k.mountConfigMaps(ctx, pod, cl)
	if !ok {
		return
	}
	image := ""
	if len(pod.Spec.Containers) > 0 {
		image = pod.Spec.Containers[0].Image
	}
	if pull, ok := ann[KubeletPull]; ok || outcome == "image_pull" {
		d := annDuration(pull, -1)
		if outcome == "image_pull" {
			d = -1
		}
		msg := fmt.Sprintf("rpc error: code = NotFound desc = failed to pull and unpack image %q: not found", image)
		cl.setWaiting("ErrImagePull")
		if !k.update(ctx, pod, waiting("ErrImagePull", msg)) {
			return
		}
		first := 100 * time.Millisecond
		if d >= 0 && d < first {
			first = d
		}
		if !sleep(ctx, first) {
			return
		}
		cl.setWaiting("ImagePullBackOff")
		if !k.update(ctx, pod, waiting("ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q", image))) {
			return
		}
		if d < 0 {
			<-ctx.Done()
			return
		}
		if !sleep(ctx, d-first) {
			return
		}
	}

	started := metav1.Now()
	if !k.update(ctx, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.HostIP, p.Status.PodIP, p.Status.StartTime = "127.0.0.1", podIP, &start
		p.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
		p.Status.Conditions = conditions(true)
		p.Status.ContainerStatuses = containerStatuses(p, corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{StartedAt: started}}, true)
	}) {
		return
	}
	cl.start()
	if query != "" {
		cl.print("query: " + query)
	}
	for i := 1; i <= lines; i++ {
		if !sleep(ctx, runFor/time.Duration(lines+1)) {
			return
		}
		cl.print(fmt.Sprintf("driver line %d of %d", i, lines))
	}
	if outcome == "hang" {
		<-ctx.Done()
		return
	}
	if !sleep(ctx, runFor-runFor/time.Duration(lines+1)*time.Duration(lines)) {
		return
	}
	switch outcome {
	case "vanish":
		zero := int64(0)
		err := k.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			k.log.Warn("kubelet: vanishing", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
		return
	case "failed":
		msg := ann[SimMessage]
		if msg != "" {
			cl.print(msg)
		}
		k.terminate(ctx, pod, corev1.PodFailed, exitCode, "Error", msg, started)
	case "evicted":
		// Node-pressure eviction: the kubelet kills the containers and
		// marks the pod Failed with reason Evicted, in one status update.
		// The object stays.
		k.terminateAs(ctx, pod, 137, started, "Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi.")
	default:
		k.terminate(ctx, pod, corev1.PodSucceeded, 0, "Completed", "", started)
	}
}

// QueryKey is the ConfigMap key the kubelet stand-in reads a driver's query
// from (tether's sparkeks plugin stores the query under it). When the
// driver container mounts a ConfigMap holding it, the driver's log starts
// with "query: " and the query's first line, so a test sees that the query
// reached the driver.
const QueryKey = "query.sql"

// mountRetry is how often the stand-in retries a ConfigMap volume whose
// ConfigMap is missing.
const mountRetry = 100 * time.Millisecond

// mountConfigMaps waits until every ConfigMap the pod's volumes name (the
// optional ones aside) exists. query is the first line of the QueryKey of
// a ConfigMap the driver container mounts ("" when none). ok is false when
// ctx ended or the pod went away first.
func (k *Kubelet) mountConfigMaps(ctx context.Context, pod *corev1.Pod, cl *containerLog) (query string, ok bool) {
	mounted := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		if c.Name != cl.container {
			continue
		}
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
		}
	}
	warned := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		src := v.ConfigMap
		if src == nil {
			continue
		}
		for {
			cm, err := k.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.Name, metav1.GetOptions{})
			if err == nil {
				if q, has := cm.Data[QueryKey]; has && mounted[v.Name] && query == "" {
					query, _, _ = strings.Cut(q, "\n")
					query = strings.TrimSpace(query)
				}
				break
			}
			if ctx.Err() != nil {
				return "", false
			}
			if apierrors.IsNotFound(err) && src.Optional != nil && *src.Optional {
				break
			}
			if apierrors.IsNotFound(err) && !warned[v.Name] {
				warned[v.Name] = true
				k.event(ctx, pod, "FailedMount", fmt.Sprintf("MountVolume.SetUp failed for volume %q : configmap %q not found", v.Name, src.Name))
			} else if !apierrors.IsNotFound(err) {
				k.log.Warn("kubelet: reading ConfigMap", "pod", pod.Namespace+"/"+pod.Name, "configmap", src.Name, "err", err)
			}
			if !sleep(ctx, mountRetry) {
				return "", false
			}
			// Still the same pod, not being deleted?
			p, err := k.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil && apierrors.IsNotFound(err) || err == nil && (p.UID != pod.UID || p.DeletionTimestamp != nil) {
				return "", false
			}
		}
	}
	return query, true
}

// event records a Warning event on the pod, as the kubelet does.
func (k *Kubelet) event(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	now := metav1.Now()
	_, err := k.cs.CoreV1().Events(pod.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: k.Node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil && ctx.Err() == nil {
		k.log.Warn("kubelet: event", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

func (k *Kubelet) terminate(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase, code int32, reason, msg string, started metav1.Time) {
	k.update(ctx, pod, ended(phase, code, reason, msg, started))
}

// terminateAs ends the pod Failed with the container's exit code and the
// pod's own status reason and message (an eviction's).
func (k *Kubelet) terminateAs(ctx context.Context, pod *corev1.Pod, code int32, started metav1.Time, podReason, podMessage string) {
	end := ended(corev1.PodFailed, code, "Error", "", started)
	k.update(ctx, pod, func(p *corev1.Pod) {
		end(p)
		p.Status.Reason, p.Status.Message = podReason, podMessage
	})
}

// ended is the status change of a pod whose containers ended.
func ended(phase corev1.PodPhase, code int32, reason, msg string, started metav1.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = phase
		p.Status.Conditions = conditions(false)
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
				p.Status.Conditions[i].Reason = "PodCompleted"
			}
		}
		p.Status.ContainerStatuses = containerStatuses(p, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, Message: msg, StartedAt: started, FinishedAt: metav1.Now()}}, false)
	}
}

// update changes the pod's status. It returns false when the pod is gone or
// ctx ended.
func (k *Kubelet) update(ctx context.Context, pod *corev1.Pod, change func(*corev1.Pod)) bool {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != pod.UID || p.DeletionTimestamp != nil {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		change(p)
		_, err = k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			k.log.Warn("kubelet: pod status", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
		return false
	}
	return ctx.Err() == nil
}

func conditions(ready bool) []corev1.PodCondition {
	now := metav1.Now()
	r := corev1.ConditionFalse
	if ready {
		r = corev1.ConditionTrue
	}
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: r, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: r, LastTransitionTime: now},
	}
}

func containerStatuses(p *corev1.Pod, state corev1.ContainerState, ready bool) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		s := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: state, Ready: ready}
		if state.Running != nil || state.Terminated != nil {
			s.ImageID = "docker-pullable://" + c.Image
			s.ContainerID = "containerd://" + strings.ReplaceAll(string(p.UID), "-", "")
			started := state.Running != nil
			s.Started = &started
		}
		out = append(out, s)
	}
	return out
}

func annDuration(s string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(s); err == nil {
		return d
	}
	return def
}

// containerLog is what the driver container printed, with the time of each
// line.
type containerLog struct {
	uid       types.UID
	container string

	mu      sync.Mutex
	lines   []logLine
	started bool
	waiting string
	done    bool
	changed chan struct{} // closed and replaced on every change
}

type logLine struct {
	at   time.Time
	text string
}

func newContainerLog(pod *corev1.Pod) *containerLog {
	c := DriverContainer
	if len(pod.Spec.Containers) > 0 {
		c = pod.Spec.Containers[0].Name
		for _, x := range pod.Spec.Containers {
			if x.Name == DriverContainer {
				c = x.Name
			}
		}
	}
	return &containerLog{uid: pod.UID, container: c, waiting: "ContainerCreating", changed: make(chan struct{})}
}

func (l *containerLog) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *containerLog) setWaiting(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting = reason
}

func (l *containerLog) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = true
	l.notify()
}

func (l *containerLog) print(text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, logLine{at: time.Now(), text: text})
	l.notify()
}

func (l *containerLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.done = true
		l.notify()
	}
}

// rfc3339NanoFixed is the kubelet's timestamp format (fixed nine digits).
const rfc3339NanoFixed = "2006-01-02T15:04:05.000000000Z07:00"

// serveLogs answers /containerLogs/<namespace>/<pod>/<container> as the
// kubelet does, honouring follow, timestamps, sinceTime, sinceSeconds,
// tailLines and limitBytes.
func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	k.mu.Lock()
	cl := k.logs[ns+"/"+name]
	k.mu.Unlock()
	if cl == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s not found", ns, name), http.StatusNotFound)
		return
	}
	if container != cl.container {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", container, name), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	follow := q.Get("follow") == "true"
	timestamps := q.Get("timestamps") == "true"
	var since time.Time
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, "invalid sinceTime: "+err.Error(), http.StatusBadRequest)
			return
		}
		since = t
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			http.Error(w, "invalid sinceSeconds: "+err.Error(), http.StatusBadRequest)
			return
		}
		since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	tail := -1
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			http.Error(w, "invalid tailLines: "+err.Error(), http.StatusBadRequest)
			return
		}
		tail = n
	}
	limit := int64(-1)
	if v := q.Get("limitBytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			http.Error(w, "invalid limitBytes: "+err.Error(), http.StatusBadRequest)
			return
		}
		limit = n
	}

	cl.mu.Lock()
	if !cl.started {
		reason := cl.waiting
		cl.mu.Unlock()
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %s", container, name, reason), http.StatusBadRequest)
		return
	}
	var pending []logLine
	for _, l := range cl.lines {
		if since.IsZero() || !l.at.Before(since) {
			pending = append(pending, l)
		}
	}
	if tail >= 0 && len(pending) > tail {
		pending = pending[len(pending)-tail:]
	}
	next := len(cl.lines)
	cl.mu.Unlock()

	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flusher, _ := w.(http.Flusher)
	var written int64
	write := func(ls []logLine) bool {
		for _, l := range ls {
			s := l.text + "\n"
			if timestamps {
				s = l.at.UTC().Format(rfc3339NanoFixed) + " " + s
			}
			if limit >= 0 && written+int64(len(s)) > limit {
				s = s[:limit-written]
			}
			n, err := bw.WriteString(s)
			written += int64(n)
			if err != nil || (limit >= 0 && written >= limit) {
				_ = bw.Flush()
				return false
			}
		}
		if bw.Flush() != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !write(pending) || !follow {
		return
	}
	for {
		cl.mu.Lock()
		ch, done := cl.changed, cl.done
		more := cl.lines[next:]
		next = len(cl.lines)
		cl.mu.Unlock()
		if !write(more) || done {
			return
		}
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
	}
}
