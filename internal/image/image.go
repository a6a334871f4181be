// Package image builds tether's OCI image without a container engine: it
// compiles the agent, its plugins and the health check as static binaries
// (CGO_ENABLED=0) and lays them, the shipped configuration, CA certificates
// and a non-root user into one layer on an empty base, written as an OCI
// image layout (https://github.com/opencontainers/image-spec/blob/main/image-layout.md).
package image

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/tetherjobs/tether/internal/gobuild"
)

// The image's layout, as deploy/README.md documents it.
const (
	BinDir     = "/usr/local/bin"
	ConfigPath = "/etc/tether/tether.yaml"
	HomeDir    = "/var/lib/tether"
	CACerts    = "/etc/ssl/certs/ca-certificates.crt"
	UID        = 10001
	User       = "10001:10001"
	// RefName is the org.opencontainers.image.ref.name of the image in the
	// layout: tether:<version>.
	RefName = "org.opencontainers.image.ref.name"
)

// Entrypoint and Cmd: the agent itself as PID 1 of the container, exec form.
// ECS's init (initProcessEnabled) or `docker run --init` reaps orphans.
var (
	Entrypoint = []string{BinDir + "/tether"}
	Cmd        = []string{"run"}
)

// versionVar is the linker variable that holds the agent's version.
const versionVar = "github.com/tetherjobs/tether/internal/agent.buildVersion"

// epoch is every file's and the image's time, so one tree builds one image.
var epoch = time.Unix(0, 0).UTC()

// Options say what to build and where.
type Options struct {
	ModuleDir string   // the repository root
	Go        string   // the go command ("" = "go")
	Env       []string // the go command's environment (nil = the process's)
	Version   string   // stamped into the agent and the image's labels
	Arch      string   // GOARCH ("" = this machine's)
	CACerts   string   // a PEM bundle of CA certificates to include (the plugins reach AWS over TLS)
	Output    string   // the OCI layout directory; replaced
}

// Build compiles the binaries and writes the image. It returns its digest.
func Build(ctx context.Context, o Options) (v1.Hash, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	work, err := os.MkdirTemp("", "tether-image-")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(work)
	bins, err := compile(ctx, o, filepath.Join(work, "bin"))
	if err != nil {
		return v1.Hash{}, err
	}
	files, err := rootFiles(o, bins)
	if err != nil {
		return v1.Hash{}, err
	}
	layerPath := filepath.Join(work, "layer.tar")
	if err := writeTar(layerPath, files); err != nil {
		return v1.Hash{}, err
	}
	img, err := assemble(layerPath, o)
	if err != nil {
		return v1.Hash{}, err
	}
	return write(img, o)
}

