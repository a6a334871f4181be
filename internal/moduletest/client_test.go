// Package moduletest builds examples/client, a module of its own that uses
// tether only through pkg/client and pkg/api, as another team's program
// would, and runs it against a real API server.
package moduletest

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// goCmd runs the go tool in the example module. -mod=mod lets it resolve
// the module graph from the module cache. GOPROXY=off keeps the test off
// the network: everything it needs, the main module needed first.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	goBin, err := bintest.GoTool()
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s in %s: %s", strings.Join(args, " "), dir, stderr.String())
	return string(out)
}

// build vets and builds the example and returns its binary.
func build(t *testing.T) (dir, bin string) {
	t.Helper()
	root, err := bintest.RepoRoot()
	require.NoError(t, err)
	dir = filepath.Join(root, "examples", "client")
	before := modFiles(t, dir)
	goCmd(t, dir, "vet", ".")
	bin = filepath.Join(t.TempDir(), "client")
	goCmd(t, dir, "build", "-o", bin, ".")
	// -mod=mod would quietly fix an untidy go.mod or go.sum in the
	// checkout. Those must be committed as the build needs them.
	assert.Equal(t, before, modFiles(t, dir), "examples/client: go.mod or go.sum changed in the build; run go mod tidy there and commit")
	return dir, bin
}

func modFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		b.Write(data)
	}
	return b.String()
}

// The program builds outside the module and links neither the server, its
// database driver and metrics, nor any internal package.
func TestExampleLinksOnlyTheClient(t *testing.T) {
	dir, bin := build(t)
	mods := strings.Split(strings.TrimSpace(goCmd(t, dir, "list", "-m", "all")), "\n")
	st, err := os.Stat(bin)
	require.NoError(t, err)
	t.Logf("examples/client: go list -m all lists %d modules; the binary is %.1f MB", len(mods), float64(st.Size())/1e6)
	// pkg/client is a module of its own: a client program's module graph is
	// it, the wire types and the client's test dependency (testify), not the
	// agent's.
	for _, m := range mods[1:] {
		path := strings.Fields(m)[0]
		switch path {
		case "github.com/tetherjobs/tether/pkg/api", "github.com/tetherjobs/tether/pkg/client",
			"github.com/stretchr/testify", "github.com/davecgh/go-spew", "github.com/pmezard/go-difflib", "gopkg.in/yaml.v3":
		default:
			t.Errorf("examples/client's module graph holds %s: a client program should need only pkg/client and pkg/api", m)
		}
	}

	deps := strings.Fields(goCmd(t, dir, "list", "-deps", "."))
	require.Contains(t, deps, "github.com/tetherjobs/tether/pkg/client", "the check would see nothing")
	for _, d := range deps {
		for _, banned := range []string{"github.com/jackc/pgx", "github.com/prometheus", "github.com/tetherjobs/tether/internal/"} {
			assert.False(t, strings.HasPrefix(d, banned), "examples/client depends on %s", d)
		}
	}
}

// The program submits a job with limits, follows it to its failure,
// requeues it and follows it to success, against a real API server on
// PostgreSQL. The test plays the agent that runs the job.
func TestExampleRunsAgainstTheAPI(t *testing.T) {
	_, bin := build(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st := store.New(pgtest.DB(t))
	srv := httptest.NewServer(api.New(api.Options{
		Store:    st,
		Commands: map[string]config.Command{"hello": {Plugin: "shell"}},
		Logger:   slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(srv.Close)

	cmd := exec.CommandContext(ctx, bin, "-server", srv.URL, "-command", "hello", "-key", "moduletest")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	h := store.Holder{Name: "agent-1", Generation: "gen-1"}
	_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, Commands: []string{"hello"}})
	require.NoError(t, err)
	task := store.Resource{Kind: "ecs_task", Name: "arn:aws:ecs:eu-west-1:123456789012:task/c/abc"}
	claim := func() store.Claimed {
		t.Helper()
		for {
			claimed, err := st.Claim(ctx, h, 1, []string{"hello"})
			require.NoError(t, err)
			if len(claimed) == 1 {
				return claimed[0]
			}
			select {
			case err := <-exited:
				t.Fatalf("the program exited before its job ran: %v\n%s%s", err, stdout.String(), stderr.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	first := claim()
	_, err = st.MarkRunning(ctx, first.Job.ID, first.Lease, "")
	require.NoError(t, err)
	require.NoError(t, st.CheckpointDescribed(ctx, store.LogBatch{JobID: first.Job.ID, Lease: first.Lease}, 0, []byte("h"),
		&store.Described{Holder: h, Attempt: first.Job.Attempt, Resources: []store.Resource{task}}))
	require.NoError(t, st.Finish(ctx, h, first.Job.ID, first.Lease, store.Outcome{Status: store.StatusFailed, Error: "exit status 3", ErrorClass: "permanent"}))

	second := claim()
	require.Equal(t, first.Job.ID, second.Job.ID, "the requeued job runs again")
	require.NoError(t, st.Finish(ctx, h, second.Job.ID, second.Lease, store.Outcome{Status: store.StatusSucceeded}))

	select {
	case err := <-exited:
		require.NoError(t, err, "%s%s", stdout.String(), stderr.String())
	case <-ctx.Done():
		t.Fatalf("the program did not end: %s%s", stdout.String(), stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	id := first.Job.ID
	out := strings.Join(lines, "\n")
	t.Logf("examples/client said:\n%s", out)
	assert.Contains(t, lines, "submitted "+id+" (created true, max_retry 0, active_timeout 10m0s)")
	assert.Contains(t, lines, "finished "+id+": failed: exit status 3 [permanent]")
	assert.Contains(t, lines, "resource ecs_task "+task.Name)
	assert.Contains(t, lines, "events end: failed (attempt 1)")
	assert.Contains(t, lines, "requeued "+id+": attempt 2, queued")
	failed, requeued, succeeded := index(lines, "finished "+id+": failed"), index(lines, "requeued "+id), index(lines, "finished "+id+": succeeded")
	assert.True(t, failed >= 0 && failed < requeued && requeued < succeeded, "failed, requeued, then succeeded")
}

// index returns the index of the first line starting with prefix, or -1.
func index(lines []string, prefix string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}
