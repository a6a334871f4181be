package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/api"
	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/queries"
)

// resumePlugins is a janitor's plugins: every plugin resumes, and Cleanup
// does nothing.
type resumePlugins struct{}

func (resumePlugins) Info(name string) (plugin.Info, bool) {
	return plugin.Info{Name: name, Capabilities: []string{plugin.CapResume}}, true
}
func (resumePlugins) Infos() map[string]plugin.Info                      { return nil }
func (resumePlugins) Cleanup(context.Context, string, *plugin.Job) error { return nil }

// The views judge agents by the rule the janitor acts by. An agent whose
// lock session closes and whose heartbeats stop (kill -9) shows dead in GET
// /api/v1/agents, leaves the command's live agents in GET /api/v1/commands
// and in the live-agents gauge as soon as the liveness check releases its
// job, not after stale_job. A cleanly stopped agent shows stopped, not
// stale. A frozen agent (heartbeats stop, its lock held) shows late.
func TestViewsShowTheJanitorsVerdict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const keepalive, deadAfter = 200 * time.Millisecond, 500 * time.Millisecond
	pool := pgtest.DB(t)
	st := store.New(pool)
	e := newEnv(t, func(o *api.Options) {
		o.Store, o.Keepalive, o.DeadAfter, o.StaleJob = st, keepalive, deadAfter, time.Minute
	})
	timings := store.Timings{Keepalive: keepalive, DeadAfter: deadAfter, StaleJob: time.Minute}
	register := func(name string) store.Holder {
		h := store.Holder{Name: name, Generation: name + "-g1"}
		_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 5, Commands: []string{"hello"},
			Plugins: json.RawMessage(`{"shell":{"version":"1","capabilities":["resume"]}}`), Timings: timings})
		require.NoError(t, err)
		return h
	}
	lockName := func(name string) *pgx.Conn {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		var ok bool
		require.NoError(t, conn.QueryRow(ctx, queries.Get("agent_name_lock"), name).Scan(&ok))
		require.True(t, ok)
		return conn
	}
	checker := register("checker")
	victim := register("victim")
	frozen := register("frozen")
	quitter := register("quitter")
	victimLock := lockName("victim")
	lockName("frozen")
	require.NoError(t, st.SetAgentState(ctx, quitter, "stopped"))
	j := e.submit(t, `{"command":"hello"}`)
	cs, err := st.Claim(ctx, victim, 1, []string{"hello"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	_, err = st.MarkRunning(ctx, j.ID, cs[0].Lease, "test")
	require.NoError(t, err)
	// The frozen agent last heartbeat 2 s ago (10 of its keepalives).
	_, err = pool.Exec(ctx, `UPDATE agents SET last_seen = now() - interval '2 seconds' WHERE name = $1`, frozen.Name)
	require.NoError(t, err)

	liveness := func() map[string]wire.Agent {
		t.Helper()
		list := decode[wire.AgentList](t, e.do(t, "GET", "/api/v1/agents?all=true", ""))
		out := map[string]wire.Agent{}
		for _, a := range list.Agents {
			out[a.Name] = a
		}
		return out
	}
	served := func() []string {
		t.Helper()
		list := decode[wire.CommandList](t, e.do(t, "GET", "/api/v1/commands", ""))
		for _, c := range list.Commands {
			if c.Name == "hello" {
				return c.Agents
			}
		}
		return nil
	}
	gauge := func() int {
		t.Helper()
		stats, err := janitor.QueueStats(ctx, pool, []string{"hello"}, fleet.Timings{Keepalive: keepalive, StaleJob: time.Minute})
		require.NoError(t, err)
		require.Len(t, stats, 1)
		return stats[0].Agents
	}

	// Before: the victim heartbeats and holds its lock.
	_, err = st.Heartbeat(ctx, victim, []store.Lease{{JobID: j.ID, Lease: cs[0].Lease}})
	require.NoError(t, err)
	before := liveness()
	assert.Equal(t, "live", before["victim"].Liveness, before["victim"].Reason)
	assert.Equal(t, "stopped", before["quitter"].Liveness, "a clean stop is not stale")
	assert.Equal(t, "stopped cleanly", before["quitter"].Reason)
	assert.Equal(t, "late", before["frozen"].Liveness)
	assert.Contains(t, before["frozen"].Reason, "name lock held")
	assert.True(t, before["frozen"].Live, "a late agent still counts, as the janitor counts it")
	assert.Contains(t, served(), "victim")
	assert.Equal(t, 3, gauge(), "checker, victim, frozen")

	// kill -9: the lock session ends, the heartbeats stop. The checker's
	// liveness check acts; the views say so at once.
	checked, acted := make(chan janitor.Checked, 100), make(chan janitor.Acted, 100)
	jan := janitor.New(pool, resumePlugins{}, janitor.Config{Holder: checker, Keepalive: keepalive, StaleJob: time.Minute,
		Metrics: metrics.New(), Logger: slog.New(slog.DiscardHandler)})
	lv := janitor.NewLiveness(jan, janitor.LivenessConfig{Keepalive: keepalive, DeadAfter: deadAfter,
		TestSignals: janitor.LivenessSignals{Checked: checked, Acted: acted}})
	require.NoError(t, victimLock.Close(ctx))
	require.NoError(t, lv.Start(ctx))
	t.Cleanup(lv.Stop)
	var a janitor.Acted
	for a.Agent != "victim" {
		select {
		case a = <-acted:
		case <-checked:
		case <-ctx.Done():
			t.Fatal("the victim's job was not released")
		}
	}
	require.Equal(t, 1, a.Released)
	after := liveness()
	assert.Equal(t, "dead", after["victim"].Liveness, after["victim"].Reason)
	assert.Regexp(t, `^name lock free since \S+, silent \d+s \(dead_after 500ms\)$`, after["victim"].Reason)
	assert.False(t, after["victim"].Live)
	assert.NotContains(t, served(), "victim")
	assert.Equal(t, 2, gauge(), "the checker and the frozen agent (late still counts), not the dead one")
	assert.Equal(t, "stopped", after["quitter"].Liveness)
}
