package sparkeks

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// createAttempt creates job's application as attempt n would have, with
// state, and returns it.
func (e *env) createAttempt(t *testing.T, job *plugin.Job, n int, state, msg string) *unstructured.Unstructured {
	t.Helper()
	j := *job
	j.Attempt = n
	cfg, err := parseConfig(j.Config, j.Context)
	require.NoError(t, err)
	app, err := e.dyn.Resource(GVR).Namespace("spark").Create(context.Background(), buildApp(&j, cfg), metav1.CreateOptions{})
	require.NoError(t, err)
	if state != "" {
		e.setStatus(t, &j, state, msg, "")
	}
	return app
}

// A retry never deletes an earlier attempt's application that runs or ran.
// It adopts it and follows it to its end as its own outcome.
func TestRetryAdoptsEarlierAttempt(t *testing.T) {
	for _, tc := range []struct {
		state, end string
		wantErr    bool
	}{
		{"RUNNING", "COMPLETED", false},
		{"SUBMITTED", "COMPLETED", false},
		{"", "COMPLETED", false},
		{"SUCCEEDING", "COMPLETED", false},
		{"PENDING_RERUN", "COMPLETED", false},
		{"UNKNOWN", "COMPLETED", false},
		{"FAILING", "FAILED", true},
		{"COMPLETED", "", false}, // success at once
	} {
		t.Run(cmp.Or(tc.state, "new"), func(t *testing.T) {
			e := newEnv(t)
			job := newJob(t, nil)
			old := e.createAttempt(t, job, 1, tc.state, "")
			job.Attempt = 2
			rt := plugintest.NewRuntime(nil)
			ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
			require.Eventually(t, func() bool { return current(rt).UID != "" }, 5*time.Second, time.Millisecond)
			h := current(rt)
			assert.Equal(t, string(old.GetUID()), h.UID)
			assert.Equal(t, 1, h.AdoptedAttempt)
			assert.Equal(t, 2, h.JobAttempt)
			if tc.end != "" {
				e.setStatus(t, job, tc.end, "boom", "")
			}
			o := wait(t, ch)
			if tc.wantErr {
				class, msg := plugintest.Error(t, o.err)
				assert.Equal(t, plugin.Permanent, class)
				assert.Contains(t, msg, "boom")
			} else {
				require.NoError(t, o.err, rt.StderrString())
				assert.Contains(t, string(o.res.Output), string(old.GetUID()))
			}
			assert.EqualValues(t, 1, e.creates.Load(), "never submitted again")
			app := e.app(t, job)
			assert.Equal(t, old.GetUID(), app.GetUID(), "never deleted")
			assert.Contains(t, rt.StderrString(), "adopting it as attempt 2's")
		})
	}
}

func TestRetryReplacesAFailedEarlierAttempt(t *testing.T) {
	for _, state := range []string{"FAILED", "SUBMISSION_FAILED"} {
		t.Run(state, func(t *testing.T) {
			e := newEnv(t)
			job := newJob(t, nil)
			old := e.createAttempt(t, job, 1, state, "boom")
			job.Attempt = 2
			rt := plugintest.NewRuntime(nil)
			ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
			require.Eventually(t, func() bool { return current(rt).UID != "" }, 5*time.Second, time.Millisecond)
			assert.NotEqual(t, string(old.GetUID()), current(rt).UID)
			assert.Zero(t, current(rt).AdoptedAttempt)
			e.setStatus(t, job, "COMPLETED", "", "")
			require.NoError(t, wait(t, ch).err)
			assert.EqualValues(t, 2, e.creates.Load())
		})
	}
}

func TestRetryOfASuspendedApplicationIsOutcomeUnknown(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	old := e.createAttempt(t, job, 1, "SUSPENDED", "")
	job.Attempt = 2
	_, err := e.p.Execute(context.Background(), job, plugintest.NewRuntime(nil))
	class, _ := plugintest.Error(t, err)
	assert.Equal(t, plugin.OutcomeUnknown, class)
	assert.Equal(t, old.GetUID(), e.app(t, job).GetUID(), "untouched")
}

