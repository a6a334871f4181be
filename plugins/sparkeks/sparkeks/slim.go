package sparkeks

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The shared informers keep every tether application of their namespace
// and its driver pod until spark-operator deletes the application
// (time_to_live after its end, 24 h by default), finished ones included.
// As listed, one of each is tens of kilobytes (the spec, managed fields,
// the pod's spec and status); the plugin reads a few fields of them. The
// informers' transforms (cache.SharedIndexInformer.SetTransform, applied
// before an object is stored or handed to the event handlers) keep only
// those fields, in a new object, so the cache holds a few hundred bytes
// per application.
//
// What the plugin reads, and so what is kept:
//
//   - of a SparkApplication (statusOf, attemptOf, the informer's keys):
//     apiVersion, kind, metadata name, namespace, uid, resourceVersion,
//     the tether.dev/job-attempt label, creationTimestamp,
//     deletionTimestamp; spec.restartPolicy.type;
//     status.applicationState.state and .errorMessage,
//     status.sparkApplicationId, status.driverInfo.podName;
//   - of a driver pod (driverStarted, driverInterrupted, podWaiting,
//     podAppName, newestDriverPod, the log follower's notStarted and
//     containerOf): metadata name, namespace, uid, resourceVersion, the
//     sparkoperator.k8s.io/app-name label, ownerReferences,
//     creationTimestamp, deletionTimestamp; spec.nodeName and the
//     containers' names; status phase, reason, message, the conditions
//     that are not true and say why (type, status, message), and the (init)
//     container statuses' names, which state they are and were last in,
//     and a waiting one's reason and message.
//
// A field the plugin starts reading must be added here: TestSlim* check
// every reader gives the same answer on the slim object as on the whole.

// slimApp is the informer's transform of SparkApplications.
func slimApp(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone (cache.DeletedFinalStateUnknown) holds a slim object already
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	if a, ok := u.GetLabels()[labelJobAttempt]; ok {
		out.SetLabels(map[string]string{labelJobAttempt: a})
	}
	out.SetCreationTimestamp(u.GetCreationTimestamp())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	for _, path := range slimAppFields {
		if v, found, _ := unstructured.NestedString(u.Object, path...); found {
			_ = unstructured.SetNestedField(out.Object, v, path...) // maps all the way: cannot fail
		}
	}
	return out, nil
}

// slimAppFields are the string fields of a SparkApplication the plugin
// reads (statusOf).
var slimAppFields = [][]string{
	{"spec", "restartPolicy", "type"},
	{"status", "applicationState", "state"},
	{"status", "applicationState", "errorMessage"},
	{"status", "sparkApplicationId"},
	{"status", "driverInfo", "podName"},
}

// slimPod is the informer's transform of driver pods.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: onlyLabel(p.Labels, labelOperatorAppName), OwnerReferences: append([]metav1.OwnerReference(nil), p.OwnerReferences...),
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message,
			InitContainerStatuses: slimStatuses(p.Status.InitContainerStatuses),
			ContainerStatuses:     slimStatuses(p.Status.ContainerStatuses),
		},
	}
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name})
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" { // what podWaiting says
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Message: c.Message})
		}
	}
	return out, nil
}

// onlyLabel is labels reduced to key, nil when it has none.
func onlyLabel(labels map[string]string, key string) map[string]string {
	v, ok := labels[key]
	if !ok {
		return nil
	}
	return map[string]string{key: v}
}

// slimStatuses keeps the containers' names and which state they are and
// were last in, with a waiting container's reason and message.
func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, cs := range in {
		out = append(out, corev1.ContainerStatus{Name: cs.Name, State: slimState(cs.State), LastTerminationState: slimState(cs.LastTerminationState)})
	}
	return out
}

func slimState(st corev1.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	if w := st.Waiting; w != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
	}
	if st.Running != nil {
		out.Running = &corev1.ContainerStateRunning{}
	}
	if st.Terminated != nil {
		out.Terminated = &corev1.ContainerStateTerminated{ExitCode: st.Terminated.ExitCode}
	}
	return out
}
