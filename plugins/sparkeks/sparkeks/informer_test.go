package sparkeks

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherjobs/tether/internal/kubetest"
)

// The informer tests run against a real kube-apiserver (internal/kubetest),
// reached through its Proxy (fault injection) by clients whose transport
// counts requests.

const informerWait = 20 * time.Second

type informerKube struct {
	env   *kubetest.Env
	proxy *kubetest.Proxy
}

func startInformerKube(t *testing.T) *informerKube {
	t.Helper()
	_, _, err := kubetest.Binaries()
	require.NoError(t, err, "the informer tests need the control plane (make kube-apiserver; apt-get install etcd-server)")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := kubetest.Start(ctx, dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, env.Stop()) })
	proxy, err := kubetest.StartProxy(env, dir)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	return &informerKube{env: env, proxy: proxy}
}

// namespace creates a namespace of its own for a test.
func (k *informerKube) namespace(t *testing.T) string {
	t.Helper()
	ns := "informer-" + uuid.NewString()[:8]
	_, err := k.env.Clientset.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns
}

// clients reach the apiserver through the proxy, counted by rc.
func (k *informerKube) clients(t *testing.T, rc *requestCounter) *clients {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", k.proxy.Kubeconfig)
	require.NoError(t, err)
	return newTestClients(t, cfg, rc)
}

func newTestClients(t *testing.T, cfg *rest.Config, rc *requestCounter) *clients {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	if rc != nil {
		cfg.WrapTransport = rc.wrap
	}
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return &clients{dyn: dyn, kube: kube, host: cfg.Host}
}

// requestCounter counts requests by verb and path: GET (a LIST on a
// collection's path), WATCH (a GET with watch=true) and WATCHLIST (a watch
// with sendInitialEvents=true: client-go's WatchListClient streaming the
// initial list).
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		verb := r.Method
		q := r.URL.Query()
		if w := q.Get("watch"); w == "true" || w == "1" {
			verb = "WATCH"
			if q.Get("sendInitialEvents") == "true" {
				verb = "WATCHLIST"
			}
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[verb+" "+r.URL.Path]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *requestCounter) count(verb, path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[verb+" "+path]
}

// informer is an informer's requests on a collection path. [watch-list,
// LIST, WATCH]. client-go (WatchListClient) first asks for the initial list
// as a watch stream. Where the apiserver cannot stream it (here: this etcd
// lacks the RequestWatchProgress storage feature, so the stream ends with
// an error at once) it falls back to a LIST and then a WATCH: [1 0 0] or
// [1 1 1] once the informer has started.
func (c *requestCounter) informer(path string) [3]int {
	return [3]int{c.count("WATCHLIST", path), c.count("GET", path), c.count("WATCH", path)}
}

// waitStarted waits until s's informers have made their first requests.
// synced (and the subscribers woken for it), and the WATCH that follows a
// LIST opened.
func waitStarted(t *testing.T, rc *requestCounter, s *appSubscription, ns string) {
	t.Helper()
	select {
	case <-s.w.synced:
	case <-time.After(informerWait):
		t.Fatal("the informers did not sync")
	}
	require.Eventually(t, func() bool {
		sy := synced(s)
		for _, p := range []string{appsPathOf(ns), podsPathOf(ns)} {
			if r := rc.informer(p); !(sy && r == [3]int{1, 0, 0}) && r != [3]int{1, 1, 1} {
				return false
			}
		}
		return true
	}, informerWait, 5*time.Millisecond, "informers started: %s", rc)
}

