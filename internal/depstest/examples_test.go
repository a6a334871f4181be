package depstest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// goIn runs the go command in dir, a module of its own, as its author
// would, and returns its output. The module cache is the one this test
// uses; nothing is downloaded that the main module does not use.
func goIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestResumableExampleBuildsAndPassesOnItsOwn builds and tests
// examples/resumable, the plugin docs/plugins.md walks through, from its own
// module, as an author who copies it would, and prints how many modules it
// pulls in. It must import nothing of tether but the SDK.
func TestResumableExampleBuildsAndPassesOnItsOwn(t *testing.T) {
	root, err := bintest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "resumable")
	goIn(t, dir, "vet", "./...")
	goIn(t, dir, "test", "-count=1", "./...")
	for _, pkg := range strings.Fields(goIn(t, dir, "list", "-deps", "-f", "{{.ImportPath}}", ".")) {
		own := strings.HasPrefix(pkg, module+"/examples/")
		sdk := strings.HasPrefix(pkg, module+"/pkg/plugin") || pkg == module+"/pkg/api"
		if strings.HasPrefix(pkg, module+"/") && !own && !sdk {
			t.Errorf("the example plugin links %s: a plugin should need only pkg/plugin", pkg)
		}
	}
	mods := strings.Split(strings.TrimSpace(goIn(t, dir, "list", "-m", "all")), "\n")
	// The SDK is a module of its own: an author's module graph is the SDK's
	// (go-plugin, gRPC and what they require), never the agent's.
	for _, m := range mods {
		for _, agentOnly := range []string{"github.com/aws/", "k8s.io/", "sigs.k8s.io/", "github.com/jackc/", "github.com/prometheus/", "github.com/chromedp/",
			"github.com/tetherjobs/tether "} {
			if strings.HasPrefix(m, agentOnly) {
				t.Errorf("examples/resumable's module graph holds %s, a dependency of the agent's, not of the SDK's", m)
			}
		}
	}
	t.Logf("examples/resumable: %d modules in go list -m all", len(mods))
}

// The example plugin, built in its own module with the oldest go-plugin and
// gRPC the SDK allows, runs a job and resumes it under the agent's host
// side, built with the agent's newer ones: the SDK's requirements are real.
func TestResumableExampleRunsUnderTheAgentsHost(t *testing.T) {
	root, err := bintest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "resumable")
	bin := filepath.Join(t.TempDir(), "tether-plugin-count")
	goIn(t, dir, "build", "-o", bin, ".")
	for _, m := range []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc"} {
		t.Logf("%s: the plugin's %s, the agent's %s", m, moduleVersion(t, dir, m), moduleVersion(t, root, m))
	}
	c := plugintest.StartBinary(t, bin, nil)
	state := t.TempDir()
	cfg, err := json.Marshal(map[string]string{"dir": state})
	if err != nil {
		t.Fatal(err)
	}
	j := &plugin.Job{ID: "compat", Command: "count", Attempt: 1, Config: cfg, Context: json.RawMessage(`{"lines": 3, "step": "10ms"}`)}
	rt := plugintest.NewRuntime(nil)
	res, err := c.Execute(t.Context(), j, rt)
	if err != nil {
		t.Fatalf("Execute across versions: %v", err)
	}
	if string(res.Output) != `{"lines":3}` {
		t.Fatalf("output %s", res.Output)
	}
	want := "job-compat-1 line 1\njob-compat-1 line 2\njob-compat-1 line 3\n"
	if got := rt.StdoutString(); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
	j.Handle = rt.Handle()
	if _, err := c.Resume(t.Context(), j, plugintest.NewRuntime(j.Handle)); err != nil {
		t.Fatalf("Resume of the finished run across versions: %v", err)
	}
}

// moduleVersion is the version of module m in the build list of the module
// in dir.
func moduleVersion(t *testing.T, dir, m string) string {
	t.Helper()
	return strings.TrimSpace(goIn(t, dir, "list", "-m", "-f", "{{.Version}}", m))
}
