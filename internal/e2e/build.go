// Package e2e holds process-level tests: real `tether run` agent processes,
// real plugin binaries, real PostgreSQL, killed with SIGKILL, restarted, and
// cut off from their database. Build compiles what they run, without make.
package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tetherjobs/tether/internal/bintest"
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
	out, err := exec.CommandContext(ctx, "go", "build", "-o", b.Tether, AgentPackage).CombinedOutput()
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
