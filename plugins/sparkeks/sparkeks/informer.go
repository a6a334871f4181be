package sparkeks

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// One shared informer per (cluster access, namespace) instead of a watch
// and a GET every poll interval per job.
//
// An appWatcher holds two namespace-scoped informers, both label-selected on
// app.kubernetes.io/managed-by=tether:
//
//   - SparkApplications, through dynamicinformer's filtered factory;
//   - driver pods (also spark-role=driver), through the typed pod informer:
//     spark-operator copies the application's labels onto its driver pod
//     and adds sparkoperator.k8s.io/app-name, which maps a pod to its job.
//
// Each informer makes, however many jobs subscribe, one watch-list request
// (client-go's WatchListClient, on by default: a WATCH with
// sendInitialEvents=true that streams the initial list and stays open as
// the watch). Where the apiserver cannot stream (its etcd lacks the
// RequestWatchProgress feature, as the tests' does) that request ends at
// once and the reflector falls back to one LIST and one WATCH. The watch is
// re-opened every 5-10 minutes (the reflector's watch timeout) or when it
// breaks, from the last resource version (no new LIST, unless that version
// has expired).
//
// RBAC: list and watch on sparkapplications and on pods in the namespace (a
// namespaced Role is enough. Nothing is cluster-scoped), besides what the
// jobs already need (get, create, delete, pods/log, ...).
//
// A job calls appWatchers.subscribe(clients, namespace, name, every). The
// first subscriber of a (clients, namespace) starts its watcher, the others
// share it, and when the last one leaves the watcher lingers (watchLinger)
// before it stops, so jobs that come in bursts with idle gaps between them
// do not restart it (a restart costs a LIST of every tether application of
// the namespace, finished ones included). An idle watcher costs its two
// open watches, re-opened every 5-10 minutes from their resource version
// (no LIST), and its cache, which holds slim copies (slim.go).
//
// # What the cache says, and what it does not
//
// The informers' cache is eventually consistent. Right after a create the
// application may not be in it yet. Before the first LIST has completed it
// holds nothing at all. After a broken watch it is as old as the last event
// received until the reflector has listed again (then objects deleted
// meanwhile vanish). So:
//
//   - "not in the cache" never by itself means "gone": app() also says
//     whether the informer has synced, and a caller that sees no application
//     must confirm with confirmGone, one direct GET through the same
//     clients, before concluding anything;
//   - what the cache holds is true as of some recent moment, and never goes
//     backwards (resource versions only grow), so states seen in it (RUNNING,
//     COMPLETED, FAILED) can be acted upon as a GET's would be;
//   - whether the cache is current at all is health(): when the API server
//     has been refusing the informer's LIST and WATCH (401/403: an expired
//     token, a revoked role) the cache is frozen and the caller decides,
//     after its own bound, that it has lost track of the job.
//
// # Wake-ups
//
// A subscription's wake() channel (capacity 1, coalesced: a wake-up that
// finds one pending is dropped, so the informer's handlers never block)
// receives when the subscribed application or a driver pod labelled with
// its name is added, updated or deleted, when either informer completes its
// first sync, when the informers' health changes (a failure begins or
// ends), right after subscribe, and at least every `every` (a per
// subscription timer, so jobs with different poll intervals share one
// watcher. The informers themselves run without resync, which would only
// replay the local cache). A wake-up carries no data. On each, read app(),
// driverPod() and health() and act on what they say now.
//
// The UID is not part of the key. A name deleted and created again (a later
// attempt) is the same subscription. Compare the UID with the handle's.

const (
	// watchLinger is how long a watcher nobody subscribes to any more
	// keeps running, in case another job comes.
	watchLinger = time.Hour

	// Labels spark-operator puts on the pods it creates.
	labelSparkRole       = "spark-role"
	sparkRoleDriver      = "driver"
	labelOperatorAppName = "sparkoperator.k8s.io/app-name"

	// indexByApp indexes driver pods by their application's name.
	indexByApp = "tether.dev/by-app"
)

// appWatchers holds the watchers of a plugin process, one per (clients,
// namespace). Its zero value is ready to use (a field of Plugin). It must
// not be copied.
type appWatchers struct {
	// linger overrides watchLinger when set (tests).
	linger time.Duration
	// log, when set, gets a line when a watcher starts, stops, or its
	// informers start or stop failing.
	log *slog.Logger
	// keepWhole caches objects as listed, less their managed fields,
	// instead of their slim copies (slim.go): the memory benchmark's
	// baseline.
	keepWhole bool

	mu sync.Mutex
	m  map[watcherKey]*appWatcher
}

