// Package bintest builds plugin binaries for tests, once per test binary
// (call it from TestMain), so tests drive real plugin processes.
package bintest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/tetherjobs/tether/internal/gobuild"
)

// Package paths of the test plugins.
const (
	Noop = "github.com/tetherjobs/tether/internal/fakeplugintest/noop"
	Bare = "github.com/tetherjobs/tether/internal/fakeplugintest/bare"
)

// PluginPath is where Build puts the plugin called name in dir.
func PluginPath(dir, name string) string {
	return filepath.Join(dir, "tether-plugin-"+name)
}

// Build compiles each package into dir as tether-plugin-<name>, for pkgs
// mapping name to package path. It must run inside the tether module (any
// test's working directory is).
func Build(ctx context.Context, dir string, pkgs map[string]string) error {
	goBin, err := GoTool()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cmd := gobuild.Command(ctx, goBin, PluginPath(dir, name), pkgs[name])
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("building plugin %q from %s: %w\n%s", name, pkgs[name], err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// TempPlugins builds pkgs into a fresh temporary directory and returns it
// with a func that removes it. Typical use in TestMain:
//
//	dir, cleanup, err := bintest.TempPlugins(ctx, map[string]string{"noop": bintest.Noop})
func TempPlugins(ctx context.Context, pkgs map[string]string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "tether-plugins-")
	if err != nil {
		return "", nil, fmt.Errorf("creating plugin dir: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := Build(ctx, dir, pkgs); err != nil {
		cleanup()
		return "", nil, err
	}
	return dir, cleanup, nil
}

// GoTool returns the path of the go tool that builds the binaries.
func GoTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("finding the go tool: not on PATH nor at %s", p)
	}
	return p, nil
}

// RepoRoot walks up from the working directory to tether's go.mod. That is
// where tests find the build modules under tools/ and the cached binaries
// under .tether/.
func RepoRoot() (string, error) {
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
			return "", errors.New("finding the repository: no tether go.mod above the working directory")
		}
		dir = parent
	}
}
