package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/internal/store"
)

// BenchmarkHeldJobs holds n long jobs at once on one agent (the noop
// plugin over go-plugin, each call writing a line, checkpointing and then
// waiting for its cancel, as a resumable remote job does) and prints the RSS the agent (this process) and the plugin process
// gained for them, in all and per held job. TETHER_BENCH_HELD lists the n
// (default 100,1000,5000).
func BenchmarkHeldJobs(b *testing.B) {
	for _, n := range envInts("TETHER_BENCH_HELD", []int{100, 1000, 5000}) {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				agent, plug := heldRSS(b, n)
				b.ReportMetric(float64(agent)/(1<<20), "agent-MiB")
				b.ReportMetric(float64(plug)/(1<<20), "plugin-MiB")
				b.ReportMetric(float64(agent)/float64(n)/1024, "agent-KiB/job")
				b.ReportMetric(float64(plug)/float64(n)/1024, "plugin-KiB/job")
				b.Logf("%d held jobs: agent +%.1f MiB (%.1f KiB/job), plugin +%.1f MiB (%.1f KiB/job)", n,
					float64(agent)/(1<<20), float64(agent)/float64(n)/1024, float64(plug)/(1<<20), float64(plug)/float64(n)/1024)
			}
		})
	}
}

// heldRSS returns what the agent's and the plugin's RSS grew by while n
// jobs were held, from before the agent started.
func heldRSS(b *testing.B, n int) (agent, plug uint64) {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.DB(b)
	st := store.New(pool)
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{fmt.Sprintf("held-%06d", i), "noop", "noop", "queued", []byte(`{"stdout":["started"],"checkpoint":"h","wait":true}`)}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "command", "plugin", "status", "context"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO active_jobs (job_id, command) SELECT id, command FROM jobs`); err != nil {
		b.Fatal(err)
	}
	h := store.Holder{Name: "held", Generation: "g"}
	if _, err := st.RegisterAgent(ctx, store.Registration{Holder: h, Capacity: n, Commands: []string{"noop"}}); err != nil {
		b.Fatal(err)
	}
	m, err := pluginhost.New(pluginhost.Config{Dir: pluginDir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	pluginPID := childNamed(b, "tether-plugin-noop")
	runtime.GC()
	agent0, plug0 := statusKB("self", "VmRSS")<<10, pidRSS(pluginPID)

	svc := claim.New(st, m, claim.Config{Holder: h, Capacity: n,
		Commands: map[string]claim.Command{"noop": {Plugin: "noop"}}, Logger: slog.New(slog.DiscardHandler)})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	waitHeld(b, st, n)
	runtime.GC()
	agent1, plug1 := statusKB("self", "VmRSS")<<10, pidRSS(pluginPID)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return agent1 - min(agent0, agent1), plug1 - min(plug0, plug1)
}

// waitHeld waits until n jobs are running and their first line is stored
// (with their checkpoint).
func waitHeld(b *testing.B, st *store.Store, n int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		var running, logged int
		err := st.Pool().QueryRow(context.Background(), `
			SELECT (SELECT count(*) FROM jobs WHERE status = 'running'), (SELECT count(DISTINCT job_id) FROM job_logs)`).Scan(&running, &logged)
		if err != nil {
			b.Fatal(err)
		}
		if running == n && logged == n {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("%d jobs were not all held within 10 minutes", n)
}

// childNamed is the pid of this process's child running the executable
// named name.
func childNamed(b *testing.B, name string) int {
	b.Helper()
	self := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == self && strings.Contains(s[:i], name[:min(len(name), 15)]) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	b.Fatalf("no child process %s of %s", name, self)
	return 0
}

// pidRSS is a process's resident set, bytes.
func pidRSS(pid int) uint64 { return statusKB(strconv.Itoa(pid), "VmRSS") << 10 }