func (c *requestCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func appsPathOf(ns string) string {
	return "/apis/" + APIVersion + "/namespaces/" + ns + "/" + Resource
}
func podsPathOf(ns string) string { return "/api/v1/namespaces/" + ns + "/pods" }

// testSparkApp is a valid SparkApplication (for spark-operator's CRD
// schema) labelled as tether's.
func testSparkApp(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion,
		"kind":       Kind,
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{labelManagedBy: managedByTether},
		},
		"spec": map[string]any{
			"type":                "Python",
			"mode":                "cluster",
			"sparkVersion":        "3.5.3",
			"image":               "spark:3.5.3",
			"mainApplicationFile": "local:///opt/tether/run_sql.py",
			"restartPolicy":       map[string]any{"type": "Never"},
			"driver":              map[string]any{"cores": int64(1), "memory": "512m"},
			"executor":            map[string]any{"cores": int64(1), "instances": int64(1), "memory": "512m"},
		},
	}}
}

func (k *informerKube) createApp(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	app, err := k.env.Dynamic.Resource(GVR).Namespace(ns).Create(context.Background(), testSparkApp(ns, name), metav1.CreateOptions{})
	require.NoError(t, err)
	return app
}

// setAppState sets the application's state (status subresource), as
// spark-operator does.
func (k *informerKube) setAppState(t *testing.T, ns, name, state, driverPod string) {
	t.Helper()
	apps := k.env.Dynamic.Resource(GVR).Namespace(ns)
	app, err := apps.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	app.Object["status"] = map[string]any{
		"applicationState": map[string]any{"state": state},
		"driverInfo":       map[string]any{"podName": driverPod},
	}
	_, err = apps.UpdateStatus(context.Background(), app, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// createDriverPod creates app's driver pod with the labels spark-operator
// gives it (the application's, spark-role, app-name).
func (k *informerKube) createDriverPod(t *testing.T, ns string, app *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	ctrl := true
	pod, err := k.env.Clientset.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: app.GetName() + "-driver", Namespace: ns,
			Labels: map[string]string{
				labelManagedBy: managedByTether, labelSparkRole: sparkRoleDriver, labelOperatorAppName: app.GetName(),
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: APIVersion, Kind: Kind, Name: app.GetName(), UID: app.GetUID(), Controller: &ctrl}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: driverContainer, Image: "spark:3.5.3"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return pod
}

// waitUntil waits, wake-up by wake-up, until cond holds.
func waitUntil(t *testing.T, s *appSubscription, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(informerWait)
	for !cond() {
		select {
		case <-s.wake():
		case <-deadline:
			t.Fatalf("%s: still not the case after %s", what, informerWait)
		}
	}
}

func drain(s *appSubscription) {
	select {
	case <-s.wake():
	default:
	}
}

func woken(s *appSubscription) bool {
	select {
	case <-s.wake():
		return true
	default:
		return false
	}
}

func appState(s *appSubscription) string {
	app, _ := s.app()
	if app == nil {
		return ""
	}
	st, _, _ := unstructured.NestedString(app.Object, "status", "applicationState", "state")
	return st
}

func synced(s *appSubscription) bool {
	_, apps := s.app()
	_, pods := s.driverPod()
	return apps && pods
}

func TestInformer(t *testing.T) {
	k := startInformerKube(t)

	t.Run("ManySubscribersShareOneListAndWatch", func(t *testing.T) {
		const n = 200
		ns := k.namespace(t)
		var rc requestCounter
		cl := k.clients(t, &rc)
		ws := &appWatchers{}
		t.Cleanup(ws.stopAll)

		apps := make([]*unstructured.Unstructured, n)
		for i := range apps {
			apps[i] = k.createApp(t, ns, AppName(uuid.NewString()))
		}
		subs := make([]*appSubscription, n)
		for i, app := range apps {
			subs[i] = ws.subscribe(cl, ns, app.GetName(), time.Hour)
			t.Cleanup(subs[i].close)
		}
		for _, s := range subs {
			waitUntil(t, s, "the application is cached", func() bool {
				app, ok := s.app()
				return ok && app != nil
			})
		}
		require.Len(t, ws.m, 1, "one watcher per (clients, namespace)")

		// One set of requests per informer, whatever the number of jobs.
		waitStarted(t, &rc, subs[0], ns)
		appReqs, podReqs := rc.informer(appsPathOf(ns)), rc.informer(podsPathOf(ns))
		t.Logf("after %d subscriptions: [watch-list, LIST, WATCH] requests: SparkApplications %v, pods %v (all: %s)", n, appReqs, podReqs, &rc)

		// An update of one application wakes its subscriber, not the others.
		one, other := subs[7], subs[8]
		for _, s := range subs {
			drain(s)
		}
		k.setAppState(t, ns, one.name, "RUNNING", one.name+"-driver")
		waitUntil(t, one, "the subscriber sees RUNNING", func() bool { return appState(one) == "RUNNING" })
		require.False(t, woken(other), "another application's subscriber was woken")
		require.Empty(t, appState(other))

		// So does a change of its driver pod.
		waitUntil(t, one, "the pod informer synced", func() bool { _, ok := one.driverPod(); return ok })
		drain(one)
		drain(other)
		pod := k.createDriverPod(t, ns, apps[7])
		waitUntil(t, one, "the subscriber sees its driver pod", func() bool {
			p, _ := one.driverPod()
			return p != nil && p.Name == pod.Name
		})
		require.False(t, woken(other))
		p, _ := other.driverPod()
		require.Nil(t, p, "another application's driver pod")

		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: driverContainer, Image: "spark:3.5.3",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
		}}
		_, err := k.env.Clientset.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
		require.NoError(t, err)
		waitUntil(t, one, "the subscriber sees ImagePullBackOff", func() bool {
			p, _ := one.driverPod()
			return p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "ImagePullBackOff"
		})
		require.False(t, woken(other))

		// A copy. Changing it changes nothing in the cache.
		app, _ := one.app()
		state := statusOf(app).State
		require.NoError(t, unstructured.SetNestedField(app.Object, "CHANGED", "status", "applicationState", "state"))
		app, _ = one.app()
		require.Equal(t, state, statusOf(app).State)

		require.Equal(t, appReqs, rc.informer(appsPathOf(ns)), "no new SparkApplications request")
		require.Equal(t, podReqs, rc.informer(podsPathOf(ns)), "no new pods request")
		for _, app := range apps {
			require.Zero(t, rc.count("GET", appsPathOf(ns)+"/"+app.GetName()), "no GET per job")
		}
	})

	t.Run("CreateAndDelete", func(t *testing.T) {
		ns := k.namespace(t)
		cl := k.clients(t, nil)
		ws := &appWatchers{}
		t.Cleanup(ws.stopAll)
		ctx := context.Background()

		// Subscribed before the application exists.
		name := AppName(uuid.NewString())
		s := ws.subscribe(cl, ns, name, time.Hour)
		defer s.close()
		waitUntil(t, s, "synced", func() bool { return synced(s) })
		app, _ := s.app()
		require.Nil(t, app)
		gone, _, err := s.confirmGone(ctx)
		require.NoError(t, err)
		require.True(t, gone)

		created := k.createApp(t, ns, name)
		// The cache may not have it yet. The GET does.
		gone, got, err := s.confirmGone(ctx)
		require.NoError(t, err)
		require.False(t, gone)
		require.Equal(t, created.GetUID(), got.GetUID())
		waitUntil(t, s, "the new application is cached", func() bool { app, _ := s.app(); return app != nil })
		app, _ = s.app()
		require.Equal(t, created.GetUID(), app.GetUID())

		// Subscribed right after the create, on the running watcher.
		name2 := AppName(uuid.NewString())
		created2 := k.createApp(t, ns, name2)
		s2 := ws.subscribe(cl, ns, name2, time.Hour)
		defer s2.close()
		waitUntil(t, s2, "the application is cached", func() bool { app, _ := s2.app(); return app != nil })
		gone, _, err = s2.confirmGone(ctx)
		require.NoError(t, err)
		require.False(t, gone)
		app, _ = s2.app()
		require.Equal(t, created2.GetUID(), app.GetUID())

		// Deleted. The cache lets go of it and the GET confirms.
		require.NoError(t, k.env.Dynamic.Resource(GVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}))
		waitUntil(t, s, "the deleted application leaves the cache", func() bool { app, _ := s.app(); return app == nil })
		gone, _, err = s.confirmGone(ctx)
		require.NoError(t, err)
		require.True(t, gone)
		app, _ = s2.app()
		require.NotNil(t, app, "the other application stays")
	})

	t.Run("StopsAfterLinger", func(t *testing.T) {
		ns := k.namespace(t)
		var rc requestCounter
		cl := k.clients(t, &rc)
		const linger = 300 * time.Millisecond
		ws := &appWatchers{linger: linger}
		t.Cleanup(ws.stopAll)
		name := AppName(uuid.NewString())
		k.createApp(t, ns, name)
		requests := func() int {
			n := 0
			for _, v := range []string{"WATCHLIST", "GET", "WATCH"} {
				n += rc.count(v, appsPathOf(ns)) + rc.count(v, podsPathOf(ns))
			}
			return n
		}

		s1 := ws.subscribe(cl, ns, name, time.Hour)
		waitStarted(t, &rc, s1, ns)
		w1, before := s1.w, requests()

		// A job leaving and another coming within the linger keeps it.
		s1.close()
		s1.close() // harmless
		s2 := ws.subscribe(cl, ns, name, time.Hour)
		require.Same(t, w1, s2.w)
		waitUntil(t, s2, "cached", func() bool { app, _ := s2.app(); return app != nil })
		require.Never(t, func() bool {
			select {
			case <-w1.done:
				return true
			default:
				return false
			}
		}, 3*linger, 10*time.Millisecond, "stopped while subscribed to")
		require.Equal(t, before, requests(), "no new list or watch")

		// The last one leaving stops it after the linger.
		s2.close()
		select {
		case <-w1.done:
		case <-time.After(informerWait):
			t.Fatal("the watcher did not stop after its linger")
		}
		ws.mu.Lock()
		require.Empty(t, ws.m)
		ws.mu.Unlock()
		// Its informers' goroutines have ended (Shutdown waited). No
		// request comes from it any more.
		stopped := requests()

		// The next subscriber starts a new one.
		s3 := ws.subscribe(cl, ns, name, time.Hour)
		defer s3.close()
		require.NotSame(t, w1, s3.w)
		waitUntil(t, s3, "cached", func() bool { app, _ := s3.app(); return app != nil })
		require.Equal(t, before, stopped, "requests while stopped")
		require.Eventually(t, func() bool { return requests() == 2*before }, informerWait, 5*time.Millisecond,
			"a new watcher lists and watches again: %s", &rc)
	})

	t.Run("PeriodicWakeUps", func(t *testing.T) {
		ns := k.namespace(t)
		ws := &appWatchers{}
		t.Cleanup(ws.stopAll)
		s := ws.subscribe(k.clients(t, nil), ns, AppName(uuid.NewString()), 20*time.Millisecond)
		defer s.close()
		for range 5 { // the first is right after subscribe
			select {
			case <-s.wake():
			case <-time.After(informerWait):
				t.Fatal("no periodic wake-up")
			}
		}
	})

	t.Run("RefusedByProxy", func(t *testing.T) {
		ns := k.namespace(t)
		ws := &appWatchers{}
		t.Cleanup(ws.stopAll)
		name := AppName(uuid.NewString())
		k.createApp(t, ns, name)
		// The proxy answers the application informer's first requests
		// (watch-list, list, ...) 403. The pods' pass.
		k.proxy.Inject(kubetest.Fault{Method: http.MethodGet, Contains: "/namespaces/" + ns + "/" + Resource, Status: http.StatusForbidden, Count: 4})
		began := time.Now()
		s := ws.subscribe(k.clients(t, nil), ns, name, time.Hour)
		defer s.close()

		waitUntil(t, s, "health reports the refusal", func() bool { h, _ := s.health(); return h.Err != nil })
		h, pods := s.health()
		t.Logf("health while refused: %+v", h)
		require.True(t, h.refused(), "%v", h.Err)
		require.False(t, h.ErrSince.Before(began))
		require.True(t, h.LastOK.IsZero())
		require.GreaterOrEqual(t, h.failingFor(time.Now()), time.Duration(0))
		app, appsSynced := s.app()
		require.Nil(t, app)
		require.False(t, appsSynced, "not synced while refused")
		require.NoError(t, pods.Err)

		// The faults used up, it recovers by itself.
		waitUntil(t, s, "it recovers", func() bool {
			h, _ := s.health()
			app, _ := s.app()
			return h.Err == nil && app != nil
		})
		h2, _ := s.health()
		require.True(t, h2.ErrSince.IsZero())
		require.True(t, h2.LastOK.After(h.ErrSince))
		require.Zero(t, h2.failingFor(time.Now()))
	})

	t.Run("RefusedByAPIServer", func(t *testing.T) {
		ns := k.namespace(t)
		ws := &appWatchers{}
		t.Cleanup(ws.stopAll)
		// Credentials the apiserver does not accept: a bad bearer token
		// straight to it.
		bad := rest.AnonymousClientConfig(k.env.Config)
		bad.BearerToken = "not-a-valid-token"
		var rc requestCounter
		cl := newTestClients(t, bad, &rc)
		began := time.Now()
		s := ws.subscribe(cl, ns, AppName(uuid.NewString()), time.Hour)
		defer s.close()

		waitUntil(t, s, "health reports the refusal", func() bool {
			apps, pods := s.health()
			return apps.Err != nil && pods.Err != nil
		})
		apps, pods := s.health()
		t.Logf("health with a bad token: apps %+v; pods %+v", apps, pods)
		for _, h := range []informerHealth{apps, pods} {
			require.True(t, h.refused(), "%v", h.Err)
			require.True(t, apierrors.IsUnauthorized(h.Err) || apierrors.IsForbidden(h.Err), "%v", h.Err)
			require.False(t, h.ErrSince.Before(began))
			require.True(t, h.LastOK.IsZero())
		}
		_, synced := s.app()
		require.False(t, synced)
		// A refused GET is not "gone".
		gone, _, err := s.confirmGone(context.Background())
		require.False(t, gone)
		require.True(t, apiRefused(err), "%v", err)

		// Failures go on (the reflector retries with backoff). The run of
		// failures keeps its start.
		tries := func() int { return rc.count("WATCHLIST", appsPathOf(ns)) + rc.count("GET", appsPathOf(ns)) }
		tried := tries()
		require.Eventually(t, func() bool { return tries() > tried }, informerWait, 10*time.Millisecond)
		require.Eventually(t, func() bool { h, _ := s.health(); return h.Err != nil }, informerWait, 10*time.Millisecond)
		h, _ := s.health()
		require.Equal(t, apps.ErrSince, h.ErrSince)
		require.Greater(t, h.failingFor(time.Now()), time.Duration(0))
	})
}

// The cache keeps no managed fields, and an object without any is not
// written to (the watch may share it with whoever sent it).
func TestStripManagedFields(t *testing.T) {
	with := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
		"name": "a", "managedFields": []any{map[string]any{"manager": "spark-operator"}}}}}
	got, err := stripManagedFields(with)
	require.NoError(t, err)
	assert.Empty(t, got.(*unstructured.Unstructured).GetManagedFields())
	assert.Equal(t, "a", got.(*unstructured.Unstructured).GetName())

	meta := map[string]any{"name": "b"}
	without := &unstructured.Unstructured{Object: map[string]any{"metadata": meta}}
	_, err = stripManagedFields(without)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"name": "b"}, meta, "left as it was")
}
