package deploy

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/image"
)

const testVersion = "v0.0.0-imagetest"

// The image `make image` builds: read back from its OCI layout by
// go-containerregistry, its file system unpacked, and its entrypoint run
// from that root file system (chroot, as the image's user, in a user
// namespace), the way a container runtime would.
func TestImage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	digest, err := image.Build(ctx, image.Options{
		ModuleDir: "..", Go: goCommand(t), Version: testVersion, Output: out,
		CACerts: "/etc/ssl/certs/ca-certificates.crt",
	})
	require.NoError(t, err)
	t.Logf("built %s in %s", digest, time.Since(start).Round(time.Second))

	img := readImage(t, out, digest)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, image.Entrypoint, cf.Config.Entrypoint)
	assert.Equal(t, []string{"run"}, cf.Config.Cmd)
	assert.Equal(t, "10001:10001", cf.Config.User, "a non-root user")
	assert.Contains(t, cf.Config.Env, "TETHER_CONFIG=/etc/tether/tether.yaml")
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, runtime.GOARCH, cf.Architecture)
	assert.Equal(t, testVersion, cf.Config.Labels["org.opencontainers.image.version"])

	root := filepath.Join(t.TempDir(), "rootfs")
	headers := unpack(t, img, root)
	for _, name := range []string{"tether", "tether-healthcheck", "tether-plugin-shell", "tether-plugin-ecs", "tether-plugin-sparkeks"} {
		assertStatic(t, filepath.Join(root, "usr/local/bin", name))
	}
	for name, uid := range map[string]int{"var/lib/tether": image.UID, "usr/local/bin/tether": 0, "etc/tether/tether.yaml": 0} {
		require.Contains(t, headers, name)
		assert.Equal(t, uid, headers[name].Uid, name)
		assert.Equal(t, uid, headers[name].Gid, name)
	}
	assert.Equal(t, int64(0o1777), headers["tmp"].Mode, "/tmp is world-writable and sticky")
	addDevNull(t, root)

	t.Run("version", func(t *testing.T) {
		out, err := runEntrypoint(ctx, root, cf.Config, "version")
		require.NoError(t, err, out)
		assert.Contains(t, out, "tether "+testVersion+" ")
		assert.Contains(t, out, "linux/"+runtime.GOARCH)
	})
	t.Run("config check", func(t *testing.T) {
		out, err := runEntrypoint(ctx, root, cf.Config, "config", "check", "--config", image.ConfigPath)
		require.NoError(t, err, "tether config check on the shipped configuration, inside the image:\n%s", out)
	})
	t.Run("runs as the image's user", func(t *testing.T) {
		// The shipped configuration without a database: the agent refuses to
		// start naming database_url, having read the file as uid 10001.
		out, err := runEntrypoint(ctx, root, cf.Config, cf.Config.Cmd...)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		assert.Contains(t, out, "database_url is not set")
	})
}

// readImage finds the image of digest in the layout at dir.
func readImage(t *testing.T, dir string, digest v1.Hash) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	assert.Equal(t, "tether:"+testVersion, m.Manifests[0].Annotations[image.RefName])
	img, err := idx.Image(digest)
	require.NoError(t, err)
	return img
}

// unpack writes the image's flattened file system under root and returns
// its entries' headers by name.
func unpack(t *testing.T, img v1.Image, root string) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	headers := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers
		}
		require.NoError(t, err)
		require.False(t, strings.Contains(h.Name, ".."), h.Name)
		headers[h.Name] = h
		path := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(path, 0o755))
		case tar.TypeReg:
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			require.NoError(t, err)
			_, err = io.Copy(f, tr)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		default:
			t.Fatalf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		require.NoError(t, syscall.Chmod(path, uint32(h.Mode&0o7777)))
		if os.Getuid() == 0 { // as a container runtime does; others cannot chown
			require.NoError(t, os.Lchown(path, h.Uid, h.Gid))
		}
	}
}

// assertStatic checks that path is a static ELF executable (no interpreter:
// the image has no libc).
func assertStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err, path)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked", path)
	}
}

// runEntrypoint runs the image's entrypoint with args, chrooted into root,
// as the image's user, with the image's environment and working directory.
// As root, the process takes that uid and gid; otherwise the image's user is
// mapped to this process's in a new user namespace.
// addDevNull gives the unpacked root the /dev/null a container runtime
// mounts (go-plugin starts plugins with it as stdin). /proc is left out:
// the agent must find its plugins without it (from its absolute argv[0]).
func addDevNull(t *testing.T, root string) {
	t.Helper()
	dev := filepath.Join(root, "dev")
	require.NoError(t, os.MkdirAll(dev, 0o755))
	null := filepath.Join(dev, "null")
	if os.Getuid() == 0 {
		const devNull = 1<<8 | 3 // character device 1:3
		require.NoError(t, syscall.Mknod(null, syscall.S_IFCHR|0o666, devNull))
		require.NoError(t, os.Chmod(null, 0o666))
		return
	}
	// Without root, an empty file reads as /dev/null does (EOF at once).
	require.NoError(t, os.WriteFile(null, nil, 0o666))
}

func runEntrypoint(ctx context.Context, root string, c v1.Config, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	argv := append(append([]string{}, c.Entrypoint...), args...)
	// argv[0] is a path inside root: the chroot comes before the exec, and
	// the working directory is entered after it.
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = c.Env, c.WorkingDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	if os.Getuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: image.UID, Gid: image.UID}
	} else {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: image.UID, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: image.UID, HostID: os.Getgid(), Size: 1}}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