type watcherKey struct {
	cl        *clients
	namespace string
}

// subscribe follows the application name in namespace through the shared
// watcher of cl and namespace, starting it if needed. every (positive) is
// the longest time between two wake-ups (the job's poll interval is the
// natural choice). The subscription must be closed.
func (ws *appWatchers) subscribe(cl *clients, namespace, name string, every time.Duration) *appSubscription {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	key := watcherKey{cl, namespace}
	w, ok := ws.m[key]
	if !ok {
		if ws.m == nil {
			ws.m = map[watcherKey]*appWatcher{}
		}
		w = newAppWatcher(ws, cl, namespace)
		ws.m[key] = w
		ws.logAt(slog.LevelInfo, "sparkeks: watching SparkApplications and driver pods", "host", cl.host, "namespace", namespace)
	}
	w.lingerGen++ // cancels a pending linger
	s := &appSubscription{w: w, name: name, c: make(chan struct{}, 1), every: every}
	w.add(s)
	s.notify() // evaluate at once: the cache may hold the application already
	s.mu.Lock()
	s.timer = time.AfterFunc(every, s.tick)
	s.mu.Unlock()
	return s
}

// release drops s from its watcher and, when it was the last subscriber,
// stops the watcher after the linger.
func (ws *appWatchers) release(s *appSubscription) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := s.w
	if w.remove(s) > 0 || ws.m[w.key] != w {
		return
	}
	w.lingerGen++
	gen := w.lingerGen
	time.AfterFunc(cmp.Or(ws.linger, watchLinger), func() {
		ws.mu.Lock()
		if w.lingerGen != gen || ws.m[w.key] != w {
			ws.mu.Unlock()
			return // subscribed to again meanwhile, or stopped already
		}
		delete(ws.m, w.key)
		ws.mu.Unlock()
		w.stop()
		ws.logAt(slog.LevelInfo, "sparkeks: stopped watching SparkApplications (no job follows one)", "host", w.cl.host, "namespace", w.namespace)
	})
}

// stopAll stops every watcher now and waits until they have stopped (the
// plugin's end; tests). Open subscriptions keep their last cache.
func (ws *appWatchers) stopAll() {
	ws.mu.Lock()
	all := slices.Collect(maps.Values(ws.m))
	clear(ws.m)
	ws.mu.Unlock()
	for _, w := range all {
		w.stop()
	}
}

func (ws *appWatchers) logAt(level slog.Level, msg string, args ...any) {
	if ws.log != nil {
		ws.log.Log(context.Background(), level, msg, args...)
	}
}

// appWatcher is the shared watcher of one (clients, namespace).
type appWatcher struct {
	ws        *appWatchers
	key       watcherKey
	cl        *clients
	namespace string

	appFactory dynamicinformer.DynamicSharedInformerFactory
	podFactory informers.SharedInformerFactory
	apps, pods cache.SharedIndexInformer
	appHealth  *healthTracker
	podHealth  *healthTracker
	cancel     context.CancelFunc
	stopOnce   sync.Once
	done       chan struct{} // closed once the informers have stopped
	// synced is closed once both informers have synced and delivered their
	// initial objects to the handlers, and the subscribers were woken.
	synced chan struct{}

	lingerGen int // guarded by ws.mu

	mu   sync.Mutex
	subs map[string]map[*appSubscription]struct{} // by application name
	n    int
}

