package main

// The real plugin binary, through go-plugin, against a real kube-apiserver +
// etcd (internal/kubetest) with the operator simulator moving applications
// along and every request going through a proxy that counts creations and
// injects faults.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tetherjobs/tether/internal/gobuild"
	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

var (
	binPath string
	kube    *kubetest.Env
	sim     *kubetest.Simulator
	proxy   *kubetest.Proxy
)

const appsPath = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications"

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tether-sparkeks-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "tether-plugin-sparkeks")
	if out, err := gobuild.Command(context.Background(), "go", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the plugin: %v\n%s", err, out)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	stack, err := kubetest.StartStack(ctx, dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	kube, proxy, sim = stack.Env, stack.Proxy, stack.Sim
	defer stopOperatorStack() // started by the first operator test (operator_test.go)
	return m.Run()
}

func connect(t *testing.T) plugintest.Client {
	t.Helper()
	return plugintest.StartBinary(t, binPath, []string{"HOME=" + t.TempDir()})
}

// newJob is a job whose context scripts the simulator through spark_conf.
func newJob(t *testing.T, sim map[string]string, extra map[string]any) *plugin.Job {
	t.Helper()
	return jobFor(t, proxy.Kubeconfig, sim, extra)
}

func getApp(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return kube.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Get(ctx, name, metav1.GetOptions{})
}

// requireGone waits for the application and its ConfigMap to be deleted.
func requireGone(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := getApp(ctx, name)
		_, cmErr := kube.Clientset.CoreV1().ConfigMaps("default").Get(ctx, name+"-query", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(cmErr)
	}, 20*time.Second, 50*time.Millisecond, "application %s and its ConfigMap should be deleted", name)
}

func TestInfoAndHealth(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, "sparkeks", info.Name)
	require.True(t, info.Has(plugin.CapResume) && info.Has(plugin.CapCleanup) && info.Has(plugin.CapHealth), "%+v", info)
	cfg, _ := json.Marshal(map[string]any{"kubeconfig": proxy.Kubeconfig})
	require.NoError(t, c.HealthCheck(ctx, cfg))
	bad, _ := json.Marshal(map[string]any{"kubeconfig": filepath.Join(t.TempDir(), "missing")})
	require.Error(t, c.HealthCheck(ctx, bad))
}

func TestSucceeds(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimRun: "300ms"}, nil)
	name := "spark-sql-job-" + job.ID
	res, rt := executeOK(t, ctx, c, job)

	var out map[string]any
	require.NoError(t, json.Unmarshal(res.Output, &out))
	require.Equal(t, name, out["name"])
	require.Equal(t, "COMPLETED", out["state"])
	require.Equal(t, name+"-driver", out["driver_pod"])
	require.NotEmpty(t, out["spark_application_id"])

	app, err := getApp(ctx, name)
	require.NoError(t, err)
	require.Equal(t, out["uid"], string(app.GetUID()))
	require.Equal(t, 1, sim.Created("default", name))
	// The query reached the ConfigMap the driver mounts, owned by the app.
	cm, err := kube.Clientset.CoreV1().ConfigMaps("default").Get(ctx, name+"-query", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "SELECT 1", cm.Data["query.sql"])
	require.Equal(t, app.GetUID(), cm.OwnerReferences[0].UID)
	// The simulator's driver pod is never on a node: nothing to stream, and
	// no warning (every driver starts unscheduled).
	require.NotContains(t, rt.StderrString(), "driver logs unavailable", rt.StderrString())
	require.NotContains(t, rt.StderrString(), "streaming the log")

	// Cleanup deletes both. A second Cleanup finds nothing and succeeds.
	require.NoError(t, c.Cleanup(ctx, job))
	requireGone(t, ctx, name)
	require.NoError(t, c.Cleanup(ctx, job))
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name, outcome, want string
		class               plugin.ErrorClass
	}{
		{"failed", "failed", "executor lost: boom", plugin.Permanent},
		// No driver ran: the job's max_retry may submit it again.
		{"submission failed", "submission_failed", "spark-submit: no such image", plugin.Retriable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := connect(t)
			job := newJob(t, map[string]string{kubetest.SimOutcome: tc.outcome, kubetest.SimMessage: tc.want, kubetest.SimRun: "50ms"}, nil)
			_, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.Equal(t, tc.class, plugin.ClassOf(err))
		})
	}
}

func TestTimeoutDeletesTheApplication(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "hang"}, map[string]any{"timeout": "1s"})
	_, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
	require.ErrorContains(t, err, "timed out")
	requireGone(t, ctx, "spark-sql-job-"+job.ID)
}

