package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/janitor"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/queries"
)

// fleetKeepalive is the simulated fleet's keepalive: one round of the bench
// is one keepalive of every agent.
const fleetKeepalive = time.Second

// fleetRounds is how many keepalives each size runs; the figures are their
// medians.
var fleetRounds = envInt("TETHER_BENCH_FLEET_ROUNDS", 7)

// fleetJobs is how many running jobs each simulated agent holds.
const fleetJobs = 5

// fleetLockSessions is how many sessions hold the agents' name locks. Each
// holds the locks of N/fleetLockSessions agents: pg_locks shows one row per
// lock either way, and a fleet of 200 sessions would not fit the test
// cluster's max_connections besides the pools.
const fleetLockSessions = 10

// BenchmarkFleet measures what the liveness check, the heartbeats and the
// janitor passes cost the database per agent in a fleet of N = 10, 50 and
// 200 simulated agents (agents rows with announced timings, real sessions
// holding their name locks, fleetJobs running jobs each). Each round is one
// keepalive: every agent runs its liveness check and its heartbeat, then its
// janitor pass (one per clean_interval in production, two keepalives by
// default; counted here per pass). It prints, per N and phase, the median
// over the rounds of statements, shared buffers (hit + read) and DB time
// (planning + execution) per agent, from pg_stat_statements (-1 when the
// server does not have it), and the ratio 200/10 per agent (target ≤ 1.5).
// `make bench-fleet`.
func BenchmarkFleet(b *testing.B) {
	sizes := []int{10, 50, 200}
	results := map[int]fleetCost{}
	for i := 0; i < b.N; i++ {
		for _, n := range sizes {
			results[n] = fleetRun(b, n)
		}
	}
	fmt.Printf("fleet cost (issue 27): per agent per keepalive (liveness, heartbeat) or per pass (janitor); medians of %d rounds; statements / shared buffers / DB ms; pg_stat_statements (-1: not loaded)\n", fleetRounds)
	fmt.Printf("%-6s %-26s %-26s %-26s\n", "N", "liveness", "heartbeat", "janitor pass")
	for _, n := range sizes {
		c := results[n]
		fmt.Printf("%-6d %-26s %-26s %-26s\n", n, c.liveness, c.heartbeat, c.pass)
	}
	lo, hi := results[sizes[0]], results[sizes[len(sizes)-1]]
	fmt.Printf("ratio %d/%d per agent: liveness %s, heartbeat %s, janitor pass %s (target ≤ 1.5)\n",
		sizes[len(sizes)-1], sizes[0], hi.liveness.ratio(lo.liveness), hi.heartbeat.ratio(lo.heartbeat), hi.pass.ratio(lo.pass))
}

// phaseCost is one phase's cost per agent.
type phaseCost struct{ statements, buffers, ms float64 }

func (p phaseCost) String() string {
	return fmt.Sprintf("%.2f / %.1f / %.3f", p.statements, p.buffers, p.ms)
}

// ratio is p / base, by buffers and by DB time.
func (p phaseCost) ratio(base phaseCost) string {
	if base.buffers <= 0 || base.ms <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (buffers), %.2f (DB time)", p.buffers/base.buffers, p.ms/base.ms)
}

type fleetCost struct{ liveness, heartbeat, pass phaseCost }

// simAgent is one simulated agent: its row, its leases and its services.
type simAgent struct {
	h      store.Holder
	leases []store.Lease
	jan    *janitor.Service
	live   *janitor.Liveness
}