func newAppWatcher(ws *appWatchers, cl *clients, namespace string) *appWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &appWatcher{
		ws: ws, key: watcherKey{cl, namespace}, cl: cl, namespace: namespace,
		cancel: cancel, done: make(chan struct{}), synced: make(chan struct{}),
		subs: map[string]map[*appSubscription]struct{}{},
	}
	w.appHealth = &healthTracker{ctx: ctx, onChange: func(h informerHealth) { w.healthChanged("SparkApplications", h) }}
	w.podHealth = &healthTracker{ctx: ctx, onChange: func(h informerHealth) { w.healthChanged("driver pods", h) }}

	managed := labels.Set{labelManagedBy: managedByTether}.String()
	drivers := labels.Set{labelManagedBy: managedByTether, labelSparkRole: sparkRoleDriver}.String()

	// No resync (0). It would only replay the local cache. Subscriptions
	// have their own timer.
	w.appFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(
		observedDynamic{cl.dyn, w.appHealth}, 0, namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = managed })
	w.apps = w.appFactory.ForResource(GVR).Informer()

	w.podFactory = informers.NewSharedInformerFactoryWithOptions(
		observedKube{cl.kube, w.podHealth}, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = drivers }))
	w.pods = w.podFactory.Core().V1().Pods().Informer()

	// All of this must happen before the informers run.
	var unsynced atomic.Int32
	unsynced.Store(2)
	for _, inf := range []struct {
		i cache.SharedIndexInformer
		h *healthTracker
		n func(any) string
		t cache.TransformFunc
	}{{w.apps, w.appHealth, objectName, slimApp}, {w.pods, w.podHealth, podAppName, slimPod}} {
		if ws.keepWhole {
			inf.t = stripManagedFields
		}
		_ = inf.i.SetTransform(inf.t)
		// The reflector reports a failed list-and-watch (never with a nil
		// err): besides the requests' own errors, failures inside a stream
		// (a decoding error, a broken connection).
		_ = inf.i.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			inf.h.request(err)
		})
		reg, err := inf.i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.wake(inf.n(obj)) },
			UpdateFunc: func(_, obj any) { w.wake(inf.n(obj)) },
			DeleteFunc: func(obj any) { w.wake(inf.n(obj)) },
		})
		if err != nil { // only once stopped
			continue
		}
		go func() {
			select {
			case <-reg.HasSyncedChecker().Done():
				w.wakeAll()
				if unsynced.Add(-1) == 0 {
					close(w.synced)
				}
			case <-ctx.Done():
			}
		}()
	}
	_ = w.pods.AddIndexers(cache.Indexers{indexByApp: func(obj any) ([]string, error) {
		if n := podAppName(obj); n != "" {
			return []string{n}, nil
		}
		return nil, nil
	}})

	w.appFactory.Start(ctx.Done())
	w.podFactory.Start(ctx.Done())
	return w
}

// stop ends the informers and waits for them.
func (w *appWatcher) stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.appFactory.Shutdown()
		w.podFactory.Shutdown()
		close(w.done)
	})
	<-w.done
}

func (w *appWatcher) add(s *appSubscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.subs[s.name]
	if m == nil {
		m = map[*appSubscription]struct{}{}
		w.subs[s.name] = m
	}
	m[s] = struct{}{}
	w.n++
}

// remove drops s and says how many subscriptions remain.
func (w *appWatcher) remove(s *appSubscription) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	// s is in its set: close calls this once per subscription.
	m := w.subs[s.name]
	delete(m, s)
	w.n--
	if len(m) == 0 {
		delete(w.subs, s.name)
	}
	return w.n
}

// wake wakes the subscribers of the application name. No one subscribes
// to "" (an object without a name).
func (w *appWatcher) wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs[name] {
		s.notify()
	}
}

func (w *appWatcher) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.subs {
		for s := range m {
			s.notify()
		}
	}
}

func (w *appWatcher) healthChanged(what string, h informerHealth) {
	if h.Err != nil {
		w.ws.logAt(slog.LevelWarn, "sparkeks: the API server refuses to list or watch "+what, "host", w.cl.host, "namespace", w.namespace, "err", h.Err)
	} else {
		w.ws.logAt(slog.LevelInfo, "sparkeks: listing and watching "+what+" again", "host", w.cl.host, "namespace", w.namespace)
	}
	w.wakeAll()
}

// appSubscription is one job's view of its application through the shared
// watcher. Its methods are safe for concurrent use.
type appSubscription struct {
	w     *appWatcher
	name  string
	c     chan struct{}
	every time.Duration

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

// wake receives when there is something to look at (see the file's
// comment). It is never closed.
func (s *appSubscription) wake() <-chan struct{} { return s.c }

func (s *appSubscription) notify() {
	select {
	case s.c <- struct{}{}:
	default: // one is pending: the subscriber will look anyway
	}
}

func (s *appSubscription) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.notify()
	s.timer.Reset(s.every)
}

// close ends the subscription. Its watcher stops after the linger if no
// other remains. Closing twice is harmless.
func (s *appSubscription) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.timer.Stop()
	s.mu.Unlock()
	s.w.ws.release(s)
}