func TestCancelLeavesCleanupToTheAgent(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "hang"}, nil)
	name := "spark-sql-job-" + job.ID
	runCtx, cancel := context.WithCancel(ctx)
	rt := plugintest.NewRuntime(nil)
	errc := make(chan error, 1)
	go func() { _, err := c.Execute(runCtx, job, rt); errc <- err }()
	require.Eventually(t, func() bool {
		app, err := getApp(ctx, name)
		if err != nil {
			return false
		}
		state, _, _ := unstructured.NestedString(app.Object, "status", "applicationState", "state")
		return state == "RUNNING"
	}, 20*time.Second, 50*time.Millisecond)
	cancel()
	require.Error(t, <-errc)
	// A cancelled call leaves the application (a handoff must). The agent's
	// Cleanup, after it records the job canceled, deletes it.
	_, err := getApp(ctx, name)
	require.NoError(t, err)
	require.NoError(t, c.Cleanup(ctx, job))
	requireGone(t, ctx, name)
}

func TestTransientAPIErrorsDoNotFailTheJob(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimRun: "1s"}, nil)
	name := "spark-sql-job-" + job.ID
	before := proxy.Injected()
	proxy.Inject(kubetest.Fault{Method: http.MethodPost, Contains: "/sparkapplications", Status: http.StatusServiceUnavailable, Count: 2})
	proxy.Inject(kubetest.Fault{Method: http.MethodGet, Contains: "/sparkapplications/" + name, Status: http.StatusInternalServerError, Count: 3})
	proxy.Inject(kubetest.Fault{Method: http.MethodGet, Contains: "watch=true", Status: http.StatusTooManyRequests, Count: 2})
	proxy.Inject(kubetest.Fault{Method: http.MethodPost, Contains: "/configmaps", Status: http.StatusGatewayTimeout, Count: 1})
	res, _ := executeOK(t, ctx, c, job)
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Equal(t, 8, proxy.Injected()-before, "every injected fault was hit")
	require.Equal(t, 1, sim.Created("default", name), "one application, despite the failed creates")
}

// An agent lost mid-run. The call ends without an outcome. A new plugin
// process resumes from the checkpointed handle and follows the same
// application to the end.
func TestResumeAttachesToTheSameApplication(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, map[string]string{kubetest.SimRun: "2s"}, nil)
	name := "spark-sql-job-" + job.ID
	rt := executeUntilSubmitted(t, ctx, job)

	rt2 := plugintest.NewRuntime(rt.Handle())
	res, err := connect(t).Resume(ctx, job, rt2)
	require.NoError(t, err, "stderr: %s", rt2.StderrString())
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Equal(t, 1, sim.Created("default", name))
}

func TestResumeAfterTheApplicationWasDeletedIsOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "hang"}, nil)
	name := "spark-sql-job-" + job.ID
	rt := executeUntilSubmitted(t, ctx, job)

	// Someone deletes it by hand while no agent watches.
	fg := metav1.DeletePropagationForeground
	require.NoError(t, kube.Dynamic.Resource(kubetest.SparkApplications).Namespace("default").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}))
	requireGone(t, ctx, name)

	creates := proxy.Creates(appsPath)
	_, err := connect(t).Resume(ctx, job, plugintest.NewRuntime(rt.Handle()))
	requireClass(t, err, plugin.OutcomeUnknown)
	require.Contains(t, err.Error(), "not resubmitting")
	require.Equal(t, creates, proxy.Creates(appsPath), "never resubmitted")
	_, err = getApp(ctx, name)
	require.True(t, apierrors.IsNotFound(err))
}

// A job resumed before anything was submitted (no handle) submits it once.
func TestResumeWithoutAHandleSubmits(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, nil, nil)
	res, err := connect(t).Resume(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Equal(t, 1, sim.Created("default", "spark-sql-job-"+job.ID))
}

// A retry (attempt 2) of a job whose attempt-1 application is still there
// replaces it. The old one is deleted (foreground) and a new one created
// under the same name.
func TestLaterAttemptReplacesTheApplication(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "failed", kubetest.SimMessage: "first try", kubetest.SimRun: "50ms"}, nil)
	name := "spark-sql-job-" + job.ID
	_, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
	require.ErrorContains(t, err, "first try")
	first, err := getApp(ctx, name)
	require.NoError(t, err)

	job.Attempt = 2
	job.Context = newJob(t, nil, nil).Context // this time it succeeds
	res, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	second, err := getApp(ctx, name)
	require.NoError(t, err)
	require.NotEqual(t, first.GetUID(), second.GetUID())
	require.Contains(t, string(res.Output), string(second.GetUID()))
	require.Equal(t, "2", second.GetLabels()["tether.dev/job-attempt"])
	require.Equal(t, 2, sim.Created("default", name))
}

