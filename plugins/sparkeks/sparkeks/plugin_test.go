package sparkeks

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func TestInfo(t *testing.T) {
	info, err := plugintest.Direct(New()).Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "sparkeks", info.Name)
	for _, c := range []string{plugin.CapResume, plugin.CapCleanup, plugin.CapHealth} {
		assert.True(t, info.Has(c), c)
	}
}

func TestExecuteSucceeds(t *testing.T) {
	e := newEnv(t)
	plugintest.Run(t, e.p, func(t *testing.T, c plugintest.Client) {
		job := newJob(t, nil)
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return c.Execute(context.Background(), job, rt) })

		app := e.waitApp(t, job)
		// The handle is checkpointed right after the create, before anything else.
		require.Eventually(t, func() bool { return len(rt.Checkpoints()) > 0 }, 5*time.Second, time.Millisecond)
		first := lastHandle(t, rt.Checkpoints()[0])
		assert.Equal(t, string(app.GetUID()), first.UID)
		assert.True(t, first.Submitted)
		assert.Equal(t, "spark", first.Namespace)
		assert.Equal(t, AppName(job.ID), first.Name)
		assert.False(t, first.CreatedAt.IsZero())

		// The query's ConfigMap, owned by the application.
		require.Eventually(t, func() bool { _, err := e.configMap(job); return err == nil }, 5*time.Second, time.Millisecond)
		cm, err := e.configMap(job)
		require.NoError(t, err)
		assert.Equal(t, "SELECT 1", cm.Data[QueryKey])
		require.Len(t, cm.OwnerReferences, 1)
		assert.Equal(t, app.GetUID(), cm.OwnerReferences[0].UID)
		assert.Equal(t, Kind, cm.OwnerReferences[0].Kind)
		assert.Equal(t, "1", cm.Labels[labelJobAttempt])

		pod := AppName(job.ID) + "-driver"
		e.addPod(t, pod)
		e.setStatus(t, job, "SUBMITTED", "", "")
		e.setStatus(t, job, "RUNNING", "", pod)
		require.Eventually(t, func() bool { return current(rt).State == "RUNNING" }, 5*time.Second, time.Millisecond)
		e.setStatus(t, job, "COMPLETED", "", pod)

		o := wait(t, ch)
		require.NoError(t, o.err)
		var out Output
		require.NoError(t, json.Unmarshal(o.res.Output, &out))
		assert.Equal(t, Output{
			Name: AppName(job.ID), Namespace: "spark", UID: string(app.GetUID()), State: "COMPLETED",
			SparkApplicationID: "spark-" + job.ID[:8], DriverPod: pod,
		}, out)
		assert.Contains(t, o.res.Message, "COMPLETED")
		assert.Contains(t, rt.StderrString(), "is RUNNING")
		assert.Contains(t, rt.StderrString(), "is COMPLETED")
		// The fake clientset's pod log is the fixed body "fake logs".
		assert.Contains(t, rt.StdoutString(), "fake logs\n")
		h := lastHandle(t, rt.Handle())
		assert.Equal(t, outcomeSucceeded, h.Outcome)
		assert.Equal(t, pod, h.DriverPod)
	})
}

func TestExecuteFails(t *testing.T) {
	// No driver ran after a failed submission, so it is retriable.
	for state, want := range map[string]plugin.ErrorClass{"FAILED": plugin.Permanent, "SUBMISSION_FAILED": plugin.Retriable} {
		t.Run(state, func(t *testing.T) {
			e := newEnv(t)
			job := newJob(t, nil)
			rt := plugintest.NewRuntime(nil)
			ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
			e.waitApp(t, job)
			e.setStatus(t, job, state, "driver exited with code 1: Table or view not found: t", "")
			o := wait(t, ch)
			class, msg := plugintest.Error(t, o.err)
			assert.Equal(t, want, class)
			assert.Contains(t, msg, state)
			assert.Contains(t, msg, "Table or view not found: t")
			h := lastHandle(t, rt.Handle())
			assert.Equal(t, outcomeFailed, h.Outcome)
			assert.Equal(t, state, h.State)
		})
	}
}

