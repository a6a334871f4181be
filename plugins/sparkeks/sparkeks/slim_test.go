package sparkeks

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// fullApp is a SparkApplication as the API server lists it once
// spark-operator has run it: the spec the plugin submits, managed fields,
// annotations, and the status the operator writes (v2.5.2's
// SparkApplicationStatus, executorState included).
func fullApp(t *testing.T, state, errorMessage string, deleting bool) *unstructured.Unstructured {
	t.Helper()
	job := newJob(t, map[string]any{"spark_conf": map[string]any{"spark.sql.adaptive.enabled": "true"}})
	cfg, err := parseConfig(job.Config, job.Context)
	require.NoError(t, err)
	u := buildApp(job, cfg)
	u.SetNamespace("spark")
	u.SetUID("4b1d7f0e-6c1a-4c55-9a57-5d6f2b8f9e10")
	u.SetResourceVersion("12345")
	u.SetGeneration(1)
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)))
	if deleting {
		ts := metav1.NewTime(time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC))
		u.SetDeletionTimestamp(&ts)
		u.SetFinalizers([]string{"foregroundDeletion"})
	}
	u.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{}}`})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "tether-plugin-sparkeks", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:sparkConf":{}}}`)}}})
	u.Object["status"] = map[string]any{
		"applicationState":          map[string]any{"state": state, "errorMessage": errorMessage},
		"driverInfo":                map[string]any{"podName": u.GetName() + "-driver", "webUIAddress": "10.96.0.12:4040", "webUIPort": int64(4040), "webUIServiceName": u.GetName() + "-ui-svc"},
		"executorState":             map[string]any{"exec-1": "COMPLETED", "exec-2": "COMPLETED"},
		"executionAttempts":         int64(1),
		"sparkApplicationId":        "spark-0123456789abcdef",
		"submissionAttempts":        int64(1),
		"submissionID":              "6b1bd6b4-1d2c-4c1e-9d1a-0c3f1c2b5a77",
		"terminationTime":           "2026-12-07T10:05:00Z",
		"lastSubmissionAttemptTime": "2026-12-07T10:00:01Z",
	}
	return u
}

// TestSlimApp checks that what the plugin reads of a SparkApplication
// reads the same on the informer's slim copy.
func TestSlimApp(t *testing.T) {
	for _, tc := range []struct {
		state, msg string
		deleting   bool
	}{
		{"RUNNING", "", false},
		{"COMPLETED", "", false},
		{"FAILED", driverPodNotFound, false},
		{"SUBMISSION_FAILED", "failed to submit spark application: exceeded quota", true},
		{"", "", false},
	} {
		t.Run(tc.state, func(t *testing.T) {
			full := fullApp(t, tc.state, tc.msg, tc.deleting)
			before := full.DeepCopy()
			got, err := slimApp(full)
			require.NoError(t, err)
			slim := got.(*unstructured.Unstructured)
			assert.Equal(t, before, full, "the listed object is only read")

			assert.Equal(t, statusOf(full), statusOf(slim))
			fa, fok := attemptOf(full)
			sa, sok := attemptOf(slim)
			assert.Equal(t, []any{fa, fok}, []any{sa, sok})
			for _, get := range []func(*unstructured.Unstructured) any{
				func(u *unstructured.Unstructured) any { return u.GetUID() },
				func(u *unstructured.Unstructured) any { return u.GetName() },
				func(u *unstructured.Unstructured) any { return u.GetNamespace() },
				func(u *unstructured.Unstructured) any { return u.GetResourceVersion() },
				func(u *unstructured.Unstructured) any { return u.GetCreationTimestamp().UTC() },
				func(u *unstructured.Unstructured) any { return u.GetDeletionTimestamp() != nil },
				func(u *unstructured.Unstructured) any { return u.GroupVersionKind() },
				func(u *unstructured.Unstructured) any { return objectName(u) },
			} {
				assert.Equal(t, get(full), get(slim))
			}
			assert.Less(t, size(t, slim), size(t, full)/2, "slim: %d bytes, listed: %d", size(t, slim), size(t, full))
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "spark/x", Obj: fullApp(t, "RUNNING", "", false)}
	got, err := slimApp(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, got, "not an object: passed through")
}

// fullPod is a driver pod as spark-submit creates it and a kubelet
// reports it, with the given status.
func fullPod(status corev1.PodStatus, deleting bool) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "spark-sql-job-x-driver", Namespace: "spark", UID: "0d3c5a1e-7f7b-4e21-8d1e-6a0c2b1f3e44", ResourceVersion: "777",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 2, 0, time.UTC)),
			Labels: map[string]string{labelManagedBy: managedByTether, labelSparkRole: sparkRoleDriver, labelOperatorAppName: "spark-sql-job-x",
				"spark-app-selector": "spark-0123456789abcdef"},
			Annotations:     map[string]string{"note": "listed"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: APIVersion, Kind: Kind, Name: "spark-sql-job-x", UID: "4b1d7f0e-6c1a-4c55-9a57-5d6f2b8f9e10"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "spark-submit", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{
				{Name: "sidecar", Image: "busybox"},
				{Name: driverContainer, Image: "spark:3.5.3", Args: []string{"driver", "--properties-file", "/opt/spark/conf/spark.properties"},
					Env:       []corev1.EnvVar{{Name: "SPARK_USER", Value: "root"}, {Name: "SPARK_APPLICATION_ID", Value: "spark-0123456789abcdef"}},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1408Mi")}}},
			},
			Volumes: []corev1.Volume{{Name: "tether-query", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "spark-sql-job-x-query"}}}}},
		},
		Status: status,
	}
	if deleting {
		ts := metav1.NewTime(time.Date(2026, 12, 7, 10, 1, 0, 0, time.UTC))
		p.DeletionTimestamp = &ts
	}
	return p
}