// connectAWS starts the plugin binary with the AWS_* variables an agent's
// pass_env would give it.
func connectAWS(t *testing.T) plugintest.Client {
	t.Helper()
	return plugintest.StartBinary(t, binPath, []string{
		"HOME=" + t.TempDir(),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		// The config's region wins over the environment's.
		"AWS_REGION=eu-west-1",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	})
}

// EKS access by cluster name and region alone. The plugin describes the
// cluster through the emulator's EKS API, which points at the proxy, and
// sends an EKS bearer token. The proxy authenticates to the apiserver
// itself, so the token is not checked by the apiserver (nothing here runs
// STS). What the test checks is the token the plugin made.
func TestEKSAccessByClusterName(t *testing.T) {
	ctx := testCtx(t)
	em := emulator.New(emulator.Options{})
	awsURL, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, em.Close()) })
	em.PutEKSCluster("analytics", proxy.URL(), base64.StdEncoding.EncodeToString(proxy.CAData()))

	c := connectAWS(t)
	cfg, err := json.Marshal(map[string]any{
		"eks_cluster": "analytics", "region": "us-east-1", "aws_endpoint": awsURL, "poll_interval": "100ms",
	})
	require.NoError(t, err)
	require.NoError(t, c.HealthCheck(ctx, cfg))

	job := newJob(t, map[string]string{kubetest.SimRun: "200ms"}, nil)
	job.Config = cfg
	name := "spark-sql-job-" + job.ID
	rt := plugintest.NewRuntime(nil)
	res, err := c.Execute(ctx, job, rt)
	require.NoError(t, err, "stderr: %s", rt.StderrString())
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Equal(t, 1, sim.Created("default", name))

	// A cluster that does not exist fails at once, permanently, naming it.
	missing, _ := json.Marshal(map[string]any{"eks_cluster": "nope", "region": "us-east-1", "aws_endpoint": awsURL})
	job2 := newJob(t, nil, nil)
	job2.Config = missing
	_, err = c.Execute(ctx, job2, plugintest.NewRuntime(nil))
	require.ErrorContains(t, err, `EKS cluster "nope" not found in region us-east-1`)
	require.Equal(t, plugin.Permanent, plugin.ClassOf(err))

	var eksTokens int
	for _, tok := range proxy.BearerTokens() {
		enc, ok := strings.CutPrefix(tok, "k8s-aws-v1.")
		if !ok {
			continue
		}
		eksTokens++
		raw, err := base64.RawURLEncoding.DecodeString(enc)
		require.NoError(t, err)
		u, err := url.Parse(string(raw))
		require.NoError(t, err)
		require.Equal(t, awsURL, u.Scheme+"://"+u.Host, "presigned against aws_endpoint")
		q := u.Query()
		require.Equal(t, "GetCallerIdentity", q.Get("Action"))
		require.Equal(t, "60", q.Get("X-Amz-Expires"))
		require.True(t, strings.HasPrefix(q.Get("X-Amz-Credential"), "test/"), q.Get("X-Amz-Credential"))
		require.True(t, strings.HasSuffix(q.Get("X-Amz-Credential"), "/us-east-1/sts/aws4_request"), q.Get("X-Amz-Credential"))
		require.Contains(t, strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), "x-k8s-aws-id")
		require.NotEmpty(t, q.Get("X-Amz-Signature"))
	}
	require.Equal(t, 1, eksTokens, "one token, cached, for every request of the plugin process")
}

// A retry (attempt 2) of a job whose attempt-1 application is still running
// adopts it. The query is not run a second time.
func TestRetryAdoptsTheRunningApplication(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, map[string]string{kubetest.SimRun: "2s"}, nil)
	name := "spark-sql-job-" + job.ID
	executeUntilSubmitted(t, ctx, job) // attempt 1 lost its agent; the host retries it
	first, err := getApp(ctx, name)
	require.NoError(t, err)

	job.Attempt = 2
	res, rt := executeOK(t, ctx, connect(t), job)
	require.Contains(t, string(res.Output), string(first.GetUID()))
	require.Contains(t, rt.StderrString(), "adopting it as attempt 2's")
	require.Equal(t, 1, sim.Created("default", name), "never submitted again")
	requireAdopted(t, rt)
}