func TestUnknownGrace(t *testing.T) {
	t.Run("expires", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"unknown_grace": "100ms"})
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		e.waitApp(t, job)
		e.setStatus(t, job, "UNKNOWN", "", "")
		o := wait(t, ch)
		class, msg := plugintest.Error(t, o.err)
		assert.Equal(t, plugin.OutcomeUnknown, class)
		assert.Contains(t, msg, "UNKNOWN")
		assert.Equal(t, outcomeUnknown, lastHandle(t, rt.Handle()).Outcome)
	})
	t.Run("tolerated", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"unknown_grace": "1h"})
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		e.waitApp(t, job)
		e.setStatus(t, job, "UNKNOWN", "", "")
		require.Eventually(t, func() bool { return current(rt).UnknownSince != nil }, 5*time.Second, time.Millisecond)
		e.setStatus(t, job, "RUNNING", "", "")
		require.Eventually(t, func() bool { return current(rt).UnknownSince == nil }, 5*time.Second, time.Millisecond)
		e.setStatus(t, job, "COMPLETED", "", "")
		require.NoError(t, wait(t, ch).err)
	})
}

func TestTimeoutDeletes(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, map[string]any{"timeout": "200ms"})
	rt := plugintest.NewRuntime(nil)
	o := wait(t, background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) }))
	class, msg := plugintest.Error(t, o.err)
	assert.Equal(t, plugin.Permanent, class)
	assert.Contains(t, msg, "timed out after 200ms")
	_, err := e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the application is deleted: %v", err)
	_, err = e.configMap(job)
	assert.True(t, apierrors.IsNotFound(err), "the ConfigMap is deleted: %v", err)
	// Deleted with foreground propagation.
	var policy *metav1.DeletionPropagation
	for _, a := range e.dyn.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == Resource {
			policy = a.(interface{ GetDeleteOptions() metav1.DeleteOptions }).GetDeleteOptions().PropagationPolicy
		}
	}
	require.NotNil(t, policy)
	assert.Equal(t, metav1.DeletePropagationForeground, *policy)
	assert.Equal(t, outcomeFailed, lastHandle(t, rt.Handle()).Outcome)
}

func TestCancelLeavesApplication(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	rt := plugintest.NewRuntime(nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(ctx, job, rt) })
	app := e.waitApp(t, job)
	e.setStatus(t, job, "RUNNING", "", "")
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) > 0 }, 5*time.Second, time.Millisecond)
	cancel()
	start := time.Now()
	o := wait(t, ch)
	assert.Less(t, time.Since(start), 2*time.Second)
	require.Error(t, o.err)
	assert.True(t, errors.Is(o.err, context.Canceled), "got %v", o.err)
	assert.Equal(t, app.GetUID(), e.app(t, job).GetUID(), "the application is left running")
	_, err := e.configMap(job)
	assert.NoError(t, err)
}

func TestExecuteAttachesToSameAttempt(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	cfg, err := parseConfig(job.Config, job.Context)
	require.NoError(t, err)
	existing, err := e.dyn.Resource(GVR).Namespace("spark").Create(context.Background(), buildApp(job, cfg), metav1.CreateOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, e.creates.Load())

	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) > 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, string(existing.GetUID()), lastHandle(t, rt.Checkpoints()[0]).UID)
	e.setStatus(t, job, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
	assert.EqualValues(t, 1, e.creates.Load(), "no second application")
	assert.Contains(t, rt.StderrString(), "already exists for this attempt")
}

