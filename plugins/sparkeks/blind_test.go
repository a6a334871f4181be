package main

// An outcome decided blind (issue 29, item 9): the API server refuses the
// plugin past auth_grace, the job ends outcome_unknown, and the
// application runs on under the real spark-operator. The host's Cleanup
// (and a Resume, when the agent died before storing the end) must look at
// the application again before anything is reported or deleted.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// blindRun is a job against the operator stack through a refusing proxy of
// the test's own (cutting the plugin's access there leaves the other
// tests' alone), in a namespace of its own, with auth_grace 1s.
type blindRun struct {
	s    *kubetest.OperatorStack
	rp   *refusingProxy
	ctx  context.Context
	ns   string
	name string
	job  *plugin.Job
	w    *appWatch
}

func newBlindRun(t *testing.T, conf map[string]string, extra map[string]any) *blindRun {
	t.Helper()
	s := operatorStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	rp := startRefusingProxyTo(t, s.Proxy, "") // every request
	ns := fmt.Sprintf("tether-blind-%d", quotaNS.Add(1))
	cs := s.Env.Clientset
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	ctxExtra := map[string]any{"namespace": ns, "auth_grace": "1s"}
	for k, v := range extra {
		ctxExtra[k] = v
	}
	job := jobFor(t, rp.kubeconfig, conf, ctxExtra)
	name := "spark-sql-job-" + job.ID
	return &blindRun{s: s, rp: rp, ctx: ctx, ns: ns, name: name, job: job, w: watchApp(t, ctx, s, ns, name)}
}

// cutAuth makes the proxy refuse every request of the plugin (401 and
// 403, as an API server answers a token it no longer accepts or a binding
// removed), and breaks the watches open now, as their timeout would.
func (b *blindRun) cutAuth() { b.rp.refuseFor(time.Hour) }

// restoreAuth ends the refusal.
func (b *blindRun) restoreAuth() { b.rp.refuseFor(0) }

// executeBlind runs the job until its application is RUNNING, cuts the
// plugin's access, and returns the handle of the job that ended blind.
func (b *blindRun) executeBlind(t *testing.T) []byte {
	t.Helper()
	rt, errc := executeSubmitted(t, b.ctx, b.job)
	b.w.waitState(t, "RUNNING", 20*time.Second)
	b.cutAuth()
	err := <-errc
	requireClass(t, err, plugin.OutcomeUnknown)
	require.Contains(t, err.Error(), "lost track of SparkApplication")
	var h map[string]any
	require.NoError(t, json.Unmarshal(rt.Handle(), &h))
	require.Equal(t, "outcome_unknown", h["outcome"])
	require.Equal(t, true, h["blind"], "decided blind")
	return rt.Handle()
}

func (b *blindRun) cleanup(t *testing.T, handle []byte) error {
	t.Helper()
	job := *b.job
	job.Handle = handle
	return connect(t).Cleanup(b.ctx, &job)
}

func (b *blindRun) requireAppState(t *testing.T, want string) {
	t.Helper()
	app, err := b.s.Env.Dynamic.Resource(kubetest.SparkApplications).Namespace(b.ns).Get(b.ctx, b.name, metav1.GetOptions{})
	require.NoError(t, err, "the application must still exist")
	require.Equal(t, want, nestedString(app, "status", "applicationState", "state"))
	_, err = b.s.Env.Clientset.CoreV1().ConfigMaps(b.ns).Get(b.ctx, b.name+"-query", metav1.GetOptions{})
	require.NoError(t, err, "its query ConfigMap too")
}

// The application completes after its job ended blind. Cleanup does not
// delete it while it cannot see it, nor once it has seen it completed: it
// is the evidence of the job's success, which a requeue of the job records
// by adopting it (without running the query again). A Resume of the blind
// handle (the agent died before storing the end) reports the success.
func TestOperatorBlindOutcomeCompletedIsKept(t *testing.T) {
	t.Parallel()
	b := newBlindRun(t, map[string]string{kubetest.SimRun: "2500ms", kubetest.KubeletLogLines: "3"}, nil)
	handle := b.executeBlind(t)
	b.w.waitState(t, "COMPLETED", 20*time.Second)

	err := b.cleanup(t, handle)
	requireClass(t, err, plugin.Retriable)
	require.Contains(t, err.Error(), "decided while the API server refused the plugin")
	b.requireAppState(t, "COMPLETED")

	b.restoreAuth()
	require.NoError(t, b.cleanup(t, handle), "a completed application is kept, and that is done")
	b.requireAppState(t, "COMPLETED")
	require.Never(t, func() bool { return b.w.state() != "COMPLETED" }, 500*time.Millisecond, 20*time.Millisecond)

	rt := plugintest.NewRuntime(handle)
	res, err := connect(t).Resume(b.ctx, b.job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Contains(t, rt.StderrString(), "was decided while the API server refused the plugin; looking at SparkApplication")

	requeued := *b.job
	requeued.Attempt = 2
	res, rt = executeOK(t, b.ctx, connect(t), &requeued)
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Contains(t, rt.StderrString(), "exists and it completed; adopting it as attempt 2's")
	require.Equal(t, 1, b.s.Created(b.ns, b.name), "the query ran once")
	require.Len(t, b.w.driverPods(), 1)
}

// The application still runs when Cleanup looks: it is not deleted before
// it ends (it may complete) or its job's timeout passes, counted from its
// creation. Then Cleanup deletes it as the job's own timeout would have.
func TestOperatorBlindOutcomeRunningWaitsForItsTimeout(t *testing.T) {
	t.Parallel()
	b := newBlindRun(t, map[string]string{kubetest.SimOutcome: "hang"}, map[string]any{"timeout": "30s"})
	handle := b.executeBlind(t)
	b.restoreAuth()

	err := b.cleanup(t, handle)
	requireClass(t, err, plugin.Retriable)
	require.Contains(t, err.Error(), "is RUNNING")
	require.Contains(t, err.Error(), "not deleted before it ends or its timeout 30s passes")
	b.requireAppState(t, "RUNNING")

	// The host's queue retries Cleanup with backoff.
	require.Eventually(t, func() bool { return b.cleanup(t, handle) == nil }, 45*time.Second, 500*time.Millisecond)
	b.w.waitAllGone(t, b.ctx, 20*time.Second)
}
