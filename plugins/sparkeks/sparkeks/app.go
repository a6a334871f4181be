package sparkeks

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// GVR is the SparkApplication resource.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version1, Resource: Resource}

// tetherLabels are the labels on both of a job's objects.
func tetherLabels(job *plugin.Job) map[string]string {
	l := map[string]string{
		labelManagedBy:  managedByTether,
		labelJobID:      job.ID,
		labelJobAttempt: strconv.Itoa(job.Attempt),
	}
	if job.Command != "" {
		l[labelCommand] = job.Command
	}
	return l
}

// buildApp is the job's SparkApplication. It is the template's, with the
// settings laid over its spec, the query's ConfigMap mounted into the
// driver, and tether's labels.
func buildApp(job *plugin.Job, cfg Config) *unstructured.Unstructured {
	obj := map[string]any{} // a copy of the template, which may be nil
	maps.Copy(obj, runtime.DeepCopyJSON(cfg.Template))
	obj["apiVersion"] = APIVersion
	obj["kind"] = Kind
	tmeta := mapAt(obj, "metadata")
	meta := map[string]any{"name": AppName(job.ID), "namespace": cfg.Namespace}
	if a, ok := tmeta["annotations"].(map[string]any); ok {
		meta["annotations"] = a
	}
	labels := stringsOf(tmeta["labels"])
	maps.Copy(labels, cfg.Labels)
	maps.Copy(labels, tetherLabels(job))
	meta["labels"] = anyMap(labels)
	obj["metadata"] = meta

	spec := mapAt(obj, "spec")
	setString(spec, "type", cfg.Type, DefaultType)
	setString(spec, "mode", cfg.Mode, DefaultMode)
	setString(spec, "sparkVersion", cfg.SparkVersion, DefaultSparkVersion)
	setString(spec, "image", cfg.Image, "")
	setString(spec, "imagePullPolicy", cfg.ImagePullPolicy, "")
	setString(spec, "mainApplicationFile", cfg.MainApplicationFile, "")
	setString(spec, "mainClass", cfg.MainClass, "")

	args := cfg.Arguments
	if args == nil {
		if t, ok := spec["arguments"].([]any); ok {
			for _, a := range t {
				args = append(args, a.(string)) // checked by parseTemplate
			}
		} else {
			args = defaultArguments()
		}
	}
	list := make([]any, len(args))
	for i, a := range args {
		list[i] = strings.ReplaceAll(a, QueryFileToken, cfg.QueryFile())
	}
	spec["arguments"] = list

	mergeStrings(spec, "sparkConf", cfg.SparkConf)
	mergeStrings(spec, "hadoopConf", cfg.HadoopConf)

	driver := mapAt(spec, "driver")
	setResources(driver, cfg.Driver)
	setString(driver, "serviceAccount", cfg.ServiceAccount, "")
	executor := mapAt(spec, "executor")
	setResources(executor, cfg.Executor)

	// Never: spark-operator reruns an application whose restartPolicy is
	// Always or OnFailure (pkg/util/sparkapplication.go ShouldRetry, v2.5.2),
	// which would run the query's partial writes a second time. parseTemplate
	// refuses any other type, so this only fills it in.
	spec["restartPolicy"] = map[string]any{"type": RestartPolicyNever}
	// The operator deletes a COMPLETED or FAILED application once
	// timeToLiveSeconds have passed since status.terminationTime
	// (internal/controller/sparkapplication/controller.go
	// reconcileTerminatedSparkApplication, pkg/util IsExpired, v2.5.2).
	spec["timeToLiveSeconds"] = int64(cfg.TimeToLive / time.Second)

	addQueryVolume(spec, driver, job, cfg)
	return &unstructured.Unstructured{Object: obj}
}

