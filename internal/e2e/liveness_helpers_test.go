package e2e

// What the name-lock liveness tests (liveness_test.go) and benchmark
// (liveness_bench_test.go) share: extra agent settings in the harness's
// config, the agent's name lock as pg_locks shows it, and the leases and
// early actions the tests compare.

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
)

// earlyReason is what an early action (release reason, requeue message)
// says. The name lock was seen free.
const earlyReason = "name lock free"

// livenessTimings: keepalive 500ms, dead_after 1s (set with
// setAgentYAML), stale_job 20s, so an early release (about dead_after +
// keepalive after a kill) cannot be mistaken for the stale_job path.
// offline_after is long too. Only the liveness check may requeue early.
func livenessTimings() timings {
	tm := fast()
	tm.Keepalive = 500 * time.Millisecond
	tm.StaleJob = 20 * time.Second
	tm.OfflineAfter = 10 * time.Second
	tm.CleanInterval = time.Second
	tm.AWOLTimeout = 120 * time.Second
	return tm
}

const livenessDeadAfter = time.Second

// setAgentYAML adds settings (key: value lines) to the agent section of
// the harness's config, for keys the timings do not cover (dead_after,
// name_lock_liveness). Agents started afterwards read them.
func (h *harness) setAgentYAML(lines ...string) {
	h.t.Helper()
	b, err := os.ReadFile(h.cfgPath)
	require.NoError(h.t, err)
	var extra strings.Builder
	for _, l := range lines {
		extra.WriteString("  " + l + "\n")
	}
	cfg := strings.Replace(string(b), "agent:\n", "agent:\n"+extra.String(), 1)
	require.NotEqual(h.t, string(b), cfg, "the harness config has no agent section")
	require.NoError(h.t, os.WriteFile(h.cfgPath, []byte(cfg), 0o600))
}

