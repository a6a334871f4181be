// Package depstest checks which way the module's imports point. The product
// (the agent, the plugins, the SDK and the packages they are built from)
// never imports a package that exists for tests, and only the plugins' own
// binaries import a plugin. It also checks that only internal/store runs SQL
// (sql_test.go).
package depstest

import (
	"bufio"
	"bytes"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/tetherjobs/tether/internal/bintest"
)

const module = "github.com/tetherjobs/tether"

// testSuite reports whether pkg holds tests, not product. Nothing imports it,
// and it may import test-support packages outside its _test files.
func testSuite(pkg string) bool {
	return pkg == "internal/e2e" || pkg == "internal/bench"
}

// testSupport reports whether pkg (relative to the module) exists for
// tests. Such a package says so in its name. One of its path elements ends
// in "test" (pgtest, kubetest, bintest, fakeplugintest, plugintest).
func testSupport(pkg string) bool {
	return slices.ContainsFunc(strings.Split(pkg, "/"), func(e string) bool { return strings.HasSuffix(e, "test") })
}

func product(pkg string) bool {
	return !testSupport(pkg) && !testSuite(pkg)
}

// deps returns every package of the module (relative to it) with the
// module's packages it depends on, directly or not, test files left out.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	goBin, err := bintest.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), goBin, "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	all := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		var own []string
		for _, d := range fields[1:] {
			if rel, ok := strings.CutPrefix(d, module+"/"); ok {
				own = append(own, rel)
			}
		}
		all[strings.TrimPrefix(fields[0], module+"/")] = own
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

func TestProductImportsNoTestSupport(t *testing.T) {
	all := deps(t)
	for _, must := range []string{"cmd/agent", "internal/agent", "internal/config", "pkg/plugin", "plugins/shell"} {
		if _, ok := all[must]; !ok {
			t.Fatalf("go list did not list %s: the check would see nothing", must)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(all)) {
		if !product(pkg) {
			continue
		}
		for _, d := range all[pkg] {
			if testSupport(d) {
				t.Errorf("%s depends on %s, which exists for tests (only _test files may import it)", pkg, d)
			}
		}
	}
}

// The agent runs plugins as processes. No package of it imports one.
func TestOnlyPluginBinariesImportPlugins(t *testing.T) {
	all := deps(t)
	for _, pkg := range slices.Sorted(maps.Keys(all)) {
		if !product(pkg) || strings.HasPrefix(pkg, "plugins/") {
			continue
		}
		for _, d := range all[pkg] {
			if strings.HasPrefix(d, "plugins/") {
				t.Errorf("%s depends on %s: reach a plugin through its binary (pkg/plugin's protocol), not its code", pkg, d)
			}
		}
	}
}

// The rules themselves, so a rename cannot quietly take a package out of
// them.
func TestClassification(t *testing.T) {
	for pkg, want := range map[string]bool{
		"internal/pgtest": true, "internal/kubetest/sparksubmit": true, "internal/bintest": true,
		"internal/fakeplugintest/noop": true, "pkg/plugin/plugintest": true,
		"internal/config": false, "internal/pgcluster": false, "cmd/agent": false, "localstack/emulator": false,
	} {
		if got := testSupport(pkg); got != want {
			t.Errorf("testSupport(%s) = %v, want %v", pkg, got, want)
		}
	}
}

// pkg/api and pkg/client are for other modules, which cannot import an
// internal package (examples/client builds as one: internal/moduletest).
func TestClientImportsNoInternal(t *testing.T) {
	all := deps(t)
	for _, pkg := range []string{"pkg/api", "pkg/client"} {
		if _, ok := all[pkg]; !ok {
			t.Fatalf("go list did not list %s: the check would see nothing", pkg)
		}
		for _, d := range all[pkg] {
			if strings.HasPrefix(d, "internal/") || d == "internal" {
				t.Errorf("%s depends on %s: another module could not build it", pkg, d)
			}
		}
	}
}