// addQueryVolume mounts the query's ConfigMap into the driver through the
// driver's pod template (spec.driver.template), which spark-operator hands
// to spark-submit as spark.kubernetes.driver.podTemplateFile
// (internal/controller/sparkapplication/submission.go
// driverPodTemplateOption, v2.5.2). Spark builds the driver pod from it, so
// the query reaches the driver without the operator's mutating webhook.
// spec.volumes and spec.driver.volumeMounts would not. spark-submit gets
// only the spark-local-dir-* volumes from them (driverVolumeMountsOption,
// pkg/util GetLocalVolumes). The rest is added by the webhook
// (internal/webhook/sparkpod_defaulter.go addVolumes), a missing webhook
// being a classic cause of drivers stuck in ContainerCreating.
//
// The volume replaces one of the same name in the template's
// spec.volumes. The read-only mount goes into the driver container: the
// one named spark-kubernetes-driver (the name the operator tells Spark to
// take as the driver's, spark.kubernetes.driver.podTemplateContainerName =
// common.SparkDriverContainerName, which is also Spark's default), else the
// first container (what Spark then takes, per its "Pod Template" docs),
// else a new spark-kubernetes-driver container holding only the mount
// (Spark fills in the rest). Entries of the query volume's name are taken
// out of spec.volumes and spec.driver.volumeMounts. The webhook, which
// mutates every pod labelled with an application's name, template or not
// (SparkPodDefaulter.Default), would append a second volume of that name
// and the pod would be invalid.
func addQueryVolume(spec, driver map[string]any, job *plugin.Job, cfg Config) {
	dropNamed(spec, "volumes", queryVolume)
	dropNamed(driver, "volumeMounts", queryVolume)

	podSpec := mapAt(mapAt(driver, "template"), "spec")
	podSpec["volumes"] = replaceNamed(podSpec["volumes"], map[string]any{
		"name":      queryVolume,
		"configMap": map[string]any{"name": ConfigMapName(job.ID)},
	})
	containers, _ := podSpec["containers"].([]any) // mappings: checked by parseTemplate
	if len(containers) == 0 {
		containers = []any{map[string]any{"name": driverContainer}}
	}
	// The driver's container, else the first one (IndexFunc's -1).
	i := max(slices.IndexFunc(containers, func(x any) bool { return named(x, driverContainer) }), 0)
	c := containers[i].(map[string]any)
	c["volumeMounts"] = replaceNamed(c["volumeMounts"], map[string]any{
		"name":      queryVolume,
		"mountPath": cfg.QueryMountPath,
		"readOnly":  true,
	})
	podSpec["containers"] = containers
}

// webhookVolumes names the volumes of an application's spec.volumes that
// reach its pods only through spark-operator's mutating webhook: every one
// but the spark-local-dir-* volumes, which spark-submit passes itself
// (pkg/util GetLocalVolumes, v2.5.2), and the query's, which rides the
// driver's pod template (addQueryVolume). Without the webhook they are
// dropped with no word from the operator.
func webhookVolumes(spec map[string]any) []string {
	vols, _ := spec["volumes"].([]any)
	var out []string
	for _, v := range vols {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" || name == queryVolume || strings.HasPrefix(name, "spark-local-dir-") {
			continue
		}
		out = append(out, name)
	}
	return out
}

// dropNamed removes the entries named name from the list m[key], and the
// key when nothing is left. The list is changed in place: buildApp works on
// a copy of the template.
func dropNamed(m map[string]any, key, name string) {
	items, ok := m[key].([]any)
	if !ok {
		return
	}
	items = slices.DeleteFunc(items, func(x any) bool { return named(x, name) })
	if len(items) == 0 {
		delete(m, key)
		return
	}
	m[key] = items
}

// named reports whether x is a mapping whose name is name.
func named(x, name any) bool {
	m, _ := x.(map[string]any) // nil, whose name is nil, when not a mapping
	return m["name"] == name
}

// buildConfigMap is the job's query, owned by its SparkApplication so it is
// deleted with it.
func buildConfigMap(job *plugin.Job, cfg Config, appName, appUID string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ConfigMapName(job.ID),
			Namespace: cfg.Namespace,
			Labels:    tetherLabels(job),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: APIVersion,
				Kind:       Kind,
				Name:       appName,
				UID:        typesUID(appUID),
			}},
		},
		Data: map[string]string{QueryKey: cfg.Query},
	}
}