// A retry whose attempt-1 application completed succeeds at once with it.
func TestRetryAdoptsACompletedApplication(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimRun: "50ms"}, nil)
	name := "spark-sql-job-" + job.ID
	_, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	job.Attempt = 2
	creates := proxy.Creates(appsPath)
	res, err := c.Execute(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	require.Contains(t, string(res.Output), `"COMPLETED"`)
	require.Equal(t, creates, proxy.Creates(appsPath))
	require.Equal(t, 1, sim.Created("default", name))
}

func TestSubmittedSpecIsNeverRerunByTheOperator(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, map[string]string{kubetest.SimRun: "50ms"}, map[string]any{"time_to_live": "2h"})
	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	require.NoError(t, err)
	app, err := getApp(ctx, "spark-sql-job-"+job.ID)
	require.NoError(t, err)
	typ, _, _ := unstructured.NestedString(app.Object, "spec", "restartPolicy", "type")
	require.Equal(t, "Never", typ, "kept by the real CRD's schema")
	ttl, _, _ := unstructured.NestedInt64(app.Object, "spec", "timeToLiveSeconds")
	require.EqualValues(t, 7200, ttl)
	mode, _, _ := unstructured.NestedString(app.Object, "spec", "mode")
	require.Equal(t, "cluster", mode)
}

// The operator fails an application whose driver pod vanished with "driver
// pod not found": the query may have finished, so the outcome is unknown.
func TestDriverPodNotFoundIsOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "driver_lost", kubetest.SimRun: "200ms"}, nil)
	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.OutcomeUnknown)
	require.Contains(t, err.Error(), "driver pod not found")
}

func TestStartupTimeoutNamesTheImagePull(t *testing.T) {
	ctx := testCtx(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "image_pull", kubetest.SimMessage: "spark:nope"}, map[string]any{"startup_timeout": "2s"})
	_, err := connect(t).Execute(ctx, job, plugintest.NewRuntime(nil))
	requireClass(t, err, plugin.Permanent)
	require.Contains(t, err.Error(), "startup_timeout 2s")
	require.Contains(t, err.Error(), "ImagePullBackOff")
	require.Contains(t, err.Error(), `Back-off pulling image "spark:nope"`)
	requireGone(t, ctx, "spark-sql-job-"+job.ID)
}

// refusingProxy sits in front of the kubetest proxy and answers requests
// whose URI contains match with 401 / 403 (alternately, with the reasons
// the API server gives them) until the refusal window ends: a window in
// time, where the kubetest proxy's faults count requests.
type refusingProxy struct {
	kubeconfig string
	mu         sync.Mutex
	until      time.Time
	refused    int
	srv        *httptest.Server
}

func startRefusingProxy(t *testing.T, match string) *refusingProxy {
	t.Helper()
	return startRefusingProxyTo(t, proxy, match)
}

// startRefusingProxyTo is startRefusingProxy in front of upstream.
func startRefusingProxyTo(t *testing.T, upstream *kubetest.Proxy, match string) *refusingProxy {
	t.Helper()
	target, err := url.Parse(upstream.URL())
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(upstream.CAData()))
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		FlushInterval: -1,
	}
	p := &refusingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		refuse := strings.Contains(r.URL.RequestURI(), match) && time.Now().Before(p.until)
		if refuse {
			p.refused++
		}
		n := p.refused
		p.mu.Unlock()
		if refuse {
			code, reason := http.StatusUnauthorized, "Unauthorized"
			if n%2 == 0 {
				code, reason = http.StatusForbidden, "Forbidden"
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused by the test","reason":%q,"code":%d}`, reason, code)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.srv = srv
	p.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(p.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL)), 0o600))
	return p
}

// refuseFor refuses matching requests for d, and cuts the connections
// open now (the informer's watch) so the plugin has to ask again.
func (p *refusingProxy) refuseFor(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	p.mu.Unlock()
	p.srv.CloseClientConnections()
}

