package sparkeks

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// appGets counts the GETs of single applications (not the LISTs of their
// collection) in namespace ns.
func (c *requestCounter) appGets(ns string) int { return c.gets(appsPathOf(ns) + "/") }

// gets counts the GETs of paths starting with prefix.
func (c *requestCounter) gets(prefix string) int {
	prefix = "GET " + prefix
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.n {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// informerPlugin is a Plugin whose clients for access are cl (the
// informer kube's). Its watchers stop with the test.
func informerPlugin(t *testing.T, access Access, cl *clients) *Plugin {
	p := &Plugin{log: slog.New(slog.DiscardHandler)}
	p.clients.m = map[Access]*clients{access: cl}
	t.Cleanup(p.watchers.stopAll)
	return p
}

// informerJobs makes Spark SQL jobs of config cfg that poll every poll.
func informerJobs(t *testing.T, cfg map[string]any, poll string) func() *plugin.Job {
	t.Helper()
	rawCfg, err := json.Marshal(cfg)
	require.NoError(t, err)
	jobCtx, err := json.Marshal(map[string]any{
		"image": "spark:3.5.3", "main_application_file": "local:///opt/tether/run_sql.py",
		"query": "SELECT 1", "poll_interval": poll,
	})
	require.NoError(t, err)
	return func() *plugin.Job {
		return &plugin.Job{ID: uuid.Must(uuid.NewV7()).String(), Command: "spark-sql", Attempt: 1, Config: rawCfg, Context: jobCtx}
	}
}

// TestFollowSharesOneInformer runs many jobs at once through one Plugin
// against a real kube-apiserver. Following them costs one LIST and WATCH
// per resource (SparkApplications, driver pods), not requests per job, and
// no GET of any application while they run.
func TestFollowSharesOneInformer(t *testing.T) {
	const jobs = 50
	k := startInformerKube(t)
	ns := k.namespace(t)
	var rc requestCounter
	access := Access{Kubeconfig: "informer-kube"}
	p := informerPlugin(t, access, k.clients(t, &rc))
	newJob := informerJobs(t, map[string]any{"kubeconfig": access.Kubeconfig, "namespace": ns}, "50ms")

	type running struct {
		job *plugin.Job
		rt  *plugintest.Runtime
		ch  <-chan outcome
	}
	all := make([]running, jobs)
	for i := range all {
		job := newJob()
		rt := plugintest.NewRuntime(nil)
		all[i] = running{job, rt, background(func() (*plugin.Result, error) { return p.Execute(context.Background(), job, rt) })}
	}
	// Every job has submitted. The operator's part is played here.
	for _, j := range all {
		require.Eventually(t, func() bool { return current(j.rt).UID != "" }, informerWait, time.Millisecond)
	}
	// The operator's part, for every job at once.
	setAll := func(state string) {
		var wg sync.WaitGroup
		for _, j := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k.setAppState(t, ns, AppName(j.job.ID), state, "")
			}()
		}
		wg.Wait()
	}
	setAll("RUNNING")
	for _, j := range all {
		require.Eventually(t, func() bool { return current(j.rt).State == "RUNNING" }, informerWait, time.Millisecond, j.rt.StderrString())
	}
	// Twenty poll intervals of following 50 running jobs.
	before := rc.appGets(ns)
	time.Sleep(20 * 50 * time.Millisecond)
	assert.Equal(t, before, rc.appGets(ns), "GETs of applications while the jobs run: %s", &rc)

	setAll("COMPLETED")
	for _, j := range all {
		o := wait(t, j.ch)
		require.NoError(t, o.err, j.rt.StderrString())
		assert.Contains(t, o.res.Message, "COMPLETED")
	}

	appReqs, podReqs := rc.informer(appsPathOf(ns)), rc.informer(podsPathOf(ns))
	t.Logf("%d jobs: [watch-list, LIST, WATCH] requests: SparkApplications %v, pods %v; GETs of single applications: %d (all: %s)",
		jobs, appReqs, podReqs, rc.appGets(ns), &rc)
	for what, r := range map[string][3]int{"SparkApplications": appReqs, "pods": podReqs} {
		// client-go's watch-list request, then (this apiserver cannot
		// stream the initial list) one LIST and one WATCH: [1 0 0] or
		// [1 1 1]. A WATCH the server or the proxy closed is re-opened
		// from the last resource version (no new LIST). A request per
		// process, not per job, which a busy run can show.
		assert.Equal(t, 1, r[0], "%s: one watch-list", what)
		assert.LessOrEqual(t, r[1], 1, "%s: at most one LIST", what)
		assert.LessOrEqual(t, r[2], 3, "%s: WATCHes", what)
		if r[1] == 0 {
			assert.Zero(t, r[2], "%s: a WATCH only after the LIST fallback", what)
		}
	}
	assert.Zero(t, rc.appGets(ns), "GETs of single applications: none (create answers with the application)")
	assert.Zero(t, rc.gets(podsPathOf(ns)+"/"), "GETs of single pods")
	assert.Equal(t, jobs, rc.count("POST", appsPathOf(ns)), "one create per job")
}