func setResources(m map[string]any, r Resources) {
	setInt(m, "cores", r.Cores)
	setInt(m, "instances", r.Instances) // executors only: 0 for the driver
	setString(m, "coreLimit", r.CoreLimit, "")
	setString(m, "memory", r.Memory, "")
	mergeStrings(m, "labels", r.Labels)
}

// mergeStrings lays over (the merged settings: config, then context) over
// the template's string mapping m[key]. An empty over leaves m[key] as the
// template has it.
func mergeStrings(m map[string]any, key string, over map[string]string) {
	if len(over) == 0 {
		return
	}
	merged := stringsOf(m[key])
	maps.Copy(merged, over)
	m[key] = anyMap(merged)
}

// setInt sets m[key] to v when v is set (positive).
func setInt(m map[string]any, key string, v int) {
	if v > 0 {
		m[key] = int64(v)
	}
}

// setString sets m[key] to v. When v is unset it keeps the template's value,
// or sets def when there is none.
func setString(m map[string]any, key, v, def string) {
	if s := cmp.Or(v, stringAt(m, key), def); s != "" {
		m[key] = s
	}
}

// mapAt returns m[key] as a mapping, creating it when missing.
func mapAt(m map[string]any, key string) map[string]any {
	if x, ok := m[key].(map[string]any); ok {
		return x
	}
	x := map[string]any{}
	m[key] = x
	return x
}

// replaceNamed appends item to a list of named entries, replacing an entry
// of the same name.
func replaceNamed(list any, item map[string]any) []any {
	items, _ := list.([]any)
	return append(slices.DeleteFunc(items, func(x any) bool { return named(x, item["name"]) }), item)
}

// stringsOf copies a mapping's string values.
func stringsOf(x any) map[string]string {
	out := map[string]string{}
	m, _ := x.(map[string]any)
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// appStatus is what tether reads from a SparkApplication's status.
type appStatus struct {
	State              string
	ErrorMessage       string
	SparkApplicationID string
	DriverPod          string
	RestartPolicy      string // spec.restartPolicy.type
	Deleting           bool   // metadata.deletionTimestamp is set
}

func statusOf(u *unstructured.Unstructured) appStatus {
	var s appStatus
	s.State, _, _ = unstructured.NestedString(u.Object, "status", "applicationState", "state")
	s.ErrorMessage, _, _ = unstructured.NestedString(u.Object, "status", "applicationState", "errorMessage")
	s.SparkApplicationID, _, _ = unstructured.NestedString(u.Object, "status", "sparkApplicationId")
	s.DriverPod, _, _ = unstructured.NestedString(u.Object, "status", "driverInfo", "podName")
	s.RestartPolicy, _, _ = unstructured.NestedString(u.Object, "spec", "restartPolicy", "type")
	s.Deleting = u.GetDeletionTimestamp() != nil
	return s
}

// Phases a SparkApplication state maps to.
type phase int

const (
	phaseRunning phase = iota
	phaseSucceeded
	phaseFailed
	phaseUnknown
)

// phaseOf maps status.applicationState.state. Everything not terminal and
// not UNKNOWN is running, including states spark-operator may add later.
func phaseOf(state string) phase {
	return phases[state] // phaseRunning when missing
}

// phases are the states that are not phaseRunning.
var phases = map[string]phase{
	"COMPLETED":         phaseSucceeded,
	"FAILED":            phaseFailed,
	"SUBMISSION_FAILED": phaseFailed,
	"UNKNOWN":           phaseUnknown,
}

// attemptOf is the job attempt an existing SparkApplication was created
// for, from its label. ok is false when it has none.
func attemptOf(u *unstructured.Unstructured) (int, bool) {
	n, err := strconv.Atoi(u.GetLabels()[labelJobAttempt])
	return n, err == nil
}
