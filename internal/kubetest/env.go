// Package kubetest runs a real Kubernetes control plane for tether's tests:
// etcd (Debian's etcd-server) and kube-apiserver (built from the Go module
// proxy by `make kube-apiserver`), started by controller-runtime's envtest,
// with the SparkApplication CRD installed. There is no scheduler, kubelet or
// controller manager: Simulator plays spark-operator (and the garbage
// collector's part for SparkApplications), and Proxy sits in front of the
// apiserver to count and fail requests.
package kubetest

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
)

//go:embed sparkapplication-crd.yaml
var crdYAML []byte

// Env is a running control plane.
type Env struct {
	Config     *rest.Config // admin access, straight to the apiserver
	Kubeconfig string       // a kubeconfig file for the same access
	Dynamic    dynamic.Interface
	Clientset  kubernetes.Interface
	env        *envtest.Environment
}

// Start starts etcd and kube-apiserver with the SparkApplication CRD, writing
// the kubeconfig and the control plane's data under dir. Whatever part of the
// control plane did start is stopped again when Start fails.
func Start(ctx context.Context, dir string) (*Env, error) {
	apiserver, etcd, err := Binaries()
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &crd); err != nil {
		return nil, fmt.Errorf("reading the SparkApplication CRD: %w", err)
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
		CRDs:                     []*apiextensionsv1.CustomResourceDefinition{&crd},
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	api := te.ControlPlane.GetAPIServer()
	api.Path, api.Out, api.Err = apiserver, apiLog, apiLog
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
		// envtest's Start cannot be interrupted; stop what it started once
		// it returns.
		go func() { <-done; _ = te.Stop() }()
		return nil, fmt.Errorf("starting the Kubernetes control plane: %w", ctx.Err())
	}
	if err != nil {
		serr := te.Stop()
		return nil, errors.Join(fmt.Errorf("starting the Kubernetes control plane (kube-apiserver %s, etcd %s): %w\nkube-apiserver.log ends:\n%s\netcd.log ends:\n%s",
			apiserver, etcd, err, tail(apiLog.Name()), tail(etcdLog.Name())), serr)
	}
	e := &Env{Config: cfg, env: te}
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

// Binaries finds kube-apiserver and etcd: TETHER_KUBE_APISERVER and
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

// repoRoot walks up from the working directory to tether's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/tetherjobs/tether\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository: no tether go.mod above the working directory; set TETHER_KUBE_APISERVER")
		}
		dir = parent
	}
}

// kubeVersion is the k8s.io/kubernetes version tools/kube-apiserver builds,
// the one source of truth for the binary's name.
func kubeVersion(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, "tools", "kube-apiserver", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("reading the kube-apiserver build module: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
			return f[1], nil
		}
	}
	return "", errors.New("tools/kube-apiserver/go.mod does not require k8s.io/kubernetes")
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