func fleetRun(b *testing.B, n int) fleetCost {
	b.Helper()
	ctx := context.Background()
	admin := pgtest.DB(b)
	if _, err := admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		b.Logf("pg_stat_statements: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, admin.Config().Copy())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	st := store.New(pool)
	loadQueued(b, admin, "fleet", "work", "noop", n*fleetJobs)
	agents := make([]*simAgent, n)
	timings := store.Timings{Keepalive: fleetKeepalive, DeadAfter: 2 * fleetKeepalive, StaleJob: 120 * time.Second}
	for i := range agents {
		h := store.Holder{Name: fmt.Sprintf("agent-%03d", i), Generation: "g1"}
		if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: fleetJobs, Commands: []string{"work"},
			Plugins: []byte(`{"noop":{"version":"1","capabilities":["resume"]}}`), Timings: timings}); err != nil {
			b.Fatal(err)
		}
		a := &simAgent{h: h}
		cs, err := st.Claim(ctx, h, fleetJobs, []string{"work"})
		if err != nil || len(cs) != fleetJobs {
			b.Fatalf("claiming for %s: %d jobs, %v", h.Name, len(cs), err)
		}
		for _, c := range cs {
			if _, err := st.MarkRunning(ctx, c.Job.ID, c.Lease, "bench"); err != nil {
				b.Fatal(err)
			}
			a.leases = append(a.leases, store.Lease{JobID: c.Job.ID, Lease: c.Lease})
		}
		// clean_interval = one round, so each round's pass phase is one
		// interval of the fleet: the agents' loops each take a Turn.
		a.jan = janitor.New(pool, noopPlugins{}, janitor.Config{Holder: h, Keepalive: fleetKeepalive, CleanInterval: fleetKeepalive, Metrics: metrics.New(),
			Logger: slog.New(slog.DiscardHandler)})
		a.live = janitor.NewLiveness(a.jan, janitor.LivenessConfig{Keepalive: fleetKeepalive, DeadAfter: 2 * fleetKeepalive})
		agents[i] = a
	}
	holdNameLocks(b, admin, agents)
	vacuum(b, admin)

	explainLockFree(b, admin, n)

	var live, beat, pass []phaseCost
	for r := range fleetRounds {
		start := time.Now()
		live = append(live, measurePhase(b, admin, n, func() {
			for _, a := range agents {
				if _, err := a.live.Check(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}))
		beat = append(beat, measurePhase(b, admin, n, func() {
			for _, a := range agents {
				if _, err := st.Heartbeat(ctx, a.h, a.leases); err != nil {
					b.Fatal(err)
				}
			}
		}))
		pass = append(pass, measurePhase(b, admin, n, func() {
			for _, a := range agents {
				if _, _, err := a.jan.Turn(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}))
		if r < fleetRounds-1 {
			time.Sleep(time.Until(start.Add(fleetKeepalive))) // the next keepalive
		}
	}
	return fleetCost{liveness: medianCost(live), heartbeat: medianCost(beat), pass: medianCost(pass)}
}

// holdNameLocks takes every agent's name lock with the agent's own
// statement, on fleetLockSessions sessions kept open until the benchmark
// ends.
func holdNameLocks(b *testing.B, admin *pgxpool.Pool, agents []*simAgent) {
	b.Helper()
	ctx := context.Background()
	for s := range fleetLockSessions {
		conn, err := pgx.ConnectConfig(ctx, admin.Config().ConnConfig.Copy())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close(context.Background()) })
		for i := s; i < len(agents); i += fleetLockSessions {
			var ok bool
			if err := conn.QueryRow(ctx, queries.Get("agent_name_lock"), agents[i].h.Name).Scan(&ok); err != nil || !ok {
				b.Fatalf("taking the name lock of %s: %v %v", agents[i].h.Name, ok, err)
			}
		}
	}
}

// explainLockFree prints the liveness check's plan at n agents, as EXPLAIN
// (ANALYZE, BUFFERS) shows it: the shape of the anti join and how many rows
// it filtered.
func explainLockFree(b *testing.B, admin *pgxpool.Pool, n int) {
	b.Helper()
	st := queries.Named("agents_lock_free")
	rows, err := admin.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) "+st.SQL,
		st.Args(map[string]any{"self_name": "agent-000"})...)
	if err != nil {
		b.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("agents_lock_free.sql at N = %d:\n", n)
	for _, l := range plan {
		fmt.Printf("  %s\n", l)
	}
}

// measurePhase runs fn and returns what its statements cost the database
// per agent (pg_stat_statements; -1 each when it is not loaded).
func measurePhase(b *testing.B, admin *pgxpool.Pool, agents int, fn func()) phaseCost {
	b.Helper()
	ctx := context.Background()
	_, err := admin.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
	stats := err == nil
	fn()
	if !stats {
		return phaseCost{-1, -1, -1}
	}
	var c phaseCost
	err = admin.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0)::float8,
		       coalesce(sum(shared_blks_hit + shared_blks_read), 0)::float8,
		       coalesce(sum(total_exec_time + total_plan_time), 0)::float8
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%'
		  AND upper(query) NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK')`).Scan(&c.statements, &c.buffers, &c.ms)
	if err != nil {
		b.Fatal(err)
	}
	a := float64(agents)
	return phaseCost{c.statements / a, c.buffers / a, c.ms / a}
}

// medianCost is the median of each figure over the rounds.
func medianCost(cs []phaseCost) phaseCost {
	med := func(f func(phaseCost) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return phaseCost{
		statements: med(func(c phaseCost) float64 { return c.statements }),
		buffers:    med(func(c phaseCost) float64 { return c.buffers }),
		ms:         med(func(c phaseCost) float64 { return c.ms }),
	}
}

// noopPlugins is a janitor's plugins with the noop plugin, which resumes,
// and a Cleanup that does nothing.
type noopPlugins struct{}

func (noopPlugins) Info(name string) (plugin.Info, bool) {
	return plugin.Info{Name: "noop", Capabilities: []string{plugin.CapResume}}, name == "noop"
}

func (p noopPlugins) Infos() map[string]plugin.Info {
	i, _ := p.Info("noop")
	return map[string]plugin.Info{"noop": i}
}

func (noopPlugins) Cleanup(context.Context, string, *plugin.Job) error { return nil }