func TestExecuteReplacesEarlierAttempt(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	cfg, err := parseConfig(job.Config, job.Context)
	require.NoError(t, err)
	old, err := e.dyn.Resource(GVR).Namespace("spark").Create(context.Background(), buildApp(job, cfg), metav1.CreateOptions{})
	require.NoError(t, err)
	// Only a really failed one is replaced.
	e.setStatus(t, job, "FAILED", "boom", "")

	job.Attempt = 2
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	require.Eventually(t, func() bool { return len(rt.Checkpoints()) > 0 }, 5*time.Second, time.Millisecond)
	app := e.app(t, job)
	assert.NotEqual(t, old.GetUID(), app.GetUID())
	assert.Equal(t, "2", app.GetLabels()[labelJobAttempt])
	h := lastHandle(t, rt.Checkpoints()[0])
	assert.Equal(t, 2, h.JobAttempt)
	assert.Equal(t, string(app.GetUID()), h.UID)
	e.setStatus(t, job, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
	assert.EqualValues(t, 2, e.creates.Load())
	assert.Contains(t, rt.StderrString(), "of attempt 1 (it failed) before submitting attempt 2")
}

func TestTransientErrorsAreRetried(t *testing.T) {
	e := newEnv(t)
	creates := failNTimes(e.dyn, "create", Resource, 2, unavailable())
	gets := failNTimes(e.dyn, "get", Resource, 2, unavailable())
	cms := failNTimes(e.kube, "create", "configmaps", 2, apierrors.NewTooManyRequests("slow down", 0))
	job := newJob(t, nil)
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	e.waitApp(t, job)
	e.setStatus(t, job, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
	assert.GreaterOrEqual(t, creates.Load(), int32(3))
	assert.GreaterOrEqual(t, gets.Load(), int32(3))
	assert.GreaterOrEqual(t, cms.Load(), int32(3))
	assert.EqualValues(t, 1, e.creates.Load())
	assert.Contains(t, rt.StderrString(), "retrying")
}

func TestRefusedCreateIsPermanent(t *testing.T) {
	e := newEnv(t)
	calls := failNTimes(e.dyn, "create", Resource, 1000, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: Resource}, "x", errors.New("RBAC")))
	// Retried for auth_grace (RBAC or an access entry may be propagating),
	// then permanent. Nothing was created.
	job := newJob(t, map[string]any{"auth_grace": "300ms"})
	start := time.Now()
	_, err := e.p.Execute(context.Background(), job, plugintest.NewRuntime(nil))
	class, msg := plugintest.Error(t, err)
	assert.Equal(t, plugin.Permanent, class)
	assert.Contains(t, msg, "forbidden")
	assert.Contains(t, msg, "auth_grace 300ms")
	assert.Greater(t, calls.Load(), int32(1), "retried")
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
}

func TestInvalidSettingsCreateNothing(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, map[string]any{"type": "Go"})
	_, err := e.p.Execute(context.Background(), job, plugintest.NewRuntime(nil))
	class, msg := plugintest.Error(t, err)
	assert.Equal(t, plugin.Permanent, class)
	assert.Contains(t, msg, "type")
	assert.Empty(t, e.dyn.Actions())
	assert.Empty(t, e.kube.Actions())
}

