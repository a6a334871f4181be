package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

func job(t *testing.T, dir, id string) *plugin.Job {
	t.Helper()
	cfg, _ := json.Marshal(map[string]string{"dir": dir})
	return &plugin.Job{ID: id, Command: "count", Attempt: 1, Config: cfg, Context: json.RawMessage(`{"lines": 6, "step": "20ms"}`)}
}

func want(id string) string {
	var b strings.Builder
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "job-%s-1 line %d\n", id, i)
	}
	return b.String()
}

// A job runs to its end in-process and over gRPC.
func TestExecute(t *testing.T) {
	plugintest.Run(t, &Plugin{}, func(t *testing.T, c plugintest.Client) {
		j := job(t, t.TempDir(), "run")
		rt := plugintest.NewGatedRuntime(nil)
		res, err := c.Execute(context.Background(), j, rt)
		if err != nil {
			t.Fatal(err)
		}
		if got := rt.StdoutString(); got != want("run") {
			t.Fatalf("stdout %q, want %q", got, want("run"))
		}
		if string(res.Output) != `{"lines":6}` {
			t.Fatalf("output %s", res.Output)
		}
	})
}

// A hand-off and a crash between two fresh plugin values write each line
// once and start the run once.
func TestHandOffAndCrash(t *testing.T) {
	for name, move := range map[string]func(*testing.T, plugintest.NewPlugin, *plugin.Job, int) plugintest.Moved{
		"hand-off": plugintest.HandOff, "crash": plugintest.Crash,
	} {
		t.Run(name, func(t *testing.T) {
			j := job(t, t.TempDir(), name)
			m := move(t, func() plugin.Plugin { return &Plugin{} }, j, 2)
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if got := m.Runtime.StdoutString(); got != want(name) {
				t.Fatalf("stdout %q, want each line once: %q", got, want(name))
			}
		})
	}
}

// Cleanup stops the run, and is safe for a run that never started.
func TestCleanup(t *testing.T) {
	dir := t.TempDir()
	c := plugintest.Direct(&Plugin{})
	j := job(t, dir, "clean")
	if err := c.Cleanup(context.Background(), j); err != nil {
		t.Fatalf("cleanup of a run that never started: %v", err)
	}
	if _, err := c.Execute(context.Background(), j, plugintest.NewGatedRuntime(nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Cleanup(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := (backend{dir: dir}).Find(runName(j)); found {
		t.Fatal("the run is still there after Cleanup")
	}
}

// The plugin reads the handles it wrote before it used the envelope
// (version 0) and its own, and refuses a newer plugin's as
// outcome_unknown: the run it names may exist and is not started again.
func TestReadHandleVersions(t *testing.T) {
	for _, b := range []string{
		`{"run":"job-x-1","written":3}`,
		`{"handle_version":1,"state":{"run":"job-x-1","written":3}}`,
	} {
		h, err := readHandle([]byte(b))
		if err != nil || h != (handle{Run: "job-x-1", Written: 3}) {
			t.Errorf("readHandle(%s) = %+v, %v", b, h, err)
		}
	}
	_, err := readHandle([]byte(`{"handle_version":2,"state":{"run":"job-x-1"}}`))
	if plugin.ClassOf(err) != plugin.OutcomeUnknown {
		t.Errorf("a newer handle: %v (class %s), want outcome_unknown", err, plugin.ClassOf(err))
	}
}
