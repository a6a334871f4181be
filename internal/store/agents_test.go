package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

func TestHeartbeatTellsDeletedRowFromSuperseded(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	a := register(t, st, "a")
	submit(t, st, "c")
	got, err := st.Claim(ctx, a, 5, []string{"c"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	leases := []store.Lease{{JobID: got[0].Job.ID, Lease: got[0].Lease}}

	// An operator deletes the row. The answer says so, renews nothing and
	// lists no lease.
	_, err = st.Pool().Exec(ctx, `UPDATE active_jobs SET last_heartbeat = now() - interval '1 minute'`)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `DELETE FROM agents WHERE name = 'a'`)
	require.NoError(t, err)
	res, err := st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	assert.False(t, res.Registered)
	assert.True(t, res.Missing)
	assert.Empty(t, res.Held)
	var silent float64
	require.NoError(t, st.Pool().QueryRow(ctx,
		`SELECT extract(epoch FROM now() - last_heartbeat) FROM active_jobs`).Scan(&silent))
	assert.GreaterOrEqual(t, silent, 59.0, "a heartbeat without its agents row renews no lease")

	// Registering again restores the row under the same generation, with the
	// data given. The next heartbeat renews the lease.
	reg := store.Registration{Holder: a, Version: "v9", Capacity: 7, Commands: []string{"c"},
		Plugins: json.RawMessage(`{"noop":{"version":"1"}}`)}
	written, err := st.RegisterAgain(ctx, reg, "draining")
	require.NoError(t, err)
	assert.True(t, written)
	var gen, version, state string
	var capacity int
	require.NoError(t, st.Pool().QueryRow(ctx,
		`SELECT generation, version, state, capacity FROM agents WHERE name = 'a'`).Scan(&gen, &version, &state, &capacity))
	assert.Equal(t, []any{a.Generation, "v9", "draining", 7}, []any{gen, version, state, capacity})
	res, err = st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	assert.True(t, res.Registered)
	assert.False(t, res.Missing)
	require.Len(t, res.Held, 1)
	assert.Equal(t, got[0].Job.ID, res.Held[0].JobID)

	// Another process registering under the name supersedes this one, and
	// registering again never overwrites it.
	_, err = st.RegisterAgent(ctx, store.Registration{Holder: store.Holder{Name: "a", Generation: "new"}, Capacity: 1})
	require.NoError(t, err)
	res, err = st.Heartbeat(ctx, a, leases)
	require.NoError(t, err)
	assert.False(t, res.Registered)
	assert.False(t, res.Missing, "a row of another generation is not a deleted row")
	written, err = st.RegisterAgain(ctx, reg, "running")
	require.NoError(t, err)
	assert.False(t, written)
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT generation FROM agents WHERE name = 'a'`).Scan(&gen))
	assert.Equal(t, "new", gen)
}

func TestListAgentsLiveByDefaultAllOnRequest(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	busy := register(t, st, "busy")
	register(t, st, "idle")
	draining := register(t, st, "draining")
	require.NoError(t, st.SetAgentState(ctx, draining, "draining"))
	stopped := register(t, st, "stopped")
	require.NoError(t, st.SetAgentState(ctx, stopped, "stopped"))
	register(t, st, "silent")
	_, err := st.Pool().Exec(ctx, `UPDATE agents SET last_seen = now() - interval '10 minutes' WHERE name = 'silent'`)
	require.NoError(t, err)
	submit(t, st, "c")
	submit(t, st, "c")
	_, err = st.Claim(ctx, busy, 5, []string{"c"})
	require.NoError(t, err)

	// The store lists; internal/fleet.Classify (in the API) judges from
	// Seen.
	names := func(agents []store.Agent) map[string]store.AgentSeen {
		out := map[string]store.AgentSeen{}
		for _, a := range agents {
			assert.Equal(t, a.Name, a.Seen.Name)
			out[a.Name] = a.Seen
		}
		return out
	}
	live, err := st.ListAgents(ctx, store.AgentListParams{LiveWithin: time.Minute})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"busy", "draining", "idle"}, slices.Collect(maps.Keys(names(live))))
	require.Equal(t, "busy", live[0].Name, "sorted by name")
	assert.Equal(t, 2, live[0].ActiveJobs)

	all, err := st.ListAgents(ctx, store.AgentListParams{All: true, LiveWithin: time.Minute})
	require.NoError(t, err)
	seen := names(all)
	assert.ElementsMatch(t, []string{"busy", "draining", "idle", "silent", "stopped"}, slices.Collect(maps.Keys(seen)))
	assert.Equal(t, "stopped", seen["stopped"].State)
	assert.Equal(t, "draining", seen["draining"].State)
	assert.GreaterOrEqual(t, seen["silent"].SilentFor, 10*time.Minute)
	assert.True(t, seen["busy"].LockFreeSince.IsZero(), "no liveness check ran")

	// Listed within the bound given (the answering agent's stale_job). A
	// longer one lists the silent agent.
	live, err = st.ListAgents(ctx, store.AgentListParams{LiveWithin: time.Hour})
	require.NoError(t, err)
	assert.Contains(t, names(live), "silent")
}

// TestRegistrationAnnouncesTimingsAndCommands checks that an agent's row
// carries what the rest of the fleet judges it and routes submits by: its
// timings (NULL when unset, for agents older than schema v15) and, per
// command, its plugin and levers. Registering again replaces them.
func TestRegistrationAnnouncesTimingsAndCommands(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	three := 3
	reg := store.Registration{Holder: store.Holder{Name: "a", Generation: "g1"}, Capacity: 1, Commands: []string{"c"},
		CommandSpecs: map[string]store.CommandSpec{"c": {Plugin: "ecs", Limits: limits.Partial{MaxRetry: &three}}},
		Timings:      store.Timings{Keepalive: 3 * time.Second, DeadAfter: 6 * time.Second, StaleJob: 2 * time.Minute, SelfFenceAfter: 100 * time.Second}}
	_, err := st.RegisterAgent(ctx, reg)
	require.NoError(t, err)
	read := func() (keepalive, deadAfter, staleJob, fence *float64, specs map[string]store.CommandSpec) {
		t.Helper()
		var raw []byte
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT extract(epoch FROM keepalive)::float8, extract(epoch FROM dead_after)::float8,
			extract(epoch FROM stale_job)::float8, extract(epoch FROM self_fence_after)::float8, command_specs FROM agents WHERE name = 'a'`).
			Scan(&keepalive, &deadAfter, &staleJob, &fence, &raw))
		require.NoError(t, json.Unmarshal(raw, &specs))
		return
	}
	k, d, s, f, specs := read()
	assert.Equal(t, []float64{3, 6, 120, 100}, []float64{*k, *d, *s, *f})
	require.Contains(t, specs, "c")
	assert.Equal(t, "ecs", specs["c"].Plugin)
	require.NotNil(t, specs["c"].Limits.MaxRetry)
	assert.Equal(t, 3, *specs["c"].Limits.MaxRetry)

	reg.Generation, reg.Timings, reg.CommandSpecs = "g2", store.Timings{}, nil
	_, err = st.RegisterAgent(ctx, reg)
	require.NoError(t, err)
	k, d, s, f, specs = read()
	assert.Equal(t, []*float64{nil, nil, nil, nil}, []*float64{k, d, s, f}, "unset timings are not announced")
	assert.Empty(t, specs)
}