func TestResume(t *testing.T) {
	t.Run("exists", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		rt := plugintest.NewRuntime(nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(ctx, job, rt) })
		app := e.waitApp(t, job)
		require.Eventually(t, func() bool { _, err := e.configMap(job); return err == nil }, 5*time.Second, time.Millisecond)
		cancel()
		wait(t, ch)

		rt2 := plugintest.NewRuntime(rt.Handle())
		ch = background(func() (*plugin.Result, error) { return e.p.Resume(context.Background(), job, rt2) })
		e.setStatus(t, job, "COMPLETED", "", "")
		o := wait(t, ch)
		require.NoError(t, o.err)
		assert.EqualValues(t, 1, e.creates.Load())
		h := lastHandle(t, rt2.Handle())
		assert.Equal(t, string(app.GetUID()), h.UID)
		assert.Empty(t, h.UIDMismatch)
	})
	t.Run("uid mismatch", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		cfg, err := parseConfig(job.Config, job.Context)
		require.NoError(t, err)
		app, err := e.dyn.Resource(GVR).Namespace("spark").Create(context.Background(), buildApp(job, cfg), metav1.CreateOptions{})
		require.NoError(t, err)
		h := &Handle{Version: handleVersion, JobAttempt: 1, Name: AppName(job.ID), Namespace: "spark", UID: "other-uid", Submitted: true, CreatedAt: time.Now()}
		b, _ := h.encode()
		rt := plugintest.NewRuntime(b)
		ch := background(func() (*plugin.Result, error) { return e.p.Resume(context.Background(), job, rt) })
		require.Eventually(t, func() bool { return len(rt.Checkpoints()) > 0 }, 5*time.Second, time.Millisecond)
		e.setStatus(t, job, "COMPLETED", "", "")
		require.NoError(t, wait(t, ch).err)
		got := lastHandle(t, rt.Handle())
		assert.Equal(t, string(app.GetUID()), got.UID)
		assert.Contains(t, got.UIDMismatch, "other-uid")
		assert.Contains(t, rt.StderrString(), "not other-uid")
	})
	t.Run("gone after submit", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		h := &Handle{Version: handleVersion, JobAttempt: 1, Name: AppName(job.ID), Namespace: "spark", UID: "u-1", Submitted: true, CreatedAt: time.Now(), State: "RUNNING"}
		b, _ := h.encode()
		rt := plugintest.NewRuntime(b)
		_, err := e.p.Resume(context.Background(), job, rt)
		class, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.OutcomeUnknown, class)
		assert.Contains(t, msg, "no longer exists and its outcome was not recorded; not resubmitting")
		assert.Contains(t, msg, "u-1")
		assert.Zero(t, e.creates.Load(), "never resubmitted")
		assert.Equal(t, outcomeUnknown, lastHandle(t, rt.Handle()).Outcome)
	})
	t.Run("never submitted", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Resume(context.Background(), job, rt) })
		e.waitApp(t, job)
		e.setStatus(t, job, "COMPLETED", "", "")
		require.NoError(t, wait(t, ch).err)
		assert.EqualValues(t, 1, e.creates.Load())
	})
	t.Run("handle of an earlier attempt", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		job.Attempt = 2
		h := &Handle{Version: handleVersion, JobAttempt: 1, Name: AppName(job.ID), Namespace: "spark", UID: "u-1", Submitted: true, CreatedAt: time.Now()}
		b, _ := h.encode()
		rt := plugintest.NewRuntime(b)
		ch := background(func() (*plugin.Result, error) { return e.p.Resume(context.Background(), job, rt) })
		app := e.waitApp(t, job)
		assert.Equal(t, "2", app.GetLabels()[labelJobAttempt])
		e.setStatus(t, job, "COMPLETED", "", "")
		require.NoError(t, wait(t, ch).err)
		assert.EqualValues(t, 1, e.creates.Load())
	})
	t.Run("terminal handle", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		for _, tc := range []struct {
			outcome string
			class   plugin.ErrorClass
		}{{outcomeSucceeded, ""}, {outcomeFailed, plugin.Permanent}, {outcomeUnknown, plugin.OutcomeUnknown}} {
			h := &Handle{Version: handleVersion, JobAttempt: 1, Name: AppName(job.ID), Namespace: "spark", UID: "u-1", Submitted: true,
				State: "COMPLETED", Outcome: tc.outcome, Message: "recorded " + tc.outcome}
			b, _ := h.encode()
			res, err := e.p.Resume(context.Background(), job, plugintest.NewRuntime(b))
			if tc.class == "" {
				require.NoError(t, err)
				assert.Contains(t, string(res.Output), `"uid":"u-1"`)
				continue
			}
			class, msg := plugintest.Error(t, err)
			assert.Equal(t, tc.class, class)
			assert.Contains(t, msg, "recorded "+tc.outcome)
		}
		assert.Empty(t, e.dyn.Actions(), "no API call for a recorded outcome")
	})
}