// mains are the packages built into the image, by the name of their binary:
// the agent, every plugin under plugins/ and the health check.
func mains(moduleDir string) (map[string]string, error) {
	m := map[string]string{"tether": "./cmd/agent", "tether-healthcheck": "./cmd/tether-healthcheck"}
	dirs, err := filepath.Glob(filepath.Join(moduleDir, "plugins", "*", "main.go"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("image: no plugin under %s/plugins (%v)", moduleDir, err)
	}
	for _, d := range dirs {
		name := filepath.Base(filepath.Dir(d))
		m["tether-plugin-"+name] = "./plugins/" + name
	}
	return m, nil
}

// BuildFlags are the go build flags of the image's binaries (besides the
// version stamp): every tether binary's (internal/gobuild), so that the
// image shares the build cache with the binaries tests build.
func BuildFlags() []string { return gobuild.Flags() }

// BuildEnv is the go command's environment for the image's binaries.
func BuildEnv(env []string, arch string) []string {
	return append(gobuild.Env(env), "GOOS=linux", "GOARCH="+arch)
}

// compile builds every binary into dir and returns their paths by name.
// They share the go build cache: after the first image, a build whose
// sources did not change only links.
func compile(ctx context.Context, o Options, dir string) (map[string]string, error) {
	m, err := mains(o.ModuleDir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, pkg := range m {
		bin := filepath.Join(dir, name)
		out[name] = bin
		args := append([]string{"build"}, BuildFlags()...)
		args = append(args, "-ldflags", "-s -w -X "+versionVar+"="+o.Version, "-o", bin, pkg)
		cmd := exec.CommandContext(ctx, o.Go, args...)
		cmd.Dir, cmd.Env = o.ModuleDir, BuildEnv(o.Env, o.Arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("image: go build %s: %w\n%s", pkg, err, b)
		}
	}
	return out, nil
}

// file is one entry of the layer.
type file struct {
	name     string // absolute path in the image
	mode     int64  // permission bits (and sticky)
	uid      int
	dir      bool
	src      string // a file to copy, or
	contents string
}

// rootFiles is the image's file system.
func rootFiles(o Options, bins map[string]string) ([]file, error) {
	if o.CACerts == "" {
		return nil, fmt.Errorf("image: no CA certificate bundle given: the plugins reach AWS over TLS (on Debian: apt-get install -y ca-certificates, then /etc/ssl/certs/ca-certificates.crt)")
	}
	if _, err := os.Stat(o.CACerts); err != nil {
		return nil, fmt.Errorf("image: CA certificates: %w", err)
	}
	files := []file{
		{name: "/etc", mode: 0o755, dir: true},
		{name: "/etc/passwd", mode: 0o644, contents: fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\ntether:x:%d:%d:tether:%s:/sbin/nologin\n", UID, UID, HomeDir)},
		{name: "/etc/group", mode: 0o644, contents: fmt.Sprintf("root:x:0:\ntether:x:%d:\n", UID)},
		{name: "/etc/ssl", mode: 0o755, dir: true},
		{name: "/etc/ssl/certs", mode: 0o755, dir: true},
		{name: CACerts, mode: 0o644, src: o.CACerts},
		{name: "/etc/tether", mode: 0o755, dir: true},
		{name: ConfigPath, mode: 0o644, src: filepath.Join(o.ModuleDir, "deploy", "tether.yaml")},
		{name: "/tmp", mode: 0o1777, dir: true},
		{name: "/usr", mode: 0o755, dir: true},
		{name: "/usr/local", mode: 0o755, dir: true},
		{name: BinDir, mode: 0o755, dir: true},
		{name: "/var", mode: 0o755, dir: true},
		{name: "/var/lib", mode: 0o755, dir: true},
		{name: HomeDir, mode: 0o750, uid: UID, dir: true},
	}
	names := make([]string, 0, len(bins))
	for name := range bins {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		files = append(files, file{name: BinDir + "/" + name, mode: 0o755, src: bins[name]})
	}
	return files, nil
}

// writeTar writes files as a tar archive at path, owned by root unless said
// otherwise, every time the epoch.
func writeTar(path string, files []file) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("image: %w", cerr)
		}
	}()
	tw := tar.NewWriter(f)
	for _, fl := range files {
		if err := addFile(tw, fl); err != nil {
			return fmt.Errorf("image: adding %s: %w", fl.name, err)
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, fl file) error {
	h := &tar.Header{
		Name: strings.TrimPrefix(fl.name, "/"), Mode: fl.mode, Uid: fl.uid, Gid: fl.uid,
		ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg,
	}
	if fl.dir {
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		return tw.WriteHeader(h)
	}
	body := []byte(fl.contents)
	if fl.src != "" {
		b, err := os.ReadFile(fl.src)
		if err != nil {
			return err
		}
		body = b
	}
	h.Size = int64(len(body))
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(body)
	return err
}

// assemble makes the image: the layer on an empty base, with its config.
func assemble(layerPath string, o Options) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(layerPath, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, fmt.Errorf("image: the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "tether internal/image: static binaries, configuration, CA certificates, user tether",
	}})
	if err != nil {
		return nil, fmt.Errorf("image: appending the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.Arch, v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: Entrypoint, Cmd: Cmd, User: User, WorkingDir: HomeDir,
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"TETHER_CONFIG=" + ConfigPath,
			"SSL_CERT_FILE=" + CACerts,
		},
		ExposedPorts: map[string]struct{}{"9090/tcp": {}},
		StopSignal:   "SIGTERM",
		Labels: map[string]string{
			"org.opencontainers.image.title":   "tether",
			"org.opencontainers.image.version": o.Version,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: the config: %w", err)
	}
	return img, nil
}

// write replaces o.Output with an OCI layout holding img as
// tether:<version>.
func write(img v1.Image, o Options) (v1.Hash, error) {
	if err := os.RemoveAll(o.Output); err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	p, err := layout.Write(o.Output, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image: writing the layout %s: %w", o.Output, err)
	}
	ann := map[string]string{RefName: "tether:" + o.Version}
	if err := p.AppendImage(img, layout.WithAnnotations(ann), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.Arch})); err != nil {
		return v1.Hash{}, fmt.Errorf("image: writing the image to %s: %w", o.Output, err)
	}
	return img.Digest()
}
