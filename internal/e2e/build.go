// Package e2e holds process-level tests: real `tether run` agent processes,
// real plugin binaries, real PostgreSQL, killed with SIGKILL, restarted, and
// cut off from their database. Build compiles what they run, without make.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/gobuild"
)

// Package paths of what the tests run.
const (
	AgentPackage     = "github.com/tetherjobs/tether/cmd/agent"
	ShellPackage     = "github.com/tetherjobs/tether/plugins/shell"
	ResumablePackage = "github.com/tetherjobs/tether/internal/fakeplugintest/resumable"
	ECSPackage       = "github.com/tetherjobs/tether/plugins/ecs"
	SparkEKSPackage  = "github.com/tetherjobs/tether/plugins/sparkeks"
)

// Binaries are the built executables.
type Binaries struct {
	Tether    string // the agent binary
	PluginDir string // holds tether-plugin-shell, -resumable, -ecs and -sparkeks
}

// Build compiles the tether binary and the shell, resumable, ecs and sparkeks plugins into
// dir. It must run inside the tether module (any test's working directory is).
func Build(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{Tether: filepath.Join(dir, "tether"), PluginDir: dir}
	out, err := gobuild.Command(ctx, "go", b.Tether, AgentPackage).CombinedOutput()
	if err != nil {
		return Binaries{}, fmt.Errorf("building tether from %s: %w\n%s", AgentPackage, err, strings.TrimSpace(string(out)))
	}
	if err := bintest.Build(ctx, dir, map[string]string{
		"shell":     ShellPackage,
		"resumable": ResumablePackage,
		"ecs":       ECSPackage,
		"sparkeks":  SparkEKSPackage,
	}); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

// BuildAt compiles the tether binary and the shell and resumable plugins of
// an earlier commit of this repository, for tests that run today's agent or
// plugins beside that commit's. The commit's tree is taken with git archive
// (the work tree is not touched) into cache/<commit>/src, and the binaries
// go to cache/<commit>/bin. A later call finds them there and builds nothing.
// The plugin directory holds only those two plugins.
func BuildAt(ctx context.Context, repo, commit, cache string) (Binaries, error) {
	dir := filepath.Join(cache, commit)
	b := Binaries{Tether: filepath.Join(dir, "bin", "tether"), PluginDir: filepath.Join(dir, "bin")}
	done := filepath.Join(dir, "built")
	if _, err := os.Stat(done); err == nil {
		return b, nil
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("commit %s is not in this clone (%w: %s): the compatibility tests build it; fetch the project's whole history (git fetch --unshallow)",
			commit, err, strings.TrimSpace(string(out)))
	}
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(dir); err != nil {
		return Binaries{}, fmt.Errorf("clearing %s: %w", dir, err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("creating %s: %w", src, err)
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", repo, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("extracting commit %s: %w\n%s", commit, err, strings.TrimSpace(string(out)))
	}
	pkgs := map[string]string{
		"tether":                  AgentPackage,
		"tether-plugin-shell":     ShellPackage,
		"tether-plugin-resumable": ResumablePackage,
	}
	for name, pkg := range pkgs {
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(b.PluginDir, name), pkg)
		build.Dir = src
		build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := build.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("building %s at commit %s: %w\n%s", pkg, commit, err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.WriteFile(done, []byte(commit+"\n"), 0o644); err != nil {
		return Binaries{}, fmt.Errorf("marking the build of %s done: %w", commit, err)
	}
	return b, nil
}
