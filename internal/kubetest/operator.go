package kubetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/tetherjobs/tether/internal/gobuild"
)

// OperatorStack is a control plane with the real kubeflow spark-operator
// controller driving SparkApplications: kube-apiserver + etcd (Env), the
// Proxy clients reach it through, spark-operator's controller (`operator
// controller start`, no webhook) running the stand-in spark-submit
// (internal/kubetest/sparksubmit), kube-controller-manager running only its
// garbage collector, and the kubelet stand-in (a Ready node that binds and
// runs the driver pods as their annotations script, and serves their logs).
// There is no scheduler (the kubelet binds) and there are no executors.
type OperatorStack struct {
	Env      *Env
	Proxy    *Proxy
	Kubelet  *Kubelet
	Operator *Process // spark-operator controller; Kill / Start / Restart it
	GC       *Process // kube-controller-manager --controllers=garbagecollector

	healthz string // the operator's readyz URL

	cancel context.CancelFunc
	mu     sync.Mutex
	uids   map[string]map[types.UID]bool // namespace/name → every SparkApplication UID seen
}

// StartOperatorStack starts an OperatorStack whose files (logs, kubeconfigs,
// the spark-submit stand-in) live under dir. It needs kube-apiserver, etcd,
// kube-controller-manager and spark-operator (see Binaries,
// KubeControllerManagerBinary, SparkOperatorBinary; `make test` builds
// them). Whatever started is stopped again when it fails.
func StartOperatorStack(ctx context.Context, dir string, log *slog.Logger) (_ *OperatorStack, err error) {
	operatorBin, err := SparkOperatorBinary()
	if err != nil {
		return nil, err
	}
	kcmBin, err := KubeControllerManagerBinary()
	if err != nil {
		return nil, err
	}
	sparkHome := filepath.Join(dir, "spark")
	if err := buildSparkSubmit(ctx, filepath.Join(sparkHome, "bin", "spark-submit")); err != nil {
		return nil, err
	}

	env, err := Start(ctx, dir)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &OperatorStack{Env: env, cancel: cancel, uids: map[string]map[types.UID]bool{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	if s.Proxy, err = StartProxy(env, dir); err != nil {
		return nil, err
	}
	if err := s.watchApplications(runCtx); err != nil {
		return nil, err
	}
	if s.Kubelet, err = StartKubelet(runCtx, env, "tether-node", log); err != nil {
		return nil, err
	}

	s.GC = newProcess("kube-controller-manager", kcmBin, filepath.Join(dir, "kube-controller-manager.log"), []string{
		"--kubeconfig=" + env.Kubeconfig,
		"--controllers=garbagecollector",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--concurrent-gc-syncs=5",
	}, nil)
	if err := s.GC.Start(); err != nil {
		return nil, err
	}

	// spark-submit (the stand-in) reaches the apiserver at the --master
	// URL the operator builds from KUBERNETES_SERVICE_HOST/PORT
	// (pkg/util/util.go, GetMasterURL), with the admin's certificate.
	host, err := url.Parse(env.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("apiserver address: %w", err)
	}
	creds := map[string][]byte{"ca": env.Config.CAData, "cert": env.Config.CertData, "key": env.Config.KeyData}
	for name, b := range creds {
		if err := os.WriteFile(filepath.Join(dir, "spark-submit-"+name+".pem"), b, 0o600); err != nil {
			return nil, fmt.Errorf("spark-submit credentials: %w", err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.healthz = "http://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	opArgs := []string{
		"controller", "start",
		"--kubeconfig=" + env.Kubeconfig,
		"--leader-election=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(port),
		"--namespaces=", // every namespace
		"--controller-threads=10",
		"--workqueue-ratelimiter-max-delay=1s", // quick requeues after errors
		"--zap-log-level=info",
	}
	// More flags for the operator (a benchmark raising its
	// --controller-threads or --kube-api-qps, say). Later ones win.
	opArgs = append(opArgs, strings.Fields(os.Getenv("TETHER_KUBETEST_OPERATOR_FLAGS"))...)
	s.Operator = newProcess("spark-operator", operatorBin, filepath.Join(dir, "spark-operator.log"), opArgs, []string{
		"SPARK_HOME=" + sparkHome,
		"KUBERNETES_SERVICE_HOST=" + host.Hostname(),
		"KUBERNETES_SERVICE_PORT=" + host.Port(),
		"TETHER_SPARK_SUBMIT_CA=" + filepath.Join(dir, "spark-submit-ca.pem"),
		"TETHER_SPARK_SUBMIT_CERT=" + filepath.Join(dir, "spark-submit-cert.pem"),
		"TETHER_SPARK_SUBMIT_KEY=" + filepath.Join(dir, "spark-submit-key.pem"),
	})
	if err := s.StartOperator(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// StartOperator starts the operator (again, after KillOperator) and waits
// until it is ready.
func (s *OperatorStack) StartOperator(ctx context.Context) error {
	if err := s.Operator.Start(); err != nil {
		return err
	}
	for {
		if !s.Operator.Running() {
			return fmt.Errorf("spark-operator exited; its log ends:\n%s", s.Operator.LogTail())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.healthz, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("spark-operator not ready: %w; its log ends:\n%s", ctx.Err(), s.Operator.LogTail())
		}
	}
}

// KillOperator kills the operator (SIGKILL), as a crash or an evicted pod
// would end it. StartOperator brings it back.
func (s *OperatorStack) KillOperator() error { return s.Operator.Kill() }

// RestartOperator stops the operator (SIGTERM) and starts it again.
func (s *OperatorStack) RestartOperator(ctx context.Context) error {
	if err := s.Operator.Stop(); err != nil {
		return err
	}
	return s.StartOperator(ctx)
}

// OperatorLog is the end of the operator's log.
func (s *OperatorStack) OperatorLog() string { return s.Operator.LogTail() }

// Created is how many distinct SparkApplications (by UID) were ever seen
// under namespace/name.
func (s *OperatorStack) Created(namespace, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uids[namespace+"/"+name])
}

// Stop stops the operator, the garbage collector, the kubelet, the proxy and
// the control plane.
func (s *OperatorStack) Stop() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, p := range []*Process{s.Operator, s.GC} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	s.cancel()
	if s.Kubelet != nil {
		s.Kubelet.Stop()
	}
	if s.Proxy != nil {
		s.Proxy.Close()
	}
	errs = append(errs, s.Env.Stop())
	return errors.Join(errs...)
}

func (s *OperatorStack) watchApplications(ctx context.Context) error {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(s.Env.Dynamic, 0)
	inf := factory.ForResource(SparkApplications).Informer()
	see := func(o any) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return
		}
		key := u.GetNamespace() + "/" + u.GetName()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.uids[key] == nil {
			s.uids[key] = map[types.UID]bool{}
		}
		s.uids[key][u.GetUID()] = true
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return fmt.Errorf("watching SparkApplications: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("watching SparkApplications: informer did not sync")
	}
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return nil
}

// buildSparkSubmit builds the stand-in spark-submit to out.
func buildSparkSubmit(ctx context.Context, out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := gobuild.Command(ctx, goBin, out, "./internal/kubetest/sparksubmit")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the spark-submit stand-in: %v\n%s", err, b)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