// TestFollowRefusedInformer covers the case where the API server (here its
// proxy) refuses the shared informer's LIST and WATCH of SparkApplications.
// Past auth_grace the job has lost track of its application
// (outcome_unknown, left running). A refusal that ends within auth_grace
// costs nothing.
func TestFollowRefusedInformer(t *testing.T) {
	k := startInformerKube(t)
	setup := func(t *testing.T, authGrace string) (*Plugin, string, func() *plugin.Job) {
		ns := k.namespace(t)
		access := Access{Kubeconfig: "informer-kube-" + ns}
		p := informerPlugin(t, access, k.clients(t, nil))
		return p, ns, informerJobs(t, map[string]any{"kubeconfig": access.Kubeconfig, "namespace": ns, "auth_grace": authGrace}, "100ms")
	}
	// GETs of the collection path: the informer's watch-list, LIST and
	// WATCH (and the GETs that stand in for it meanwhile). Not the create.
	refuse := func(ns string, n int) {
		k.proxy.Inject(kubetest.Fault{Method: http.MethodGet, Contains: "/namespaces/" + ns + "/" + Resource, Status: http.StatusForbidden, Count: n})
	}

	t.Run("past auth_grace", func(t *testing.T) {
		p, ns, newJob := setup(t, "1s")
		refuse(ns, 1<<30)
		job := newJob()
		rt := plugintest.NewRuntime(nil)
		_, err := p.Execute(context.Background(), job, rt)
		class, msg := plugintest.Error(t, err)
		assert.Equal(t, plugin.OutcomeUnknown, class, msg)
		assert.Contains(t, msg, "lost track of SparkApplication")
		assert.Contains(t, msg, "auth_grace 1s")
		assert.Contains(t, msg, "keeps running")
		assert.Equal(t, outcomeUnknown, lastHandle(t, rt.Handle()).Outcome)
		assert.True(t, lastHandle(t, rt.Handle()).Blind, "decided blind")
		_, err = k.env.Dynamic.Resource(GVR).Namespace(ns).Get(context.Background(), AppName(job.ID), metav1.GetOptions{})
		assert.NoError(t, err, "left running: the host's Cleanup deletes it")

		// The refusal ends and the application completes. A Resume (the
		// agent died before storing the end) looks again instead of
		// reporting the blind outcome: the job succeeded.
		k.proxy.Clear()
		k.setAppState(t, ns, AppName(job.ID), "COMPLETED", "")
		rt2 := plugintest.NewRuntime(rt.Handle())
		_, err = p.Resume(context.Background(), job, rt2)
		require.NoError(t, err, rt2.StderrString())
		assert.Contains(t, rt2.StderrString(), "was decided while the API server refused the plugin; looking at SparkApplication")
		assert.Equal(t, outcomeSucceeded, lastHandle(t, rt2.Handle()).Outcome)
	})
	t.Run("within auth_grace", func(t *testing.T) {
		p, ns, newJob := setup(t, "1m")
		refuse(ns, 3)
		job := newJob()
		rt := plugintest.NewRuntime(nil)
		ch := background(func() (*plugin.Result, error) { return p.Execute(context.Background(), job, rt) })
		require.Eventually(t, func() bool { return current(rt).UID != "" }, informerWait, time.Millisecond)
		k.setAppState(t, ns, AppName(job.ID), "RUNNING", "")
		require.Eventually(t, func() bool { return current(rt).State == "RUNNING" }, informerWait, time.Millisecond, rt.StderrString())
		k.setAppState(t, ns, AppName(job.ID), "COMPLETED", "")
		o := wait(t, ch)
		require.NoError(t, o.err, rt.StderrString())
	})
}
