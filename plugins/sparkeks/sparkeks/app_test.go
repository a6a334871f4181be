package sparkeks

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func TestNames(t *testing.T) {
	id := uuid.Must(uuid.NewV7()).String()
	assert.Equal(t, "spark-sql-job-"+id, AppName(id))
	assert.Equal(t, "spark-sql-job-"+id+"-query", ConfigMapName(id))
	require.NoError(t, checkNames(id))
	for _, bad := range []string{strings.ToUpper(id), id + "-" + id, "a_b"} {
		err := checkNames(bad)
		require.Error(t, err, bad)
		assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
		assert.Contains(t, err.Error(), "job ID")
	}
}

func TestHandleRoundTrip(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	h := &Handle{Version: handleVersion, JobAttempt: 2, Name: "n", Namespace: "ns", UID: "u", Submitted: true, CreatedAt: now,
		State: "RUNNING", SparkApplicationID: "spark-1", DriverPod: "n-driver", Log: &LogPosition{Time: now, Lines: 3},
		UnknownSince: &now, UIDMismatch: "x", Outcome: outcomeFailed, Message: "m", ErrorMessage: "e"}
	b, err := h.encode()
	require.NoError(t, err)
	got, err := decodeHandle(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	for _, key := range []string{`"v":1`, `"job_attempt":2`, `"uid":"u"`, `"submitted":true`, `"created_at"`, `"spark_application_id"`, `"driver_pod"`, `"log":{`, `"uid_mismatch"`} {
		assert.Contains(t, string(b), key)
	}
	_, err = decodeHandle([]byte(`{"v":2}`))
	assert.ErrorContains(t, err, "version 2")
}

func TestPhaseOf(t *testing.T) {
	for state, want := range map[string]phase{
		"COMPLETED": phaseSucceeded, "FAILED": phaseFailed, "SUBMISSION_FAILED": phaseFailed, "UNKNOWN": phaseUnknown,
		"": phaseRunning, "NEW": phaseRunning, "SUBMITTED": phaseRunning, "RUNNING": phaseRunning, "PENDING_RERUN": phaseRunning,
		"SUCCEEDING": phaseRunning, "FAILING": phaseRunning, "INVALIDATING": phaseRunning, "SOMETHING_NEW": phaseRunning,
	} {
		assert.Equal(t, want, phaseOf(state), state)
	}
}

func appFor(t *testing.T, cfg, ctx string) (*plugin.Job, *unstructured.Unstructured) {
	t.Helper()
	c, err := parseConfig(json.RawMessage(cfg), json.RawMessage(ctx))
	require.NoError(t, err)
	job := &plugin.Job{ID: uuid.Must(uuid.NewV7()).String(), Command: "q", Attempt: 1}
	return job, buildApp(job, c)
}

func TestBuildAppDefaults(t *testing.T) {
	job, app := appFor(t, `{"kubeconfig":"k"}`, minimalCtx)
	assert.Equal(t, APIVersion, app.GetAPIVersion())
	assert.Equal(t, Kind, app.GetKind())
	assert.Equal(t, AppName(job.ID), app.GetName())
	assert.Equal(t, "default", app.GetNamespace())
	spec := app.Object["spec"].(map[string]any)
	assert.Equal(t, "Python", spec["type"])
	assert.Equal(t, "cluster", spec["mode"])
	assert.Equal(t, "3.5.3", spec["sparkVersion"])
	assert.Equal(t, "spark:1", spec["image"])
	assert.Equal(t, "local:///run.py", spec["mainApplicationFile"])
	assert.Equal(t, []any{"--query-file", "/etc/tether/spark-sql/query.sql"}, spec["arguments"])
	// The query reaches the driver through its pod template (no webhook
	// needed), not spec.volumes / spec.driver.volumeMounts.
	assert.NotContains(t, spec, "volumes")
	driver := spec["driver"].(map[string]any)
	assert.NotContains(t, driver, "volumeMounts")
	assert.Equal(t, map[string]any{"spec": map[string]any{
		"volumes": []any{map[string]any{"name": queryVolume, "configMap": map[string]any{"name": ConfigMapName(job.ID)}}},
		"containers": []any{map[string]any{
			"name":         driverContainer,
			"volumeMounts": []any{map[string]any{"name": queryVolume, "mountPath": DefaultQueryMountPath, "readOnly": true}},
		}},
	}}, driver["template"])
	// Valid for the unstructured machinery (JSON types only).
	_ = app.DeepCopy()
}

func TestBuildAppTemplateOverlay(t *testing.T) {
	tpl := `
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: ignored
  namespace: ignored
  labels: {from: template, team: tpl}
  annotations: {note: kept}
spec:
  type: Scala
  sparkVersion: "3.4.0"
  image: spark:tpl
  mainApplicationFile: local:///tpl.jar
  mainClass: com.example.Tpl
  arguments: ["--sql", "{query_file}", "--verbose"]
  sparkConf: {a: tpl, b: tpl, c: tpl}
  volumes:
    - name: data
      emptyDir: {}
    - name: tether-query
      emptyDir: {}
  driver:
    cores: 1
    memory: 512m
    labels: {d: tpl}
    volumeMounts:
      - name: data
        mountPath: /data
  executor:
    instances: 1
    memory: 1g
`
	cfgJSON, _ := json.Marshal(map[string]any{
		"kubeconfig": "k", "namespace": "spark", "template": tpl,
		"spark_conf": map[string]string{"b": "cfg", "c": "cfg"}, "labels": map[string]string{"team": "cfg"},
	})
	ctx := `{"query":"q","spark_conf":{"c":"ctx"},"image":"spark:job","driver":{"memory":"2g","labels":{"e":"ctx"}},
		"executor":{"instances":4},"service_account":"spark-driver","query_mount_path":"/q"}`
	job, app := appFor(t, string(cfgJSON), ctx)
	assert.Equal(t, AppName(job.ID), app.GetName())
	assert.Equal(t, "spark", app.GetNamespace())
	assert.Equal(t, map[string]string{"note": "kept"}, app.GetAnnotations())
	labels := app.GetLabels()
	assert.Equal(t, "template", labels["from"])
	assert.Equal(t, "cfg", labels["team"])
	assert.Equal(t, "tether", labels[labelManagedBy])
	assert.Equal(t, job.ID, labels[labelJobID])

	spec := app.Object["spec"].(map[string]any)
	assert.Equal(t, "Scala", spec["type"], "the template's, not the default")
	assert.Equal(t, "3.4.0", spec["sparkVersion"])
	assert.Equal(t, "spark:job", spec["image"], "the job's setting wins")
	assert.Equal(t, "com.example.Tpl", spec["mainClass"])
	assert.Equal(t, []any{"--sql", "/q/query.sql", "--verbose"}, spec["arguments"])
	assert.Equal(t, map[string]any{"a": "tpl", "b": "cfg", "c": "ctx"}, spec["sparkConf"])
	assert.Equal(t, []any{
		map[string]any{"name": "data", "emptyDir": map[string]any{}},
	}, spec["volumes"], "the template's own (for the webhook); one named like tether's is dropped")
	driver := spec["driver"].(map[string]any)
	assert.Equal(t, int64(1), driver["cores"])
	assert.Equal(t, "2g", driver["memory"])
	assert.Equal(t, "spark-driver", driver["serviceAccount"])
	assert.Equal(t, map[string]any{"d": "tpl", "e": "ctx"}, driver["labels"])
	assert.Equal(t, []any{
		map[string]any{"name": "data", "mountPath": "/data"},
	}, driver["volumeMounts"])
	assert.Equal(t, map[string]any{"spec": map[string]any{
		"volumes": []any{map[string]any{"name": queryVolume, "configMap": map[string]any{"name": ConfigMapName(job.ID)}}},
		"containers": []any{map[string]any{
			"name":         driverContainer,
			"volumeMounts": []any{map[string]any{"name": queryVolume, "mountPath": "/q", "readOnly": true}},
		}},
	}}, driver["template"])
	executor := spec["executor"].(map[string]any)
	assert.Equal(t, int64(4), executor["instances"])
	assert.Equal(t, "1g", executor["memory"])
	_ = app.DeepCopy() // panics on non-JSON types
}

// TestBuildAppDriverPodTemplate checks that the query's volume and mount are
// merged into a pod template the template already has.
func TestBuildAppDriverPodTemplate(t *testing.T) {
	queryVol := map[string]any{"name": queryVolume, "configMap": map[string]any{"name": "x"}}
	build := func(t *testing.T, podTemplate string) (*plugin.Job, map[string]any) {
		t.Helper()
		tpl := "spec:\n  driver:\n    template:\n" + podTemplate
		cfgJSON, _ := json.Marshal(map[string]any{"kubeconfig": "k", "template": tpl})
		job, app := appFor(t, string(cfgJSON), minimalCtx)
		_ = app.DeepCopy()
		pt, _, err := unstructured.NestedMap(app.Object, "spec", "driver", "template")
		require.NoError(t, err)
		queryVol["configMap"] = map[string]any{"name": ConfigMapName(job.ID)}
		return job, pt
	}
	mount := map[string]any{"name": queryVolume, "mountPath": DefaultQueryMountPath, "readOnly": true}

	t.Run("driver container among others", func(t *testing.T) {
		_, pt := build(t, `
      metadata: {labels: {team: a}}
      spec:
        nodeSelector: {pool: spark}
        volumes:
          - {name: scratch, emptyDir: {}}
          - {name: tether-query, emptyDir: {}}
        containers:
          - {name: sidecar, image: busybox}
          - name: spark-kubernetes-driver
            volumeMounts: [{name: scratch, mountPath: /scratch}, {name: tether-query, mountPath: /old}]
`)
		assert.Equal(t, map[string]any{"labels": map[string]any{"team": "a"}}, pt["metadata"])
		spec := pt["spec"].(map[string]any)
		assert.Equal(t, map[string]any{"pool": "spark"}, spec["nodeSelector"])
		assert.Equal(t, []any{map[string]any{"name": "scratch", "emptyDir": map[string]any{}}, queryVol}, spec["volumes"], "replaces one of the same name")
		assert.Equal(t, []any{
			map[string]any{"name": "sidecar", "image": "busybox"},
			map[string]any{"name": driverContainer, "volumeMounts": []any{map[string]any{"name": "scratch", "mountPath": "/scratch"}, mount}},
		}, spec["containers"])
	})
	t.Run("no container of the driver's name: the first", func(t *testing.T) {
		_, pt := build(t, `
      spec:
        containers:
          - {name: main}
          - {name: other}
`)
		spec := pt["spec"].(map[string]any)
		assert.Equal(t, []any{queryVol}, spec["volumes"])
		assert.Equal(t, []any{
			map[string]any{"name": "main", "volumeMounts": []any{mount}},
			map[string]any{"name": "other"},
		}, spec["containers"])
	})
	t.Run("no containers", func(t *testing.T) {
		_, pt := build(t, `
      spec: {serviceAccountName: sa}
`)
		spec := pt["spec"].(map[string]any)
		assert.Equal(t, "sa", spec["serviceAccountName"])
		assert.Equal(t, []any{map[string]any{"name": driverContainer, "volumeMounts": []any{mount}}}, spec["containers"])
	})
	t.Run("malformed", func(t *testing.T) {
		for _, pt := range []string{"      spec: []\n", "      spec: {containers: [x]}\n", "      spec: {volumes: {}}\n", "      spec: {containers: [{name: a, volumeMounts: 1}]}\n"} {
			tpl := "spec:\n  driver:\n    template:\n" + pt
			cfgJSON, _ := json.Marshal(map[string]any{"kubeconfig": "k", "template": tpl})
			_, err := parseConfig(cfgJSON, json.RawMessage(minimalCtx))
			assert.ErrorContains(t, err, "spec.driver.template", pt)
		}
	})
}

func TestBuildAppArguments(t *testing.T) {
	_, app := appFor(t, `{"kubeconfig":"k","arguments":["-f","{query_file}","--x={query_file}"]}`, minimalCtx)
	assert.Equal(t, []any{"-f", "/etc/tether/spark-sql/query.sql", "--x=/etc/tether/spark-sql/query.sql"}, app.Object["spec"].(map[string]any)["arguments"])
	_, app = appFor(t, `{"kubeconfig":"k","arguments":[]}`, minimalCtx)
	assert.Equal(t, []any{}, app.Object["spec"].(map[string]any)["arguments"])
}

func TestBuildConfigMap(t *testing.T) {
	c, err := parseConfig(json.RawMessage(`{"kubeconfig":"k","namespace":"spark"}`), json.RawMessage(minimalCtx))
	require.NoError(t, err)
	job := &plugin.Job{ID: uuid.Must(uuid.NewV7()).String(), Command: "q", Attempt: 2}
	cm := buildConfigMap(job, c, AppName(job.ID), "uid-1")
	assert.Equal(t, ConfigMapName(job.ID), cm.Name)
	assert.Equal(t, "spark", cm.Namespace)
	assert.Equal(t, map[string]string{QueryKey: "SELECT 1"}, cm.Data)
	assert.Equal(t, "2", cm.Labels[labelJobAttempt])
	require.Len(t, cm.OwnerReferences, 1)
	ref := cm.OwnerReferences[0]
	assert.Equal(t, APIVersion, ref.APIVersion)
	assert.Equal(t, Kind, ref.Kind)
	assert.Equal(t, AppName(job.ID), ref.Name)
	assert.EqualValues(t, "uid-1", ref.UID)
}

func TestWebhookVolumes(t *testing.T) {
	spec := func(names ...string) map[string]any {
		vols := []any{}
		for _, n := range names {
			vols = append(vols, map[string]any{"name": n, "emptyDir": map[string]any{}})
		}
		return map[string]any{"volumes": vols}
	}
	assert.Empty(t, webhookVolumes(map[string]any{}), "none")
	assert.Empty(t, webhookVolumes(spec(queryVolume, "spark-local-dir-1")), "the query's and spark-submit's own")
	assert.Equal(t, []string{"data", "certs"}, webhookVolumes(spec("data", queryVolume, "certs", "spark-local-dir-x")))
}

// A template's spec.volumes need the operator's webhook: the submit says so
// on the job's stderr, since without it they vanish with no word.
func TestSubmitNamesWebhookVolumes(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, map[string]any{"template": map[string]any{"spec": map[string]any{
		"volumes": []any{map[string]any{"name": "data", "emptyDir": map[string]any{}}},
	}}})
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	e.waitApp(t, job)
	assert.Contains(t, rt.StderrString(), "spec.volumes data reach the pods only through spark-operator's mutating webhook")
	e.setStatus(t, job, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
}
