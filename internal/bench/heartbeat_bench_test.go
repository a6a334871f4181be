package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// BenchmarkHeartbeat measures one agent's heartbeat statement while it holds
// 100, 1,000 and 5,000 leases. It reports its time (median and max of 50
// ticks) and the WAL it writes per tick. Run with
// `go test -run '^$' -bench Heartbeat -benchtime 1x ./internal/bench/`.
func BenchmarkHeartbeat(b *testing.B) {
	for _, held := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				heartbeatCost(b, held)
			}
		})
	}
}

func heartbeatCost(b *testing.B, held int) {
	b.Helper()
	const ticks = 50
	ctx := context.Background()
	pool := pgtest.DB(b)
	st := store.New(pool)
	loadQueued(b, pool, "hb", "noop", "noop", held)
	vacuum(b, pool)
	h := store.Holder{Name: "hb", Generation: "hb-1"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: held, Commands: []string{"noop"}}); err != nil {
		b.Fatal(err)
	}
	var leases []store.Lease
	for len(leases) < held {
		cs, err := st.Claim(ctx, h, min(held-len(leases), 1000), []string{"noop"})
		if err != nil {
			b.Fatal(err)
		}
		if len(cs) == 0 {
			b.Fatalf("claimed %d of %d", len(leases), held)
		}
		for _, c := range cs {
			leases = append(leases, store.Lease{JobID: c.Job.ID, Lease: c.Lease})
		}
	}
	vacuum(b, pool)
	wal := func() int64 {
		var lsn int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	ds := make([]time.Duration, 0, ticks)
	b.ResetTimer()
	w0 := wal()
	for range ticks {
		t0 := time.Now()
		res, err := st.Heartbeat(ctx, h, leases)
		ds = append(ds, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Held) != held {
			b.Fatalf("heartbeat says %d of %d leases held", len(res.Held), held)
		}
	}
	walPerTick := float64(wal()-w0) / ticks
	b.StopTimer()
	slices.Sort(ds)
	median := ds[len(ds)/2]
	b.ReportMetric(float64(median.Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(walPerTick, "WAL-B/tick")
	b.Logf("heartbeat holding %d leases: median %.2f ms, max %.2f ms, WAL %.0f B per tick (%.1f B per lease)",
		held, float64(median.Microseconds())/1000, float64(ds[len(ds)-1].Microseconds())/1000, walPerTick, walPerTick/float64(held))
}