// Resume of a retry that never submitted follows the same rule.
func TestResumeAdoptsEarlierAttempt(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	old := e.createAttempt(t, job, 1, "RUNNING", "")
	job.Attempt = 2
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Resume(context.Background(), job, rt) })
	require.Eventually(t, func() bool { return current(rt).UID != "" }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 1, current(rt).AdoptedAttempt)

	// Resumed again from that handle: still following the adopted one.
	e.setStatus(t, job, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
	assert.EqualValues(t, 1, e.creates.Load())
	assert.Equal(t, old.GetUID(), e.app(t, job).GetUID())

	e2 := newEnv(t)
	job2 := newJob(t, nil)
	old2 := e2.createAttempt(t, job2, 1, "RUNNING", "")
	job2.Attempt = 2
	h := &Handle{Version: handleVersion, JobAttempt: 2, Name: AppName(job2.ID), Namespace: "spark", UID: string(old2.GetUID()), Submitted: true, CreatedAt: time.Now(), AdoptedAttempt: 1}
	b, _ := h.encode()
	rt2 := plugintest.NewRuntime(b)
	ch = background(func() (*plugin.Result, error) { return e2.p.Resume(context.Background(), job2, rt2) })
	require.Eventually(t, func() bool { return len(rt2.Checkpoints()) > 0 }, 5*time.Second, time.Millisecond)
	e2.setStatus(t, job2, "COMPLETED", "", "")
	require.NoError(t, wait(t, ch).err)
	assert.EqualValues(t, 1, e2.creates.Load(), "only attempt 1's")
}

func TestDriverPodNotFoundIsOutcomeUnknown(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	e.waitApp(t, job)
	e.setStatus(t, job, "FAILED", "driver pod not found", "")
	class, msg := plugintest.Error(t, wait(t, ch).err)
	assert.Equal(t, plugin.OutcomeUnknown, class)
	assert.Contains(t, msg, "driver pod not found")
	assert.Equal(t, outcomeUnknown, lastHandle(t, rt.Handle()).Outcome)
}