// nameLockSQL finds the backend holding an agent's name lock: the two-key
// advisory lock of queries/agent_name_lock.sql (objsubid 2), granted, in
// this database.
const nameLockSQL = `SELECT pid FROM pg_locks
	WHERE locktype = 'advisory' AND classid = hashtext('tether-agent-name')::oid AND objid = hashtext($1)::oid
	  AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// nameLockPID is the backend pid holding name's lock, 0 when it is free.
func (h *harness) nameLockPID(ctx context.Context, name string) int {
	h.t.Helper()
	rows, err := h.pool.Query(ctx, nameLockSQL, name)
	require.NoError(h.t, err, "reading agent %s's name lock from pg_locks", name)
	defer rows.Close()
	var pid int
	for rows.Next() {
		require.NoError(h.t, rows.Scan(&pid))
	}
	require.NoError(h.t, rows.Err())
	return pid
}

// waitNameLock waits until name's lock is held by a backend other than
// not (0: any) and returns its pid.
func (h *harness) waitNameLock(ctx context.Context, name string, not int, within time.Duration) int {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if pid := h.nameLockPID(ctx, name); pid != 0 && pid != not {
			return pid
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("agent %s's name lock not held (by a backend other than %d) after %s", name, not, within)
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// leases is each job's holder and lease in active_jobs, "name/generation/lease".
func (h *harness) leases(ctx context.Context, ids []string) map[string]string {
	h.t.Helper()
	rows, err := h.pool.Query(ctx, `SELECT job_id, coalesce(agent_name, '-'), coalesce(agent_generation, '-'), lease
		FROM active_jobs WHERE job_id = ANY($1)`, ids)
	require.NoError(h.t, err, "reading the jobs' leases")
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, name, gen string
		var lease int64
		require.NoError(h.t, rows.Scan(&id, &name, &gen, &lease))
		out[id] = fmt.Sprintf("%s/%s/%d", name, gen, lease)
	}
	require.NoError(h.t, rows.Err())
	return out
}

// moves lists the jobs' released and requeued events, "job kind message".
func (h *harness) moves(ctx context.Context, ids []string) []string {
	h.t.Helper()
	rows, err := h.pool.Query(ctx, `SELECT job_id, kind, message FROM job_timeline
		WHERE job_id = ANY($1) AND kind IN ('released', 'requeued') ORDER BY id`, ids)
	require.NoError(h.t, err, "reading the jobs' released and requeued events")
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, kind, msg string
		require.NoError(h.t, rows.Scan(&id, &kind, &msg))
		out = append(out, fmt.Sprintf("%s %s %q", id, kind, msg))
	}
	require.NoError(h.t, rows.Err())
	return out
}

// assertStill watches the jobs for window and fails at the first release,
// requeue or lease change against before (leases read earlier).
func (h *harness) assertStill(ctx context.Context, ids []string, before map[string]string, window time.Duration, what string) {
	h.t.Helper()
	require.Len(h.t, before, len(ids), "every job must hold a lease before %s", what)
	end := time.Now().Add(window)
	for {
		if mv := h.moves(ctx, ids); len(mv) > 0 {
			h.t.Fatalf("%s: %d jobs released or requeued:\n%s", what, len(mv), strings.Join(mv, "\n"))
		}
		if now := h.leases(ctx, ids); !maps.Equal(now, before) {
			var diff []string
			for _, id := range slices.Sorted(maps.Keys(before)) {
				if now[id] != before[id] {
					diff = append(diff, fmt.Sprintf("%s: %s → %s", id, before[id], now[id]))
				}
			}
			h.t.Fatalf("%s: leases changed:\n%s", what, strings.Join(diff, "\n"))
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// lastSeen is the agents row's last_seen (database clock).
func (h *harness) lastSeen(ctx context.Context, name string) time.Time {
	h.t.Helper()
	var t time.Time
	require.NoError(h.t, h.pool.QueryRow(ctx, `SELECT last_seen FROM agents WHERE name = $1`, name).Scan(&t),
		"reading agent %s's last_seen", name)
	return t
}

// waitSeenAfter waits until name has heartbeat after t.
func (h *harness) waitSeenAfter(ctx context.Context, name string, t time.Time, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for !h.lastSeen(ctx, name).After(t) {
		if time.Now().After(deadline) {
			h.t.Fatalf("agent %s has not heartbeat since %s after %s", name, t.Format(time.RFC3339Nano), within)
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// assertNoAgentSaid asserts no agent's output mentions s: no liveness
// check logged an agent dead.
func (h *harness) assertNoAgentSaid(s string) {
	h.t.Helper()
	h.mu.Lock()
	agents := slices.Clone(h.agents)
	h.mu.Unlock()
	for _, a := range agents {
		if out := a.out.String(); strings.Contains(out, s) {
			i := strings.Index(out, s)
			h.t.Errorf("agent %s logged %q: …%s", a.name, s, out[max(0, i-300):min(len(out), i+300)])
		}
	}
}

// metric reads one unlabelled sample from the agent's /metrics.
func (h *harness) metric(ctx context.Context, a *agentProc, name string) float64 {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.apiAddr(ctx, a)+"/metrics", nil)
	require.NoError(h.t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err, "reading agent %s's metrics", a.name)
	defer resp.Body.Close()
	require.Equal(h.t, http.StatusOK, resp.StatusCode, "agent %s's /metrics", a.name)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(h.t, err, "metric %s of agent %s", name, a.name)
			return f
		}
	}
	require.NoError(h.t, sc.Err())
	h.t.Fatalf("agent %s exports no %s", a.name, name)
	return 0
}

// waitGroupGone waits until the shell job's process group has no live
// process (its Cleanup ran).
func (h *harness) waitGroupGone(ctx context.Context, id string, within time.Duration) {
	h.t.Helper()
	pgid := h.shellPGID(id)
	if pgid == 0 {
		h.t.Errorf("shell job %s never started", id)
		return
	}
	deadline := time.Now().Add(within)
	for len(groupMembers(pgid)) > 0 {
		if time.Now().After(deadline) {
			h.t.Errorf("shell job %s: process group %d still has live processes %v after %s: %s", id, pgid, groupMembers(pgid), within, h.eventSummary(ctx, id))
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}
