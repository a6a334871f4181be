// Package kubetest runs a real Kubernetes control plane for tether's tests:
// etcd (Debian's etcd-server) and kube-apiserver (built from the Go module
// proxy by `make kube-apiserver`), started by controller-runtime's envtest,
// with kubeflow spark-operator's own CRDs installed (read at test time from
// the spark-operator module that tools/spark-operator pins, in the Go module
// cache). Start runs no scheduler, kubelet or controller manager.
// Simulator plays spark-operator (and the garbage collector's part for
// SparkApplications), and Proxy sits in front of the apiserver to count and
// fail requests. StartOperatorStack (operator.go) runs the real
// spark-operator controller, kube-controller-manager's garbage collector and
// a kubelet stand-in (kubelet.go) instead.
package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/tetherjobs/tether/internal/bintest"
)

// SparkOperatorModule is the module whose CRDs Start installs and whose
// controller StartOperatorStack runs. tools/spark-operator/go.mod pins its
// version.
const SparkOperatorModule = "github.com/kubeflow/spark-operator/v2"

// sparkOperatorCRDs are the CRDs Start installs, from the module's
// config/crd/bases. The operator's controller needs all three. It starts
// the ScheduledSparkApplication and SparkConnect controllers too, and
// caches their kinds (cmd/operator/controller/start.go, newCacheOptions).
var sparkOperatorCRDs = []string{
	"sparkoperator.k8s.io_sparkapplications.yaml",
	"sparkoperator.k8s.io_scheduledsparkapplications.yaml",
	"sparkoperator.k8s.io_sparkconnects.yaml",
}

// Env is a running control plane.
type Env struct {
	Config     *rest.Config // admin access, straight to the apiserver
	Kubeconfig string       // a kubeconfig file for the same access
	Dynamic    dynamic.Interface
	Clientset  kubernetes.Interface
	Dir        string // where Start keeps its files

	// The kubelet's serving certificate. The apiserver trusts it (as
	// --kubelet-certificate-authority) when it proxies pods/log to the
	// kubelet stand-in.
	kubeletCert, kubeletKey string

	env *envtest.Environment
}

// Start starts etcd and kube-apiserver with spark-operator's CRDs, writing
// the kubeconfig and the control plane's data under dir. Whatever part of the
// control plane did start is stopped again when Start fails.
func Start(ctx context.Context, dir string) (*Env, error) {
	apiserver, etcd, err := Binaries()
	if err != nil {
		return nil, err
	}
	crds, err := loadCRDs(ctx)
	if err != nil {
		return nil, err
	}
	kubeletCert, kubeletKey, err := writeServingCert(dir, "kubelet")
	if err != nil {
		return nil, err
	}
	// envtest logs through controller-runtime's logger, which otherwise
	// complains on stderr that it was never set.
	ctrllog.SetLogger(logr.Discard())

	// The control plane's own output goes to files under dir, so a start
	// that fails can say why.
	apiLog, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return nil, fmt.Errorf("creating the kube-apiserver log: %w", err)
	}
	defer apiLog.Close()
	etcdLog, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, fmt.Errorf("creating the etcd log: %w", err)
	}
	defer etcdLog.Close()

	te := &envtest.Environment{
		CRDs:                     crds,
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	api := te.ControlPlane.GetAPIServer()
	api.Path, api.Out, api.Err = apiserver, apiLog, apiLog
	// pods/log goes through the apiserver to the kubelet stand-in, at the
	// node's InternalIP (the node's hostname does not resolve). envtest
	// passes no kubelet CA, and without one kube-apiserver skips verifying
	// the kubelet's certificate (k8s.io/kubernetes pkg/kubelet/client,
	// transportConfig). With the stand-in's self-signed one it verifies.
	api.Configure().
		Set("kubelet-certificate-authority", kubeletCert).
		Set("kubelet-preferred-address-types", "InternalIP,Hostname").
		// envtest's default is a /24, 254 Service IPs, and spark-operator
		// creates a web UI Service for every application it submits
		// (--enable-ui-service, on by default), kept until the application
		// goes. Past about 253 live applications the rest stay SUBMITTED
		// ("failed to allocate a serviceIP ...: range is full"). A /16, as
		// EKS gives.
		Set("service-cluster-ip-range", "10.96.0.0/16")
	te.ControlPlane.Etcd = &envtest.Etcd{Path: etcd, DataDir: filepath.Join(dir, "etcd"), Out: etcdLog, Err: etcdLog}

	type started struct {
		cfg *rest.Config
		err error
	}
	done := make(chan started, 1)
	go func() {
		cfg, err := te.Start()
		done <- started{cfg, err}
	}()
	var cfg *rest.Config
	select {
	case s := <-done:
		cfg, err = s.cfg, s.err
	case <-ctx.Done():
		// envtest's Start cannot be interrupted. Stop what it started once
		// it returns.
		go func() { <-done; _ = te.Stop() }()
		return nil, fmt.Errorf("starting the Kubernetes control plane: %w", ctx.Err())
	}
	if err != nil {
		serr := te.Stop()
		return nil, errors.Join(fmt.Errorf("starting the Kubernetes control plane (kube-apiserver %s, etcd %s): %w\nkube-apiserver.log ends:\n%s\netcd.log ends:\n%s",
			apiserver, etcd, err, tail(apiLog.Name()), tail(etcdLog.Name())), serr)
	}
	e := &Env{Config: cfg, Dir: dir, kubeletCert: kubeletCert, kubeletKey: kubeletKey, env: te}
	if err := e.finish(dir); err != nil {
		return nil, errors.Join(err, te.Stop())
	}
	return e, nil
}

