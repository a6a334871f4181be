package sparkeks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherjobs/tether/internal/kubetest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// memoryChildEnv holds, in a child process of BenchmarkFinishedApps, what
// it measures (a memoryChildSpec as JSON).
const memoryChildEnv = "TETHER_SPARKEKS_MEMORY_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(memoryChildEnv); spec != "" {
		os.Exit(memoryChild(spec))
	}
	os.Exit(m.Run())
}

// memoryChildSpec is one measurement: a process that starts the plugin's
// watcher of Namespace (caching whole objects or slim copies), waits for
// its initial sync, and reports its memory.
type memoryChildSpec struct {
	Kubeconfig string `json:"kubeconfig"`
	Namespace  string `json:"namespace"`
	KeepWhole  bool   `json:"keep_whole"`
}

// memoryReport is what a child reports, one JSON line on stdout.
type memoryReport struct {
	Apps, Pods   int
	Sync         time.Duration
	HeapBefore   uint64 // live heap before the watcher started (bytes)
	HeapAfter    uint64 // once synced, after a GC
	RSSBefore    uint64
	RSSAfter     uint64
	RSSPeak      uint64 // VmHWM: the most the process ever held
	SyncAllocMiB float64
}

// BenchmarkFinishedApps measures what the plugin's shared watcher costs a
// plugin process when its namespace holds many finished applications and
// their driver pods (they stay until spark-operator's time_to_live deletes
// them): heap and RSS of a process holding the watcher, and how long its
// initial sync takes, with the cache as listed (less managed fields:
// keepWhole) and with the slim copies (slim.go), side by side, each in a
// process of its own.
//
// The objects are copies of one application and its driver pod as the real
// spark-operator v2.5.2 left them (kubetest.StartOperatorStack, one job run
// through the plugin), stored TETHER_BENCH_SPARK_FINISHED times (default
// 2,000) in an apiserver of their own. Run with
// `go test -run '^$' -bench FinishedApps -benchtime 1x ./plugins/sparkeks/sparkeks/`.
func BenchmarkFinishedApps(b *testing.B) {
	n := 2000
	if v := os.Getenv("TETHER_BENCH_SPARK_FINISHED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("TETHER_BENCH_SPARK_FINISHED: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	app, pod := finishedTemplate(b, ctx)
	appJSON, _ := json.Marshal(app.Object)
	podJSON, _ := json.Marshal(pod)

	env, err := kubetest.Start(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	const ns, empty = "finished", "empty"
	for _, name := range []string{ns, empty} {
		if _, err := env.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	storeCopies(b, ctx, env, ns, app, pod, n)
	b.Logf("stored %d applications (%d bytes as listed) and %d driver pods (%d bytes) in %s",
		n, len(appJSON), n, len(podJSON), time.Since(start).Round(time.Millisecond))

	for i := 0; i < b.N; i++ {
		none := measureChild(b, memoryChildSpec{Kubeconfig: env.Kubeconfig, Namespace: empty})
		whole := measureChild(b, memoryChildSpec{Kubeconfig: env.Kubeconfig, Namespace: ns, KeepWhole: true})
		slim := measureChild(b, memoryChildSpec{Kubeconfig: env.Kubeconfig, Namespace: ns})
		b.Logf("%d finished applications and their driver pods, one watcher per process (the first row: an empty namespace, the watcher's own cost):", n)
		b.Logf("%-28s %6s %6s %9s %12s %12s %10s %10s %10s", "cache", "apps", "pods", "sync", "sync alloc", "live heap (+)", "RSS before", "RSS after", "RSS peak")
		for _, r := range []struct {
			name string
			m    memoryReport
		}{{"no applications", none}, {"as listed (keepWhole)", whole}, {"slim copies (slim.go)", slim}} {
			b.Logf("%-28s %6d %6d %9s %9.1f MiB %5.1f MiB (+%5.1f) %6.1f MiB %6.1f MiB %6.1f MiB", r.name, r.m.Apps, r.m.Pods,
				r.m.Sync.Round(time.Millisecond), r.m.SyncAllocMiB, mib(r.m.HeapAfter), mib(r.m.HeapAfter-min(r.m.HeapBefore, r.m.HeapAfter)),
				mib(r.m.RSSBefore), mib(r.m.RSSAfter), mib(r.m.RSSPeak))
		}
		if whole.Apps != n || slim.Apps != n || whole.Pods != n || slim.Pods != n {
			b.Fatalf("the caches hold %d/%d applications and %d/%d pods, want %d of each", whole.Apps, slim.Apps, whole.Pods, slim.Pods, n)
		}
		perPair := func(m memoryReport) float64 {
			return float64(int64(m.HeapAfter-m.HeapBefore)-int64(none.HeapAfter-none.HeapBefore)) / float64(n) / 1024
		}
		b.Logf("live heap per application and driver pod, less the watcher's own: as listed %.1f kB, slim %.1f kB", perPair(whole), perPair(slim))
		b.ReportMetric(mib(whole.HeapAfter), "whole-heap-MiB")
		b.ReportMetric(mib(slim.HeapAfter), "slim-heap-MiB")
		b.ReportMetric(mib(whole.RSSAfter), "whole-RSS-MiB")
		b.ReportMetric(mib(slim.RSSAfter), "slim-RSS-MiB")
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// finishedTemplate runs one job through the plugin against the real
// spark-operator and returns its COMPLETED application and its driver pod
// as the API server holds them.
func finishedTemplate(b *testing.B, ctx context.Context) (*unstructured.Unstructured, *corev1.Pod) {
	b.Helper()
	s, err := kubetest.StartOperatorStack(ctx, b.TempDir(), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			b.Log(err)
		}
	}()
	cfg, _ := json.Marshal(map[string]any{"kubeconfig": s.Env.Kubeconfig, "namespace": "default"})
	jobCtx, _ := json.Marshal(map[string]any{
		"image": "spark:3.5.3", "main_application_file": "local:///opt/tether/run_sql.py", "poll_interval": "100ms",
		"query":      "INSERT INTO sales_daily SELECT day, region, sum(amount) FROM sales WHERE day = current_date() - 1 GROUP BY day, region",
		"spark_conf": map[string]string{kubetest.SimRun: "200ms", kubetest.KubeletLogLines: "3", "spark.sql.adaptive.enabled": "true"},
		"driver":     map[string]any{"cores": 1, "memory": "2g"},
		"executor":   map[string]any{"instances": 4, "cores": 2, "memory": "4g"},
	})
	job := &plugin.Job{ID: uuid.NewString(), Command: "spark-sql", Attempt: 1, Config: cfg, Context: jobCtx}
	p := &Plugin{log: slog.New(slog.DiscardHandler)}
	defer p.watchers.stopAll()
	rt := plugintest.NewRuntime(nil)
	if _, err := p.Execute(ctx, job, rt); err != nil {
		b.Fatalf("the template job: %v\n%s", err, rt.StderrString())
	}
	app, err := s.Env.Dynamic.Resource(GVR).Namespace("default").Get(ctx, AppName(job.ID), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pod, err := s.Env.Clientset.CoreV1().Pods("default").Get(ctx, statusOf(app).DriverPod, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return app, pod
}

// storeCopies stores n copies of app and pod in namespace ns of env, each
// pair under a new job's names, with the template's status.
func storeCopies(b *testing.B, ctx context.Context, env *kubetest.Env, ns string, app *unstructured.Unstructured, pod *corev1.Pod, n int) {
	b.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	rc.QPS, rc.Burst = 2000, 2000
	dyn := dynamic.NewForConfigOrDie(rc)
	kube := kubernetes.NewForConfigOrDie(rc)
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Go(func() {
			for range jobs {
				if err := storeCopy(ctx, dyn, kube, ns, app, pod); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func storeCopy(ctx context.Context, dyn dynamic.Interface, kube kubernetes.Interface, ns string, tmplApp *unstructured.Unstructured, tmplPod *corev1.Pod) error {
	id := uuid.NewString()
	name := AppName(id)
	a := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tmplApp.GetAPIVersion(), "kind": tmplApp.GetKind(), "spec": tmplApp.Object["spec"],
	}}
	a.SetName(name)
	a.SetNamespace(ns)
	labels := tmplApp.GetLabels()
	labels[labelJobID] = id
	a.SetLabels(labels)
	a.SetAnnotations(tmplApp.GetAnnotations())
	apps := dyn.Resource(GVR).Namespace(ns)
	created, err := apps.Create(ctx, a, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	created.Object["status"] = tmplApp.Object["status"]
	_ = unstructured.SetNestedField(created.Object, name+"-driver", "status", "driverInfo", "podName")
	if _, err := apps.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of %s: %w", name, err)
	}
	p := tmplPod.DeepCopy()
	p.ObjectMeta = metav1.ObjectMeta{
		Name: name + "-driver", Namespace: ns, Labels: p.Labels, Annotations: p.Annotations,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: APIVersion, Kind: Kind, Name: name, UID: created.GetUID()}},
	}
	p.Labels[labelOperatorAppName] = name
	p.Labels[labelJobID] = id
	status := p.Status
	cp, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s: %w", p.Name, err)
	}
	cp.Status = status
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of pod %s: %w", p.Name, err)
	}
	return nil
}

// measureChild runs a memoryChild for spec and returns its report.
func measureChild(b *testing.B, spec memoryChildSpec) memoryReport {
	b.Helper()
	raw, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), memoryChildEnv+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("measuring %+v: %v\n%s", spec, err, stderr.String())
	}
	var r memoryReport
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		b.Fatalf("measuring %+v: %v in %q", spec, err, out)
	}
	return r
}

// memoryChild is the child process's work: the plugin's clients and
// watcher, as a plugin process builds them.
func memoryChild(rawSpec string) int {
	var spec memoryChildSpec
	if err := json.Unmarshal([]byte(rawSpec), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var cc clientCache
	cl, err := cc.get(ctx, Access{Kubeconfig: spec.Kubeconfig})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var r memoryReport
	r.HeapBefore, r.RSSBefore, _ = settledMemory()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ws := &appWatchers{keepWhole: spec.KeepWhole}
	start := time.Now()
	s := ws.subscribe(cl, spec.Namespace, "no-such-application", time.Hour)
	select {
	case <-s.w.synced:
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "the watcher did not sync")
		return 1
	}
	r.Sync = time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	r.SyncAllocMiB = mib(after.TotalAlloc - before.TotalAlloc)
	r.Apps, r.Pods = len(s.w.apps.GetStore().List()), len(s.w.pods.GetStore().List())
	r.HeapAfter, r.RSSAfter, r.RSSPeak = settledMemory()
	s.close()
	ws.stopAll()
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return 0
}

// settledMemory is the live heap (HeapAlloc) after two GCs, and the process's RSS and
// peak RSS (VmRSS, VmHWM of /proc/self/status).
func settledMemory() (heap, rss, peak uint64) {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return m.HeapAlloc, 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return m.HeapAlloc, rss, peak
}