// TestLiveCommandSpecs checks which agent's spec a submit resolves with when
// live agents disagree (running before draining, then the latest started),
// and that silent, stopped and pre-v15 agents announce nothing.
func TestLiveCommandSpecs(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	spec := func(plugin string, maxRetry int) store.CommandSpec {
		return store.CommandSpec{Plugin: plugin, Limits: limits.Partial{MaxRetry: &maxRetry}}
	}
	register := func(name, state, started string, specs map[string]store.CommandSpec) {
		t.Helper()
		h := store.Holder{Name: name, Generation: "g-" + name}
		_, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, CommandSpecs: specs})
		require.NoError(t, err)
		if state != "running" {
			require.NoError(t, st.SetAgentState(ctx, h, state))
		}
		_, err = st.Pool().Exec(ctx, `UPDATE agents SET started_at = now() - $2::interval WHERE name = $1`, name, started)
		require.NoError(t, err)
	}
	register("old", "running", "1 hour", map[string]store.CommandSpec{"c": spec("ecs", 1), "d": spec("shell", 1)})
	register("new", "running", "1 minute", map[string]store.CommandSpec{"c": spec("ecs", 2)})
	register("leaving", "draining", "1 second", map[string]store.CommandSpec{"c": spec("ecs", 3), "e": spec("k8s", 3)})
	register("gone", "stopped", "1 second", map[string]store.CommandSpec{"f": spec("ecs", 4)})
	register("silent", "running", "1 second", map[string]store.CommandSpec{"g": spec("ecs", 5)})
	register("pre-v15", "running", "1 second", nil)
	register("found-dead", "running", "1 second", map[string]store.CommandSpec{"h": spec("ecs", 6)})
	_, err := st.Pool().Exec(ctx, `UPDATE agents SET last_seen = now() - interval '10 minutes' WHERE name = 'silent'`)
	require.NoError(t, err)
	// The liveness check found its name lock free and it silent since: dead,
	// whatever stale_job says.
	_, err = st.Pool().Exec(ctx, `UPDATE agents SET last_seen = now() - interval '5 seconds', lock_free_since = now() - interval '4 seconds', lock_found_dead = true WHERE name = 'found-dead'`)
	require.NoError(t, err)

	got, err := st.LiveCommandSpecs(ctx, 2*time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"c", "d", "e"}, keys(got))
	assert.Equal(t, "new", got["c"].Agent, "running before draining, then the latest started")
	assert.Equal(t, 2, *got["c"].Spec.Limits.MaxRetry)
	assert.Equal(t, []string{"leaving", "new", "old"}, got["c"].Agents)
	assert.Equal(t, "old", got["d"].Agent)
	assert.Equal(t, "shell", got["d"].Spec.Plugin)
	assert.Equal(t, "leaving", got["e"].Agent, "a draining agent's spec when it is the only one")

	set, errs := got["c"].Spec.ResolveLimits(limits.Partial{})
	require.Empty(t, errs)
	assert.Equal(t, 2, set.MaxRetry)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// BenchmarkLiveCommandSpecs reads the specs of 200 live agents serving 3
// commands each, next to a submit, the write a routed submit adds it to.
func BenchmarkLiveCommandSpecs(b *testing.B) {
	ctx := context.Background()
	st := store.New(pgtest.DB(b))
	max := 5
	for i := range 200 {
		specs := map[string]store.CommandSpec{}
		for c := range 3 {
			specs[fmt.Sprintf("cmd-%d", (i+c)%20)] = store.CommandSpec{Plugin: "ecs", Defaults: limits.Defaults(), Max: limits.Partial{MaxRetry: &max}}
		}
		h := store.Holder{Name: fmt.Sprintf("agent-%03d", i), Generation: "g"}
		if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: 1, CommandSpecs: specs}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.LiveCommandSpecs(ctx, 2*time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("submit", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := st.Submit(ctx, store.SubmitParams{Command: "cmd-1", Plugin: "ecs", Limits: limits.Defaults()}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