func (e *Env) finish(dir string) error {
	var err error
	if e.Dynamic, err = dynamic.NewForConfig(e.Config); err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	if e.Clientset, err = kubernetes.NewForConfig(e.Config); err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, e.env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// Stop stops the apiserver and etcd.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return nil
	}
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("stopping the Kubernetes control plane: %w", err)
	}
	return nil
}

// Binaries finds kube-apiserver and etcd. It takes TETHER_KUBE_APISERVER and
// TETHER_ETCD when set, else the apiserver `make kube-apiserver` builds
// under the repository's .tether/bin and etcd on PATH. The error says how to
// get what is missing.
func Binaries() (apiserver, etcd string, err error) {
	apiserver = os.Getenv("TETHER_KUBE_APISERVER")
	if apiserver == "" {
		root, rerr := repoRoot()
		if rerr != nil {
			return "", "", rerr
		}
		version, verr := kubeVersion(root)
		if verr != nil {
			return "", "", verr
		}
		apiserver = filepath.Join(root, ".tether", "bin", "kube-apiserver-"+version)
	}
	if _, serr := os.Stat(apiserver); serr != nil {
		return "", "", fmt.Errorf("kube-apiserver not found at %s: run `make kube-apiserver` (builds it from the Go module proxy once, about 5 minutes) or set TETHER_KUBE_APISERVER", apiserver)
	}
	etcd = os.Getenv("TETHER_ETCD")
	if etcd == "" {
		if etcd, err = exec.LookPath("etcd"); err != nil {
			return "", "", errors.New("etcd not found on PATH: install Debian's etcd-server (`apt-get install -y etcd-server`) or set TETHER_ETCD")
		}
	}
	return apiserver, etcd, nil
}

// SparkOperatorBinary finds the spark-operator binary. It takes
// TETHER_SPARK_OPERATOR when set, else the one `make spark-operator` builds
// under the repository's .tether/bin. The error says how to get it.
func SparkOperatorBinary() (string, error) {
	bin := os.Getenv("TETHER_SPARK_OPERATOR")
	if bin == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		version, err := requiredVersion(filepath.Join(root, "tools", "spark-operator", "go.mod"), SparkOperatorModule)
		if err != nil {
			return "", err
		}
		bin = filepath.Join(root, ".tether", "bin", "spark-operator-"+version)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("spark-operator not found at %s: run `make spark-operator` (builds it from the Go module proxy once, about 2 minutes) or set TETHER_SPARK_OPERATOR", bin)
	}
	return bin, nil
}

// KubeControllerManagerBinary finds kube-controller-manager (the stack runs
// only its garbage collector). It takes TETHER_KUBE_CONTROLLER_MANAGER when
// set, else the one `make kube-controller-manager` builds under .tether/bin
// from the same module and version as kube-apiserver.
func KubeControllerManagerBinary() (string, error) {
	bin := os.Getenv("TETHER_KUBE_CONTROLLER_MANAGER")
	if bin == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		version, err := kubeVersion(root)
		if err != nil {
			return "", err
		}
		bin = filepath.Join(root, ".tether", "bin", "kube-controller-manager-"+version)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("kube-controller-manager not found at %s: run `make kube-controller-manager` (builds it from the Go module proxy once, a few minutes) or set TETHER_KUBE_CONTROLLER_MANAGER", bin)
	}
	return bin, nil
}

// SparkOperatorModuleDir is the spark-operator module's directory in the Go
// module cache, at the version tools/spark-operator pins:
// TETHER_SPARK_OPERATOR_MODULE when set, else what `go mod download -json`
// says there (which also fetches the module on a fresh machine).
func SparkOperatorModuleDir(ctx context.Context) (string, error) {
	if dir := os.Getenv("TETHER_SPARK_OPERATOR_MODULE"); dir != "" {
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", SparkOperatorModule)
	cmd.Dir = filepath.Join(root, "tools", "spark-operator")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr == nil && m.Error != "" {
		err = errors.New(m.Error)
	}
	if err != nil || m.Dir == "" {
		return "", fmt.Errorf("finding %s's CRDs (go mod download -json in tools/spark-operator): %v %s; run `make spark-operator` (it downloads the module and builds the operator) or set TETHER_SPARK_OPERATOR_MODULE to the module's directory",
			SparkOperatorModule, err, strings.TrimSpace(stderr.String()))
	}
	return m.Dir, nil
}

func loadCRDs(ctx context.Context) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir, err := SparkOperatorModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, name := range sparkOperatorCRDs {
		path := filepath.Join(dir, "config", "crd", "bases", name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading spark-operator's CRD: %w", err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("reading spark-operator's CRD %s: %w", path, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// repoRoot is bintest.RepoRoot, saying which variable to set instead.
func repoRoot() (string, error) {
	root, err := bintest.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w; set %s", err, "TETHER_KUBE_APISERVER")
	}
	return root, nil
}

// kubeVersion is the k8s.io/kubernetes version tools/kube-apiserver builds,
// the one source of truth for the binary's name.
func kubeVersion(root string) (string, error) {
	return requiredVersion(filepath.Join(root, "tools", "kube-apiserver", "go.mod"), "k8s.io/kubernetes")
}

// requiredVersion is the version of module a build module's go.mod
// requires (as the Makefile's awk reads it).
func requiredVersion(gomod, module string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", fmt.Errorf("reading the build module: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s does not require %s", gomod, module)
}

// tail is the end of a log file, for errors.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const keep = 2000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}