// app is the application as the cache holds it (a deep copy: the caller
// may change it), or nil when the cache does not hold it. synced is false
// until the informer has listed once. Until then nil says nothing at all,
// and after it nil still needs confirmGone.
func (s *appSubscription) app() (app *unstructured.Unstructured, synced bool) {
	synced = s.w.apps.HasSynced()
	return cached[*unstructured.Unstructured](s.w.apps, s.w.namespace+"/"+s.name).DeepCopy(), synced
}

// cached is the object an informer's cache holds under key, or nil. The
// cache is in memory, so GetByKey never fails.
func cached[T any](i cache.SharedIndexInformer, key string) T {
	obj, _, _ := i.GetIndexer().GetByKey(key)
	t, _ := obj.(T)
	return t
}

// driverPod is the application's driver pod as the cache holds it (a deep
// copy), or nil. It is the pod status.driverInfo.podName names when the
// cached application has one, else the newest driver pod labelled with the
// application's name (owned by its UID when the application is cached).
// synced is the pod informer's. A pod that is not cached may still exist.
// The operator may not have created it yet, or the pod informer may be
// failing (see health) or not have caught up.
func (s *appSubscription) driverPod() (pod *corev1.Pod, synced bool) {
	synced = s.w.pods.HasSynced()
	app, _ := s.app()
	pod = s.namedDriverPod(app)
	if pod == nil {
		pod = s.newestDriverPod(app)
	}
	return pod.DeepCopy(), synced
}

// namedDriverPod is the cached pod the application's
// status.driverInfo.podName names. It is nil when the application has none or
// the pod is not cached.
func (s *appSubscription) namedDriverPod(app *unstructured.Unstructured) *corev1.Pod {
	if app == nil {
		return nil
	}
	// No pod is cached under the name "".
	return cached[*corev1.Pod](s.w.pods, s.w.namespace+"/"+statusOf(app).DriverPod)
}

// newestDriverPod is the newest cached driver pod labelled with the
// application's name, and owned by its UID when the application is cached
// (app not nil).
func (s *appSubscription) newestDriverPod(app *unstructured.Unstructured) *corev1.Pod {
	objs, err := s.w.pods.GetIndexer().ByIndex(indexByApp, s.name)
	if err != nil {
		return nil
	}
	var pods []*corev1.Pod
	for _, obj := range objs {
		p, ok := obj.(*corev1.Pod)
		if !ok || (app != nil && len(p.OwnerReferences) > 0 && !ownedBy(p.OwnerReferences, string(app.GetUID()))) {
			continue
		}
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		return nil
	}
	sort.Slice(pods, func(i, j int) bool {
		return pods[j].CreationTimestamp.Before(&pods[i].CreationTimestamp)
	})
	return pods[0]
}

// confirmGone asks the API server, with one GET through the watcher's
// clients, whether the application exists. gone is true only on a 404. An
// application that exists is returned (the cache may not have it yet). Any
// other error is returned as it is (classify it with transient/apiRefused).
func (s *appSubscription) confirmGone(ctx context.Context) (gone bool, app *unstructured.Unstructured, err error) {
	app, err = s.w.cl.dyn.Resource(GVR).Namespace(s.w.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil, nil
	}
	return false, app, err // app is nil with an error
}

// health is how the informers' requests to the API server fare. The
// application's follows from apps. pods only degrade stuck detection (a
// Role without list/watch on pods shows there as refused).
func (s *appSubscription) health() (apps, pods informerHealth) {
	return s.w.appHealth.get(), s.w.podHealth.get()
}

// informerHealth is how one informer's LIST and WATCH requests fare.
type informerHealth struct {
	// LastOK is when a LIST or WATCH request last succeeded (zero: none
	// yet). An open watch that is quiet is healthy. LastOK is when it
	// opened.
	LastOK time.Time
	// Err is the last failure, nil once a later request succeeded.
	Err error
	// ErrSince is when the current run of failures began (zero when Err
	// is nil).
	ErrSince time.Time
}

// refused reports whether the API server refuses the informer's
// credentials or permissions (401, 403). That does not fix itself, unlike
// a broken connection or an overloaded server.
func (h informerHealth) refused() bool { return apiRefused(h.Err) }

// failingFor is how long the informer has been failing at now (0: it is
// not).
func (h informerHealth) failingFor(now time.Time) time.Duration {
	if h.Err == nil {
		return 0
	}
	return now.Sub(h.ErrSince)
}

