package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// BenchmarkRecovery measures recovery latency: from kill -9 of an agent
// holding N running resumable jobs (under a name that does not come back, so
// the silence path runs) to each job's `released` and `resumed` event, with
// a second agent up. Times come from the database clock. The kill is stamped
// with now() read just before the signal. Reported per N: p50 and max of
// both, in seconds.
//
//	go test -race=false -run '^$' -bench Recovery -benchtime 1x ./internal/e2e
func BenchmarkRecovery(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			var released, resumed []time.Duration
			for i := 0; i < b.N; i++ {
				rel, res := recoverOnce(b, n)
				released = append(released, rel...)
				resumed = append(resumed, res...)
			}
			relP50, relMax := p50Max(released)
			resP50, resMax := p50Max(resumed)
			b.ReportMetric(relP50.Seconds(), "released-p50-s")
			b.ReportMetric(relMax.Seconds(), "released-max-s")
			b.ReportMetric(resP50.Seconds(), "resumed-p50-s")
			b.ReportMetric(resMax.Seconds(), "resumed-max-s")
			b.Logf("N=%d keepalive 1s stale_job 4s clean_interval 1s: released p50 %s max %s; resumed p50 %s max %s",
				n, relP50.Round(time.Millisecond), relMax.Round(time.Millisecond), resP50.Round(time.Millisecond), resMax.Round(time.Millisecond))
		})
	}
}

// recoverOnce runs one kill-and-recover round on a fresh database and
// returns, per job, the delay from the kill to its released and its resumed
// event.
func recoverOnce(b *testing.B, n int) (released, resumed []time.Duration) {
	b.StopTimer()
	defer b.StartTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tm := timings{
		Capacity:      n + 10,
		PollInterval:  200 * time.Millisecond,
		Keepalive:     time.Second,
		StaleJob:      4 * time.Second, // self-fence 4 − 2×1 − 0 (KillGrace) = 2×keepalive
		OfflineAfter:  3 * time.Second,
		CleanInterval: time.Second,
		AWOLTimeout:   60 * time.Second,
	}
	h := newHarness(b, pgtest.URL(b), tm)
	victim := h.startAgent(ctx, "victim")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.submitResumable(ctx, 2*time.Minute) // outlives the measurement
	}
	for _, id := range ids {
		h.waitHandle(ctx, id, 60*time.Second)
	}
	h.startAgent(ctx, "rescuer")

	b.StartTimer()
	killedAt := h.dbNow(ctx)
	h.kill9(victim)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var done int
		require.NoError(b, h.pool.QueryRow(ctx,
			`SELECT count(DISTINCT job_id) FROM job_timeline WHERE job_id = ANY($1) AND kind = 'resumed'`, ids).Scan(&done))
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs resumed 60s after the kill", done, n)
		}
		sleep(ctx, 50*time.Millisecond)
	}
	b.StopTimer()

	for _, id := range ids {
		var rel, res time.Time
		for _, e := range h.events(ctx, id) {
			if e.Kind == "released" && rel.IsZero() {
				rel = e.At
			}
			if e.Kind == "resumed" && res.IsZero() {
				res = e.At
			}
		}
		require.False(b, rel.IsZero(), "job %s resumed without a released event: %s", id, h.eventSummary(ctx, id))
		released = append(released, rel.Sub(killedAt))
		resumed = append(resumed, res.Sub(killedAt))
	}
	return released, resumed
}

func p50Max(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
