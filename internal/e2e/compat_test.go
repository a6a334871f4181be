package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// compatBase is the earlier commit whose agent and plugins run beside
// today's in the compatibility tests (`make compat`). It is the last commit
// before the plugin protocol was negotiated by version. Its agent serves a
// plain go-plugin handshake and its SDK serves no version set, and its
// schema (version 18) is today's. docs/plugins.md's compatibility table
// names it. Move it forward only with that table. A schema change that an
// agent of this commit cannot run against makes these tests fail, on
// purpose: a rolling upgrade runs old and new agents on one database.
const compatBase = "53e65d3baf97731812634b42312eeb6b3a88a9fa"

// compatBuilds returns the binaries of compatBase and today's. Both plugin
// directories hold only the shell and resumable plugins, the ones the
// harness's config names.
func compatBuilds(t *testing.T) (old, cur Binaries) {
	t.Helper()
	repo, err := bintest.RepoRoot()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	old, err = BuildAt(ctx, repo, compatBase, filepath.Join(repo, ".tether", "compat"))
	require.NoError(t, err, "building the agent and plugins of commit %s", compatBase)

	cur = Binaries{Tether: bins.Tether, PluginDir: t.TempDir()}
	for _, name := range []string{"shell", "resumable"} {
		require.NoError(t, os.Symlink(bintest.PluginPath(bins.PluginDir, name), bintest.PluginPath(cur.PluginDir, name)))
	}
	return old, cur
}

// configWithPlugins writes a copy of the harness's config whose plugin_dir
// is dir and returns its path.
func (h *harness) configWithPlugins(dir string) string {
	h.t.Helper()
	b, err := os.ReadFile(h.cfgPath)
	require.NoError(h.t, err)
	from, to := fmt.Sprintf("plugin_dir: %q", bins.PluginDir), fmt.Sprintf("plugin_dir: %q", dir)
	require.Contains(h.t, string(b), from)
	f, err := os.CreateTemp(filepath.Dir(h.cfgPath), "tether-*.yaml")
	require.NoError(h.t, err)
	_, err = f.WriteString(strings.Replace(string(b), from, to, 1))
	require.NoError(h.t, err)
	require.NoError(h.t, f.Close())
	return f.Name()
}

// startBuild starts an agent from the agent binary of one build with the
// plugins of another, and waits until it registered.
func (h *harness) startBuild(ctx context.Context, agent, plugins Binaries, name string) *agentProc {
	h.t.Helper()
	a := h.spawnBuild(agent.Tether, h.configWithPlugins(plugins.PluginDir), name)
	h.waitRegistered(ctx, a)
	return a
}

// An agent of the earlier commit runs today's plugins, and today's agent
// runs the earlier commit's plugins: a resumable job and a shell job
// succeed, the work is started once, and each job has one final event.
func TestCompatJobsRunAcrossVersions(t *testing.T) {
	old, cur := compatBuilds(t)
	for _, pair := range []struct {
		name           string
		agent, plugins Binaries
	}{
		{"old agent, new plugins", old, cur},
		{"new agent, old plugins", cur, old},
	} {
		t.Run(pair.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			h := newHarness(t, pgtest.URL(t), fast())
			h.startBuild(ctx, pair.agent, pair.plugins, "compat")

			resumable := h.submitResumable(ctx, time.Second)
			shell := h.submitShell(ctx, 100*time.Millisecond)
			h.waitTerminal(ctx, []string{resumable, shell}, 60*time.Second)
			for _, id := range []string{resumable, shell} {
				j := h.job(ctx, id)
				assert.Equal(t, store.StatusSucceeded, j.Status, "job %s (%s): %s", id, j.Command, j.Error)
				h.checkTimeline(ctx, id)
			}
			assert.Equal(t, 1, h.startCount(resumable), "the resumable work must be started exactly once")
			assert.Equal(t, "slept\n", h.stdout(ctx, shell), "the shell job's output")
		})
	}
}

// A resumable job started by one version's agent and plugin is resumed by
// the other's after a kill -9: the upgrade (old, then new) and the rollback
// (new, then old). The handle one version checkpointed is read by the
// other, the work is started once, and the job succeeds under the second.
func TestCompatResumeAcrossVersions(t *testing.T) {
	old, cur := compatBuilds(t)
	for _, step := range []struct {
		name          string
		first, second Binaries
	}{
		{"upgrade", old, cur},
		{"rollback", cur, old},
	} {
		t.Run(step.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			tm := fast()
			tm.Keepalive = time.Second
			tm.StaleJob = 60 * time.Second // only the restart under the same name can resume it in time
			tm.OfflineAfter = 3 * time.Second
			tm.CleanInterval = time.Second
			tm.AWOLTimeout = 120 * time.Second
			h := newHarness(t, pgtest.URL(t), tm)

			a := h.startBuild(ctx, step.first, step.first, "compat")
			id := h.submitResumable(ctx, 5*time.Second)
			h.waitHandle(ctx, id, 20*time.Second)
			h.kill9(a)

			b := h.startBuild(ctx, step.second, step.second, "compat")
			resumed := h.waitEvent(ctx, id, "resumed", 20*time.Second)
			assert.Equal(t, b.gen, resumed.Generation, "the second version's agent resumes the job")
			h.waitTerminal(ctx, []string{id}, 40*time.Second)
			j := h.job(ctx, id)
			assert.Equal(t, store.StatusSucceeded, j.Status, "error: %s", j.Error)
			assert.Equal(t, 1, h.startCount(id), "the work must be started exactly once")
			final := h.checkTimeline(ctx, id)
			assert.Equal(t, b.gen, final.Generation, "the second version's agent ends the job")
		})
	}
}