func TestDriverLogIsRead(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	pod := AppName(job.ID) + "-driver"
	e.addPod(t, pod)
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	e.waitApp(t, job)
	e.setStatus(t, job, "RUNNING", "", pod)
	require.Eventually(t, func() bool { return current(rt).DriverPod == pod }, 5*time.Second, time.Millisecond)
	e.setStatus(t, job, "COMPLETED", "", pod)
	require.NoError(t, wait(t, ch).err)
	// GetLogs was asked to follow with timestamps.
	var found bool
	for _, a := range e.kube.Actions() {
		if a.GetSubresource() == "log" {
			found = true
		}
	}
	assert.True(t, found, "the driver log was read")
}

func TestCleanup(t *testing.T) {
	t.Run("deletes", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		rt := plugintest.NewRuntime(nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(ctx, job, rt) })
		e.waitApp(t, job)
		require.Eventually(t, func() bool { _, err := e.configMap(job); return err == nil }, 5*time.Second, time.Millisecond)
		cancel()
		wait(t, ch)
		require.NoError(t, e.p.Cleanup(context.Background(), job))
		_, err := e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err))
		_, err = e.configMap(job)
		assert.True(t, apierrors.IsNotFound(err))
		// Idempotent.
		require.NoError(t, e.p.Cleanup(context.Background(), job))
	})
	t.Run("not found", func(t *testing.T) {
		e := newEnv(t)
		require.NoError(t, e.p.Cleanup(context.Background(), newJob(t, nil)))
	})
	t.Run("transient is retriable", func(t *testing.T) {
		e := newEnv(t)
		failNTimes(e.dyn, "get", Resource, 1, unavailable())
		class, _ := plugintest.Error(t, e.p.Cleanup(context.Background(), newJob(t, nil)))
		assert.Equal(t, plugin.Retriable, class)
	})
	t.Run("bad settings", func(t *testing.T) {
		e := newEnv(t)
		require.NoError(t, e.p.Cleanup(context.Background(), newJob(t, map[string]any{"bogus": 1})))
		assert.Empty(t, e.dyn.Actions())
	})
}

func TestHealthCheck(t *testing.T) {
	cfg := json.RawMessage(`{"kubeconfig":"test-kubeconfig","image":"x"}`)
	e := newEnv(t)
	err := e.p.HealthCheck(context.Background(), cfg)
	class, msg := plugintest.Error(t, err)
	assert.Equal(t, plugin.Permanent, class)
	assert.Contains(t, msg, "install the spark-operator CRDs")

	e.kube.Resources = []*metav1.APIResourceList{{GroupVersion: APIVersion, APIResources: []metav1.APIResource{{Name: Resource, Kind: Kind, Namespaced: true}}}}
	require.NoError(t, e.p.HealthCheck(context.Background(), cfg))

	failNTimes(e.kube, "get", "version", 1, unavailable())
	_, msg = plugintest.Error(t, e.p.HealthCheck(context.Background(), cfg))
	assert.Contains(t, msg, "does not answer")

	_, msg = plugintest.Error(t, e.p.HealthCheck(context.Background(), json.RawMessage(`{}`)))
	assert.Contains(t, msg, "kubeconfig")
}

func TestNamesAndLabels(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, map[string]any{"labels": map[string]string{"team": "data"}})
	job.Attempt = 3
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	app := e.waitApp(t, job)
	assert.Equal(t, map[string]string{
		labelManagedBy: "tether", labelJobID: job.ID, labelJobAttempt: strconv.Itoa(3), labelCommand: "spark-sql", "team": "data",
	}, app.GetLabels())
	e.setStatus(t, job, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
}