func (p *refusingProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func TestAuthRefusals(t *testing.T) {
	t.Run("within auth_grace the job goes on", func(t *testing.T) {
		ctx := testCtx(t)
		job := newJob(t, map[string]string{kubetest.SimRun: "300ms"}, map[string]any{"auth_grace": "1m"})
		rp := startRefusingProxy(t, "/sparkapplications") // the informer's list and watch, and any get
		job.Config = pluginConfig(t, rp.kubeconfig)
		rt, errc := executeSubmitted(t, ctx, job)
		// Every get and watch of the application refused for 4 s, while it
		// completes. Formerly five refused gets (~1.5 s) ended the job.
		rp.refuseFor(4 * time.Second)
		require.NoError(t, <-errc, "stderr: %s", rt.StderrString())
		require.Greater(t, rp.count(), 5)
		require.Contains(t, rt.StderrString(), "retrying for up to auth_grace 1m0s")
	})
	t.Run("past auth_grace the outcome is unknown and the app runs on", func(t *testing.T) {
		ctx := testCtx(t)
		job := newJob(t, map[string]string{kubetest.SimOutcome: "hang"}, map[string]any{"auth_grace": "1s"})
		name := "spark-sql-job-" + job.ID
		rp := startRefusingProxy(t, "/sparkapplications") // the informer's list and watch, and any get
		job.Config = pluginConfig(t, rp.kubeconfig)
		rt, errc := executeSubmitted(t, ctx, job)
		rp.refuseFor(time.Hour)
		err := <-errc
		requireClass(t, err, plugin.OutcomeUnknown)
		require.Contains(t, err.Error(), "keeps running")
		_, err = getApp(ctx, name)
		require.NoError(t, err, "not deleted: the host's Cleanup does that")

		// A Resume whose first read is refused past auth_grace: unknown, not
		// permanent, and decided blind (Cleanup looks before deleting).
		rtResume := plugintest.NewRuntime(stripOutcome(t, rt.Handle()))
		_, err = connect(t).Resume(ctx, job, rtResume)
		requireClass(t, err, plugin.OutcomeUnknown)
		var h map[string]any
		require.NoError(t, json.Unmarshal(rtResume.Handle(), &h))
		require.Equal(t, "outcome_unknown", h["outcome"])
		require.Equal(t, true, h["blind"], "decided blind")

		// The host's Cleanup with the attempt's handle, whose outcome was
		// decided blind, looks first: the application still runs (and may
		// complete) within its timeout, so it is not deleted yet.
		job.Config, _ = json.Marshal(map[string]any{"kubeconfig": proxy.Kubeconfig})
		job.Handle = rt.Handle()
		err = connect(t).Cleanup(ctx, job)
		requireClass(t, err, plugin.Retriable)
		require.Contains(t, err.Error(), "is RUNNING and may still complete")
		_, err = getApp(ctx, name)
		require.NoError(t, err, "not deleted while it may complete")
		// A Cleanup whose handle was not decided blind (a cancel) deletes it.
		job.Handle = stripOutcome(t, rt.Handle())
		require.NoError(t, connect(t).Cleanup(ctx, job))
		requireGone(t, ctx, name)
	})
}

// stripOutcome is a handle as checkpointed before its outcome was known.
func stripOutcome(t *testing.T, b []byte) []byte {
	t.Helper()
	var h map[string]any
	require.NoError(t, json.Unmarshal(b, &h))
	delete(h, "outcome")
	delete(h, "message")
	delete(h, "blind")
	out, err := json.Marshal(h)
	require.NoError(t, err)
	return out
}

// Cleanup deletes only the application of the attempt it cleans up: by the
// handle's UID, or (no handle) by the attempt label. It never deletes a
// later attempt's.
func TestCleanupIsFencedByUIDAndAttempt(t *testing.T) {
	ctx := testCtx(t)
	c := connect(t)
	job := newJob(t, map[string]string{kubetest.SimOutcome: "failed", kubetest.SimMessage: "first try", kubetest.SimRun: "50ms"}, nil)
	name := "spark-sql-job-" + job.ID
	rt1 := plugintest.NewRuntime(nil)
	_, err := c.Execute(ctx, job, rt1)
	require.ErrorContains(t, err, "first try")

	// Attempt 2 replaces the failed application and runs.
	job2 := *job
	job2.Attempt = 2
	job2.Context = newJob(t, map[string]string{kubetest.SimOutcome: "hang"}, nil).Context
	rt2 := executeUntilSubmitted(t, ctx, &job2)
	second, err := getApp(ctx, name)
	require.NoError(t, err)
	require.Equal(t, "2", second.GetLabels()["tether.dev/job-attempt"])

	// A late Cleanup of attempt 1, with its handle, and without one.
	job.Handle = rt1.Handle()
	require.NoError(t, c.Cleanup(ctx, job))
	job.Handle = nil
	require.NoError(t, c.Cleanup(ctx, job))
	app, err := getApp(ctx, name)
	require.NoError(t, err, "attempt 2's application is not attempt 1's to delete")
	require.Equal(t, second.GetUID(), app.GetUID())
	_, err = kube.Clientset.CoreV1().ConfigMaps("default").Get(ctx, name+"-query", metav1.GetOptions{})
	require.NoError(t, err, "nor its ConfigMap")

	// Attempt 2's Cleanup deletes it.
	job2.Handle = rt2.Handle()
	require.NoError(t, c.Cleanup(ctx, &job2))
	requireGone(t, ctx, name)
}
