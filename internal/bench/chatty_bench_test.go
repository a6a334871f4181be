package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/bintest"
	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
)

// chattyShapes are the issue's: one job printing 100 MB as fast as it can,
// ten such jobs at once (49 MB each, 490 MB), and 100 jobs printing 1 MB
// each at once.
var chattyShapes = []struct {
	name   string
	jobs   int
	perJob int
}{
	{"1x100MB", 1, 100e6},
	{"10x49MB", 10, 49e6},
	{"100x1MB", 100, 1e6},
}

// BenchmarkChattyJobs runs shell jobs that print as fast as they can
// through a whole agent (claim.Service, the shell plugin over go-plugin,
// the log flusher, PostgreSQL) with the stream cap raised to 300 MB, and
// prints the MB/s stored end to end (submit to the last job's end), the
// agent's CPU per MB, and the peaks of its Go heap and of this process's
// RSS (the agent is all this process runs, beside a sampler). Every byte
// must be stored once. TETHER_BENCH_LOG_MB scales the bytes (default 100).
func BenchmarkChattyJobs(b *testing.B) {
	dir := shellPlugin(b)
	scale := float64(envInt("TETHER_BENCH_LOG_MB", 100)) / 100
	for _, sh := range chattyShapes {
		perJob := int(float64(sh.perJob) * scale)
		b.Run(sh.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := runChatty(b, dir, sh.jobs, perJob)
				b.ReportMetric(r.mbps, "MB/s")
				b.ReportMetric(r.cpuPerMB*1000, "agent-cpu-ms/MB")
				b.ReportMetric(r.heapMiB, "peak-heap-MiB")
				b.ReportMetric(r.rssMiB, "peak-rss-MiB")
				b.Logf("%s: %.1f MB/s, agent CPU %.1f ms/MB, peak heap %.1f MiB, peak RSS %.1f MiB", sh.name, r.mbps, r.cpuPerMB*1000, r.heapMiB, r.rssMiB)
			}
		})
	}
}

var (
	shellOnce sync.Once
	shellDir  string
	shellErr  error
)

// shellPlugin builds the shell plugin once, into a directory of its own.
func shellPlugin(b *testing.B) string {
	shellOnce.Do(func() {
		var cleanup func()
		shellDir, cleanup, shellErr = bintest.TempPlugins(context.Background(), map[string]string{"shell": "github.com/tetherjobs/tether/plugins/shell"})
		_ = cleanup // removed with the machine's temporary files: benchmarks run once per process
	})
	if shellErr != nil {
		b.Fatal(shellErr)
	}
	return shellDir
}

type chattyRound struct {
	mbps, cpuPerMB, heapMiB, rssMiB float64
}

func runChatty(b *testing.B, dir string, jobs, perJob int) chattyRound {
	b.Helper()
	ctx := context.Background()
	st := store.New(pgtest.DB(b))
	capacity := max(jobs, 10)
	h := store.Holder{Name: "chatty", Generation: "g"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: capacity, Commands: []string{"chatty"}}); err != nil {
		b.Fatal(err)
	}
	// Warnings show: a plugin that drops output says why.
	warn := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := pluginhost.New(pluginhost.Config{Dir: dir, Logger: warn})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	// base64 of random bytes: text that does not compress to nothing, in
	// lines of 100 bytes, exactly perJob of them.
	script := fmt.Sprintf("head -c %d /dev/urandom | base64 -w 99 | head -c %d", perJob*3/4+100, perJob)
	jobCtx, _ := json.Marshal(map[string]any{"script": script})
	svc := claim.New(st, m, claim.Config{
		Holder: h, Capacity: capacity, LogMaxBytes: 300e6,
		Commands: map[string]claim.Command{"chatty": {Plugin: "shell"}},
		Logger:   warn,
	})

	peaks := startPeaks(b)
	self0, _ := cpuNow()
	start := time.Now()
	for range jobs {
		if _, _, err := st.Submit(ctx, store.SubmitParams{Command: "chatty", Plugin: "shell", Context: jobCtx}); err != nil {
			b.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	waitJobsEnded(b, st)
	elapsed := time.Since(start)
	self1, _ := cpuNow()
	heap, rss := peaks.stop()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	checkStored(b, st, jobs, perJob)
	total := float64(jobs * perJob)
	return chattyRound{mbps: total / 1e6 / elapsed.Seconds(), cpuPerMB: (self1 - self0) / (total / 1e6),
		heapMiB: float64(heap) / (1 << 20), rssMiB: float64(rss) / (1 << 20)}
}

func waitJobsEnded(b *testing.B, st *store.Store) {
	b.Helper()
	for {
		var left int
		if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM active_jobs`).Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkStored fails the benchmark (its figures still print) unless every
// job succeeded with exactly perJob bytes stored: a line lost or stored
// twice shows.
func checkStored(b *testing.B, st *store.Store, jobs, perJob int) {
	b.Helper()
	rows, err := st.Pool().Query(context.Background(), `
		SELECT j.status, coalesce((SELECT sum(length(data)) FROM job_logs l WHERE l.job_id = j.id AND l.stream = 'stdout'), 0)
		FROM jobs j`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var status string
		var stored int64
		if err := rows.Scan(&status, &stored); err != nil {
			b.Fatal(err)
		}
		if status != "succeeded" || stored != int64(perJob) {
			b.Errorf("a job ended %s with %d bytes stored, want succeeded with %d", status, stored, perJob)
		}
		n++
	}
	if n != jobs {
		b.Fatalf("%d jobs, want %d", n, jobs)
	}
}

// peakSampler records the most Go heap (live and dead objects) and RSS of
// this process, every 10 ms, from its start to stop.
type peakSampler struct {
	quit       chan struct{}
	done       chan struct{}
	heap, rss  uint64
	clearedHWM bool
}

func startPeaks(b *testing.B) *peakSampler {
	b.Helper()
	p := &peakSampler{quit: make(chan struct{}), done: make(chan struct{})}
	// The kernel's own high-water mark, reset (Linux: 5 in clear_refs).
	p.clearedHWM = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	go p.run()
	return p
}

func (p *peakSampler) run() {
	defer close(p.done)
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		p.heap = max(p.heap, s[0].Value.Uint64())
		p.rss = max(p.rss, statusKB("self", "VmRSS")<<10)
		select {
		case <-p.quit:
			return
		case <-t.C:
		}
	}
}

// stop returns the peaks: the Go heap, and the RSS (the kernel's high-water
// mark where it could be reset, else the samples').
func (p *peakSampler) stop() (heap, rss uint64) {
	close(p.quit)
	<-p.done
	if p.clearedHWM {
		p.rss = max(p.rss, statusKB("self", "VmHWM")<<10)
	}
	return p.heap, p.rss
}

// statusKB reads a "kB" field of /proc/<pid>/status (0 if absent); pid
// may be "self".
func statusKB(pid, field string) uint64 {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return n
	}
	return 0
}