func TestStartupTimeout(t *testing.T) {
	t.Run("image pull", func(t *testing.T) {
		e := newEnv(t)
		// Long enough for the test to create the pod and set the state
		// before it passes, on a loaded machine too.
		job := newJob(t, map[string]any{"startup_timeout": "3s"})
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		e.waitApp(t, job)
		pod := AppName(job.ID) + "-driver"
		_, err := e.kube.CoreV1().Pods("spark").Create(context.Background(), &corev1.Pod{
			// The labels spark-operator gives a driver pod. The plugin's
			// pod informer selects on them.
			ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "spark", Labels: map[string]string{
				labelManagedBy: managedByTether, labelSparkRole: sparkRoleDriver, labelOperatorAppName: AppName(job.ID),
			}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name:  driverContainer,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "spark:nope"`}},
			}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		e.setStatus(t, job, "SUBMITTED", "", pod)
		class, msg := plugintest.Error(t, wait(t, ch).err)
		assert.Equal(t, plugin.Permanent, class)
		assert.Contains(t, msg, "startup_timeout 3s")
		assert.Contains(t, msg, "ImagePullBackOff")
		assert.Contains(t, msg, `Back-off pulling image "spark:nope"`)
		assert.Contains(t, msg, "deleted it")
		_, err = e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err))
	})
	t.Run("no driver pod", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"startup_timeout": "200ms"})
		_, err := e.p.Execute(context.Background(), job, plugintest.NewRuntime(nil))
		class, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.Permanent, class)
		assert.Contains(t, msg, "no driver pod after 200ms (state new)")
	})
	t.Run("failed delete says so", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"startup_timeout": "200ms"})
		failNTimes(e.dyn, "delete", Resource, 1000, unavailable())
		rt := plugintest.NewRuntime(nil)
		_, err := e.p.Execute(context.Background(), job, rt)
		class, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.Permanent, class, "the job's failure is the truth")
		assert.Contains(t, msg, "deleting it failed")
		assert.Contains(t, msg, "Cleanup")
		// The handle names the UID the host's Cleanup deletes.
		assert.NotEmpty(t, lastHandle(t, rt.Handle()).UID)
	})
	// The operator fell behind (down, crash-looping, upgraded, or behind
	// in its workqueue) while the application still says SUBMITTED: a
	// driver that is running, or has finished the query, is past startup.
	// The application is neither failed nor deleted, and once the operator
	// catches up the job ends as the driver did.
	for _, phase := range []corev1.PodPhase{corev1.PodRunning, corev1.PodSucceeded} {
		t.Run("driver "+string(phase)+" under a lagging operator is not stuck", func(t *testing.T) {
			e := newEnv(t)
			// The test creates the driver pod and sets SUBMITTED within
			// startupTimeout of the application's creation, on a loaded
			// machine too (300ms was not: the plugin found no pod and
			// deleted the application first).
			const startupTimeout = 2 * time.Second
			job := newJob(t, map[string]any{"startup_timeout": startupTimeout.String()})
			rt := plugintest.NewRuntime(nil)
			ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
			e.waitApp(t, job)
			pod := AppName(job.ID) + "-driver"
			state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
			if phase == corev1.PodSucceeded {
				state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
			}
			_, err := e.kube.CoreV1().Pods("spark").Create(context.Background(), &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "spark", Labels: map[string]string{
					labelManagedBy: managedByTether, labelSparkRole: sparkRoleDriver, labelOperatorAppName: AppName(job.ID),
				}},
				Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: driverContainer, State: state}}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			e.setStatus(t, job, "SUBMITTED", "", pod)
			require.Eventually(t, func() bool { return current(rt).EverRunning }, 10*time.Second, time.Millisecond,
				"the started driver was not taken for past startup")
			assert.Contains(t, rt.StderrString(), "spark-operator is behind; startup_timeout no longer applies")
			// Well past startup_timeout, still SUBMITTED: the job waits.
			select {
			case r := <-ch:
				t.Fatalf("the job ended while its driver was %s: %v", phase, r.err)
			case <-time.After(startupTimeout + time.Second):
			}
			_, err = e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
			require.NoError(t, err, "the application of a started driver was deleted")
			e.setStatus(t, job, "COMPLETED", "", pod)
			require.NoError(t, wait(t, ch).err)
		})
	}
	t.Run("running is not stuck", func(t *testing.T) {
		e := newEnv(t)
		// Long enough for RUNNING to be seen first under -race on a busy
		// machine. The wait below then goes past it.
		job := newJob(t, map[string]any{"startup_timeout": "1500ms"})
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		e.waitApp(t, job)
		e.setStatus(t, job, "RUNNING", "", "")
		require.Eventually(t, func() bool { return current(rt).EverRunning }, 5*time.Second, time.Millisecond)
		time.Sleep(1800 * time.Millisecond)
		e.setStatus(t, job, "COMPLETED", "", "")
		require.NoError(t, wait(t, ch).err)
	})
}

func forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: Resource}, "x", errors.New("access entry not ready"))
}

// refuseListWatch makes the fake refuse (403) the first n lists and
// watches of applications (the shared informer's requests). refused counts
// them.
func refuseListWatch(e *env, n int64) (refused *atomic.Int64) {
	refused = new(atomic.Int64)
	e.dyn.PrependReactor("list", Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) <= n {
			return true, nil, forbidden()
		}
		return false, nil, nil
	})
	e.dyn.PrependWatchReactor(Resource, func(k8stesting.Action) (bool, watch.Interface, error) {
		if refused.Add(1) <= n {
			return true, nil, forbidden()
		}
		return false, nil, nil
	})
	return refused
}

// TestRefusedListWatch covers the case where the informer the jobs follow their
// applications through is refused (an EKS token not accepted, an access
// entry being replaced). Within auth_grace the job is followed with GETs
// meanwhile. Past it, the outcome is unknown.
func TestRefusedListWatch(t *testing.T) {
	t.Run("within auth_grace", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"auth_grace": "1h"})
		refused := refuseListWatch(e, 3)
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		e.waitApp(t, job)
		require.Eventually(t, func() bool { return current(rt).UID != "" }, 5*time.Second, time.Millisecond)
		e.setStatus(t, job, "RUNNING", "", "")
		// Seen while the informer is refused. By the GETs that stand in.
		require.Eventually(t, func() bool { return current(rt).State == "RUNNING" }, 5*time.Second, time.Millisecond)
		// The reflector retries with backoff (0.8s, 1.6s, ...) and recovers.
		require.Eventually(t, func() bool { return refused.Load() > 3 }, 20*time.Second, time.Millisecond)
		e.setStatus(t, job, "COMPLETED", "", "")
		require.NoError(t, wait(t, ch).err, rt.StderrString())
	})
	t.Run("past auth_grace", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"auth_grace": "200ms"})
		refuseListWatch(e, 1<<40)
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		class, msg := plugintest.Error(t, wait(t, ch).err)
		assert.Equal(t, plugin.OutcomeUnknown, class)
		assert.Contains(t, msg, "auth_grace 200ms")
		assert.Contains(t, msg, "keeps running")
		// Left running. The host's Cleanup looks at it again before deleting it.
		_, err := e.dyn.Tracker().Get(GVR, "spark", AppName(job.ID))
		assert.NoError(t, err)
	})
}

// refuseGets makes the fake refuse (403) the next n gets of applications,
// n set later through the returned counter (the fake's reactor chain must
// not change while the plugin runs). refused counts them.
func refuseGets(e *env) (n, refused *atomic.Int64) {
	n, refused = new(atomic.Int64), new(atomic.Int64)
	e.dyn.PrependReactor("get", Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if n.Add(-1) >= 0 {
			refused.Add(1)
			return true, nil, forbidden()
		}
		n.Store(0)
		return false, nil, nil
	})
	return n, refused
}

func TestRefusedGets(t *testing.T) {
	// The GETs follow makes are those that confirm an application missing
	// from the informer's cache is gone. refused, they are retried for
	// auth_grace.
	t.Run("confirming it is gone, past auth_grace", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"auth_grace": "200ms"})
		n, refused := refuseGets(e)
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
		e.waitApp(t, job)
		e.setStatus(t, job, "RUNNING", "", "")
		require.Eventually(t, func() bool { return current(rt).State == "RUNNING" }, 5*time.Second, time.Millisecond)
		n.Store(1 << 40)
		// Deleted behind the plugin's back. Missing from the cache, and the
		// GET that would say so refused.
		require.NoError(t, e.dyn.Resource(GVR).Namespace("spark").Delete(context.Background(), AppName(job.ID), metav1.DeleteOptions{}))
		class, msg := plugintest.Error(t, wait(t, ch).err)
		assert.Equal(t, plugin.OutcomeUnknown, class)
		assert.Contains(t, msg, "refused every get")
		assert.Contains(t, msg, "auth_grace 200ms")
		assert.Positive(t, refused.Load())
	})
	t.Run("resume's first read", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, map[string]any{"auth_grace": "200ms"})
		h := &Handle{Version: handleVersion, JobAttempt: 1, Name: AppName(job.ID), Namespace: "spark", UID: "u", Submitted: true, CreatedAt: time.Now()}
		b, _ := h.encode()
		failNTimes(e.dyn, "get", Resource, 1<<30, forbidden())
		_, err := e.p.Resume(context.Background(), job, plugintest.NewRuntime(b))
		class, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.OutcomeUnknown, class, "never permanent: the application may run on")
		assert.Contains(t, msg, "forbidden")
	})
}

func TestCleanupIsFencedByAttempt(t *testing.T) {
	t.Run("no handle: only this attempt's", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		e.createAttempt(t, job, 2, "RUNNING", "")
		require.NoError(t, e.p.Cleanup(context.Background(), job)) // attempt 1
		e.app(t, job)                                              // still there
		job.Attempt = 2
		require.NoError(t, e.p.Cleanup(context.Background(), job))
		_, err := e.dyn.Tracker().Get(GVR, "spark", AppName(job.ID))
		assert.True(t, apierrors.IsNotFound(err))
	})
	t.Run("handle: its namespace and uid", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		app, err := e.dyn.Resource(GVR).Namespace("elsewhere").Create(context.Background(), buildApp(job, Config{Namespace: "elsewhere", QueryMountPath: DefaultQueryMountPath}), metav1.CreateOptions{})
		require.NoError(t, err)
		h := &Handle{Version: handleVersion, JobAttempt: 1, Name: AppName(job.ID), Namespace: "elsewhere", UID: string(app.GetUID()), Submitted: true}
		job.Handle, _ = h.encode()
		var deletes []string
		e.dyn.PrependReactor("delete", Resource, func(a k8stestingAction) (bool, runtimeObject, error) {
			d := a.(k8stestingDeleteAction)
			deletes = append(deletes, d.GetNamespace())
			return false, nil, nil
		})
		require.NoError(t, e.p.Cleanup(context.Background(), job))
		assert.Equal(t, []string{"elsewhere"}, deletes)
		_, err = e.dyn.Tracker().Get(GVR, "elsewhere", AppName(job.ID))
		assert.True(t, apierrors.IsNotFound(err))
	})
	t.Run("configmap of another attempt kept", func(t *testing.T) {
		e := newEnv(t)
		job := newJob(t, nil)
		j2 := *job
		j2.Attempt = 2
		cfg, _ := parseConfig(j2.Config, j2.Context)
		_, err := e.kube.CoreV1().ConfigMaps("spark").Create(context.Background(), buildConfigMap(&j2, cfg, AppName(job.ID), "uid-2"), metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, e.p.Cleanup(context.Background(), job))
		_, err = e.configMap(job)
		assert.NoError(t, err, "attempt 2's ConfigMap is not attempt 1's to delete")
	})
}

type (
	k8stestingAction       = k8stesting.Action
	k8stestingDeleteAction = k8stesting.DeleteAction
	runtimeObject          = runtime.Object
)

// A timeout whose delete fails still fails the job (the truth), says the
// application may run on, and leaves the UID in the handle for the host's
// Cleanup.
func TestTimeoutWithAFailedDeleteSaysSo(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, map[string]any{"timeout": "200ms"})
	failNTimes(e.dyn, "delete", Resource, 1000, unavailable())
	rt := plugintest.NewRuntime(nil)
	ch := background(func() (*plugin.Result, error) { return e.p.Execute(context.Background(), job, rt) })
	e.waitApp(t, job)
	e.setStatus(t, job, "RUNNING", "", "")
	class, msg := plugintest.Error(t, wait(t, ch).err)
	assert.Equal(t, plugin.Permanent, class)
	assert.Contains(t, msg, "timed out after 200ms")
	assert.Contains(t, msg, "deleting it failed")
	assert.Contains(t, msg, "may still be running until the agent's Cleanup")
	h := lastHandle(t, rt.Handle())
	assert.Equal(t, outcomeFailed, h.Outcome)
	assert.NotEmpty(t, h.UID)

	// The host's Cleanup, given that handle, deletes it once the API allows.
	e2 := newEnv(t)
	require.NoError(t, e2.dyn.Tracker().Add(e.app(t, job)))
	job.Handle = rt.Handle()
	require.NoError(t, e2.p.Cleanup(context.Background(), job))
	_, err := e2.dyn.Tracker().Get(GVR, "spark", AppName(job.ID))
	assert.True(t, apierrors.IsNotFound(err))
}

// A checkpoint the host refuses once the application exists ends the
// attempt outcome_unknown, never retriable. A retriable failure is cleaned
// up and retried by the host, which would delete the running query and
// run it again.
func TestRefusedCheckpointIsNotRetriable(t *testing.T) {
	e := newEnv(t)
	job := newJob(t, nil)
	rt := plugintest.NewRuntime(nil)
	rt.FailCheckpoints(errors.New("refused by the host"))
	_, err := e.p.Execute(context.Background(), job, rt)
	class, msg := plugintest.Error(t, err)
	assert.Equal(t, plugin.OutcomeUnknown, class)
	assert.Contains(t, msg, "refused by the host")
	_, err = e.dyn.Resource(GVR).Namespace("spark").Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
	assert.NoError(t, err, "the plugin leaves the application to the host's Cleanup")
}
