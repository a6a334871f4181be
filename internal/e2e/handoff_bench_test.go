package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// BenchmarkHandoff measures the drain's handoff. Agent A holds N running
// resumable jobs, agent B is idle, A gets SIGTERM. Per job: the gap from
// its `released` (handoff) event to its `resumed` event, by the database
// clock. And from the signal (the database's now() read just before it) to
// the last resume and to A's exit. stale_job is 60 s, so a janitor release
// cannot be mistaken for a handoff. poll_interval is the default 1 s, so a
// resume faster than that came from the release's NOTIFY.
//
//	go test -race=false -run '^$' -bench Handoff -benchtime 1x ./internal/e2e
func BenchmarkHandoff(b *testing.B) {
	const n = 100
	var gaps, lastResumes, exits []time.Duration
	for i := 0; i < b.N; i++ {
		g, last, exit := handoffOnce(b, n)
		gaps = append(gaps, g...)
		lastResumes = append(lastResumes, last)
		exits = append(exits, exit)
	}
	gapP50, gapMax := p50Max(gaps)
	_, lastMax := p50Max(lastResumes)
	_, exitMax := p50Max(exits)
	b.ReportMetric(gapP50.Seconds(), "gap-p50-s")
	b.ReportMetric(gapMax.Seconds(), "gap-max-s")
	b.ReportMetric(lastMax.Seconds(), "signal-to-last-resume-s")
	b.ReportMetric(exitMax.Seconds(), "signal-to-exit-s")
	b.Logf("N=%d poll_interval 1s stale_job 60s: released→resumed p50 %s max %s; signal→last resume %s; signal→exit %s",
		n, gapP50.Round(time.Millisecond), gapMax.Round(time.Millisecond), lastMax.Round(time.Millisecond), exitMax.Round(time.Millisecond))
}

// handoffOnce runs one drain on a fresh database and returns the per-job
// release→resume gaps, the delay from the signal to the last resume, and
// from the signal to the agent's exit.
func handoffOnce(b *testing.B, n int) (gaps []time.Duration, lastResume, exit time.Duration) {
	b.StopTimer()
	defer b.StartTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tm := timings{
		Capacity:      n + 10,
		PollInterval:  time.Second,
		Keepalive:     time.Second,
		StaleJob:      60 * time.Second,
		OfflineAfter:  3 * time.Second,
		CleanInterval: time.Second,
		AWOLTimeout:   120 * time.Second,
	}
	h := newHarness(b, pgtest.URL(b), tm)
	// Cleanup runs only after the last iteration. Stop this round's agents
	// and work now, or their connections exhaust the test cluster's
	// max_connections with -benchtime > 1x.
	defer h.killAll()
	a := h.startAgent(ctx, "leaving", drainEnv(30*time.Second, "immediate")...)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.submitResumable(ctx, 2*time.Minute) // outlives the measurement
	}
	for _, id := range ids {
		h.waitHandle(ctx, id, 60*time.Second)
	}
	h.startAgent(ctx, "staying")

	b.StartTimer()
	signaledAt := h.dbNow(ctx)
	wallSignal := time.Now()
	h.signal(a, syscall.SIGTERM)
	require.Equal(b, 0, h.waitExit(a, 30*time.Second), "exit code of the drained agent")
	exit = time.Since(wallSignal)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var done int
		require.NoError(b, h.pool.QueryRow(ctx,
			`SELECT count(DISTINCT job_id) FROM job_timeline WHERE job_id = ANY($1) AND kind = 'resumed'`, ids).Scan(&done))
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs resumed 60s after the signal", done, n)
		}
		sleep(ctx, 50*time.Millisecond)
	}
	b.StopTimer()

	for _, id := range ids {
		pairs := handoffs(h.events(ctx, id), a.name)
		require.Len(b, pairs, 1, "job %s: one handoff expected: %s", id, h.eventSummary(ctx, id))
		rel, res := pairs[0][0], pairs[0][1]
		require.NotZero(b, res.ID, "job %s: not resumed after its handoff: %s", id, h.eventSummary(ctx, id))
		gaps = append(gaps, res.At.Sub(rel.At))
		lastResume = max(lastResume, res.At.Sub(signaledAt))
		require.Equal(b, 1, h.startCount(id), "job %s: work starts", id)
	}
	return gaps, lastResume, exit
}