// healthTracker records an informer's request results: each LIST and WATCH
// request (observed at the client, since the reflector retries some
// failures without telling its error handler) and the reflector's watch
// error handler.
type healthTracker struct {
	ctx      context.Context // the watcher's: failures after its end are not
	onChange func(informerHealth)

	mu sync.Mutex
	h  informerHealth
}

func (t *healthTracker) get() informerHealth {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.h
}

// request records the result of one LIST or WATCH request (or the
// reflector's report of a failed list-and-watch). A watch closed normally
// or a resource version expired (410: the reflector lists again) is no
// failure.
func (t *healthTracker) request(err error) {
	if t.ctx.Err() != nil || isAny(err, noFailures) {
		return
	}
	t.mu.Lock()
	now := time.Now()
	wasFailing := t.h.Err != nil
	if err == nil {
		t.h = informerHealth{LastOK: now}
	} else {
		t.h.Err = err
		t.h.ErrSince = cmp.Or(t.h.ErrSince, now) // zero while not failing
	}
	h := t.h
	t.mu.Unlock()
	if wasFailing != (h.Err != nil) {
		t.onChange(h)
	}
}

// noFailures are the request errors that say nothing of the informer's
// health. None matches nil.
var noFailures = []func(error) bool{
	func(err error) bool { return errors.Is(err, io.EOF) },
	apierrors.IsResourceExpired, apierrors.IsGone,
	func(err error) bool { return errors.Is(err, context.Canceled) },
}

// observedDynamic is a dynamic client whose namespaced List and Watch
// report to a healthTracker.
type observedDynamic struct {
	dynamic.Interface
	t *healthTracker
}

func (d observedDynamic) Resource(r schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return observedNamespaceable{d.Interface.Resource(r), d.t}
}

// IsWatchListSemanticsUnSupported keeps the wrapped client's answer (the
// fake clients have none).
func (d observedDynamic) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(d.Interface)
}

type observedNamespaceable struct {
	dynamic.NamespaceableResourceInterface
	t *healthTracker
}

func (n observedNamespaceable) Namespace(ns string) dynamic.ResourceInterface {
	return observedResource{n.NamespaceableResourceInterface.Namespace(ns), n.t}
}

type observedResource struct {
	dynamic.ResourceInterface
	t *healthTracker
}

func (r observedResource) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	l, err := r.ResourceInterface.List(ctx, o)
	r.t.request(err)
	return l, err
}

func (r observedResource) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := r.ResourceInterface.Watch(ctx, o)
	r.t.request(err)
	return w, err
}

// observedKube is a clientset whose pod List and Watch report to a
// healthTracker.
type observedKube struct {
	kubernetes.Interface
	t *healthTracker
}

func (k observedKube) CoreV1() corev1client.CoreV1Interface {
	return observedCoreV1{k.Interface.CoreV1(), k.t}
}

func (k observedKube) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(k.Interface)
}

type observedCoreV1 struct {
	corev1client.CoreV1Interface
	t *healthTracker
}

func (c observedCoreV1) Pods(ns string) corev1client.PodInterface {
	return observedPods{c.CoreV1Interface.Pods(ns), c.t}
}

type observedPods struct {
	corev1client.PodInterface
	t *healthTracker
}

func (p observedPods) List(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
	l, err := p.PodInterface.List(ctx, o)
	p.t.request(err)
	return l, err
}

func (p observedPods) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := p.PodInterface.Watch(ctx, o)
	p.t.request(err)
	return w, err
}

// objectName is the name of an informer's object, or of a deleted one's.
func objectName(obj any) string {
	m := metaOf(obj)
	if m == nil {
		return ""
	}
	return m.GetName()
}

// metaOf is the metadata of an informer's object, or of a deleted one's,
// nil when it has none.
func metaOf(obj any) metav1.Object {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, _ := meta.Accessor(obj) // nil on error
	return m
}

// podAppName is the application a driver pod belongs to: its
// sparkoperator.k8s.io/app-name label, else its name without the
// operator's "-driver" suffix.
func podAppName(obj any) string {
	m := metaOf(obj)
	if m == nil {
		return ""
	}
	return cmp.Or(m.GetLabels()[labelOperatorAppName], strings.TrimSuffix(m.GetName(), "-driver"))
}

// stripManagedFields drops the managed fields and keeps the rest (the
// memory benchmark's baseline, appWatchers.keepWhole). An object without
// managed fields is left untouched: even removing an absent key writes its
// map, and client-go's fake clients deliver watch objects whose maps their
// tracker still reads.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && len(m.GetManagedFields()) > 0 {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