// TestSlimPod checks that what the plugin reads of a driver pod reads the
// same on the informer's slim copy, in each state it decides on.
func TestSlimPod(t *testing.T) {
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "spark:nope"`}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 5, 0, time.UTC))}}
	killed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: "killed"}}
	statuses := func(st, last corev1.ContainerState) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{
			{Name: "sidecar", State: running, Image: "busybox", ImageID: "sha256:1", ContainerID: "containerd://a"},
			{Name: driverContainer, State: st, LastTerminationState: last, Image: "spark:3.5.3", ImageID: "sha256:2", ContainerID: "containerd://b"},
		}
	}
	conds := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [spark-kubernetes-driver]"},
	}
	for name, tc := range map[string]struct {
		st       corev1.PodStatus
		deleting bool
	}{
		"image pull": {corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds, ContainerStatuses: statuses(waiting, corev1.ContainerState{}),
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", State: waiting}}}, false},
		"restarting":   {corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: statuses(waiting, killed)}, false},
		"pending":      {corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds}, false},
		"running":      {corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds, ContainerStatuses: statuses(running, corev1.ContainerState{}), PodIP: "10.0.0.7"}, false},
		"deleted":      {corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: statuses(running, corev1.ContainerState{})}, true},
		"evicted":      {corev1.PodStatus{Phase: corev1.PodFailed, Reason: podEvicted, Message: "The node was low on resource: memory.", ContainerStatuses: statuses(killed, corev1.ContainerState{})}, false},
		"succeeded":    {corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: statuses(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}, corev1.ContainerState{})}, false},
		"no container": {corev1.PodStatus{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			full := fullPod(tc.st, tc.deleting)
			before := full.DeepCopy()
			got, err := slimPod(full)
			require.NoError(t, err)
			slim := got.(*corev1.Pod)
			assert.Equal(t, before, full, "the listed object is only read")

			f := &logFollower{namespace: "spark", pod: full.Name}
			for what, read := range map[string]func(*corev1.Pod) any{
				"driverStarted":     func(p *corev1.Pod) any { return driverStarted(p) },
				"driverInterrupted": func(p *corev1.Pod) any { return driverInterrupted(p) },
				"podWaiting":        func(p *corev1.Pod) any { return podWaiting(p) },
				"podAppName":        func(p *corev1.Pod) any { return podAppName(p) },
				"objectName":        func(p *corev1.Pod) any { return objectName(p) },
				"containerOf":       func(p *corev1.Pod) any { return containerOf(p) },
				"notStarted":        func(p *corev1.Pod) any { return f.notStarted(p, containerOf(p), true) },
				"owned":             func(p *corev1.Pod) any { return ownedBy(p.OwnerReferences, "4b1d7f0e-6c1a-4c55-9a57-5d6f2b8f9e10") },
				"created":           func(p *corev1.Pod) any { return p.CreationTimestamp },
				"key":               func(p *corev1.Pod) any { return []any{p.Namespace, p.Name, p.UID, p.ResourceVersion} },
			} {
				assert.Equal(t, read(full), read(slim), what)
			}
			assert.Less(t, size(t, slim), size(t, full), "slim: %d bytes, listed: %d", size(t, slim), size(t, full))
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "spark/x", Obj: fullPod(corev1.PodStatus{}, false)}
	got, err := slimPod(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, got, "not an object: passed through")
}

func size(t *testing.T, obj any) int {
	t.Helper()
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	return len(b)
}
