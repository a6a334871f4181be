package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherjobs/tether/internal/pgtest"

	"github.com/tetherjobs/tether/internal/bintest"
)

// riverRounds is how many interleaved rounds (tether, River, tether, River…)
// BenchmarkVsRiver runs per agent count. The medians are compared.
var riverRounds = envInt("TETHER_BENCH_ROUNDS", 3)

// riverMaxWorkers is each River client's MaxWorkers. It defaults to tether's
// capacity in runRound (32). TETHER_BENCH_RIVER_WORKERS=2000 is what River's
// own benchmark runs.
var riverMaxWorkers = envInt("TETHER_BENCH_RIVER_WORKERS", 32)

// riverResult is the JSON line tools/riverbench prints.
type riverResult struct {
	Jobs           int     `json:"jobs"`
	Clients        int     `json:"clients"`
	MaxWorkers     int     `json:"max_workers"`
	Seconds        float64 `json:"seconds"`
	JobsPerS       float64 `json:"jobs_per_s"`
	WALBytesPerJob float64 `json:"wal_bytes_per_job"`
	ClientCPU      float64 `json:"client_cpu_s"`
	RiverVersion   string  `json:"river_version"`
	Fsync          string  `json:"fsync"`
	DBStatements   float64 `json:"db_statements"`
	DBExecMS       float64 `json:"db_exec_ms"`
	PGCPU          float64 `json:"pg_cpu_s"`
}

// BenchmarkVsRiver runs tether's end-to-end round (runRound, with no-op jobs
// through go-plugin, capacity 32 per agent) and River's (tools/riverbench,
// with a no-op worker, MaxWorkers 32 per client, one process per client) on
// the same backlog size and the same PostgreSQL, each round on a fresh
// database, interleaved. It prints the medians side by side, ending with one
// line per agent count, `tether/river N agents: RATIO`. It runs 50,000 jobs
// by default (TETHER_BENCH_JOBS) and 3 rounds (TETHER_BENCH_ROUNDS).
// `make bench` builds the River side first (`make river-bench`).
func BenchmarkVsRiver(b *testing.B) {
	bin, err := riverBinary()
	if err != nil {
		b.Fatal(err)
	}
	jobs := envInt("TETHER_BENCH_JOBS", 50000)
	type medians struct {
		agents                  int
		tether, river           float64 // jobs/s
		tetherWAL, riverWAL     float64 // bytes per job
		tetherRates, riverRates []float64
		// Per job, tether's then River's. These are statements, their time
		// (ms), the server's CPU (ms) and the client's (ms, being the agent
		// process and its plugin processes, or River's client processes).
		stmts, execMS, pgCPU, clientCPU [2]float64
	}
	var all []medians
	fsync := "unknown"
	for _, agents := range []int{1, 2} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			m := medians{agents: agents}
			var tWAL, rWAL []float64
			var stmts, execMS, pgCPU, clientCPU [2][]float64
			perJob := func(v float64) float64 {
				if v < 0 {
					return -1 // not measured
				}
				return v / float64(jobs)
			}
			for i := 0; i < b.N; i++ {
				for r := 0; r < riverRounds; r++ {
					t := runRound(b, agents, jobs)
					m.tetherRates = append(m.tetherRates, t.rate)
					tWAL = append(tWAL, t.walBytes/float64(jobs))
					rr := runRiver(b, bin, agents, jobs, &fsync)
					m.riverRates = append(m.riverRates, rr.JobsPerS)
					rWAL = append(rWAL, rr.WALBytesPerJob)
					stmts[0] = append(stmts[0], perJob(t.db.statements))
					stmts[1] = append(stmts[1], perJob(rr.DBStatements))
					execMS[0] = append(execMS[0], perJob(t.db.execMS))
					execMS[1] = append(execMS[1], perJob(rr.DBExecMS))
					pgCPU[0] = append(pgCPU[0], perJob(t.db.cpuS*1000))
					pgCPU[1] = append(pgCPU[1], perJob(rr.PGCPU*1000))
					clientCPU[0] = append(clientCPU[0], perJob(t.clientCPU*1000))
					clientCPU[1] = append(clientCPU[1], perJob(rr.ClientCPU*1000))
					b.Logf("round %d: tether %.0f jobs/s (%s), River %.0f jobs/s (%.3fs)",
						r+1, t.rate, t.elapsed.Round(time.Millisecond), rr.JobsPerS, rr.Seconds)
				}
			}
			m.tether, m.river = median(m.tetherRates), median(m.riverRates)
			m.tetherWAL, m.riverWAL = median(tWAL), median(rWAL)
			for i := range 2 {
				m.stmts[i], m.execMS[i] = median(stmts[i]), median(execMS[i])
				m.pgCPU[i], m.clientCPU[i] = median(pgCPU[i]), median(clientCPU[i])
			}
			b.ReportMetric(m.tether, "tether-jobs/s")
			b.ReportMetric(m.river, "river-jobs/s")
			b.ReportMetric(m.tether/m.river, "tether/river")
			b.ReportMetric(m.tetherWAL, "tether-WAL-B/job")
			b.ReportMetric(m.riverWAL, "river-WAL-B/job")
			all = append(all, m)
		})
	}
	if len(all) == 0 {
		return
	}
	fmt.Printf("tether vs River %s: %d no-op jobs per round, %d interleaved rounds, fresh database each, fsync=%s; tether capacity 32 per agent, River MaxWorkers %d per client; medians\n",
		riverVersionOf(bin), jobs, riverRounds, fsync, riverMaxWorkers)
	fmt.Printf("%-7s %14s %14s %8s %16s %16s\n", "agents", "tether jobs/s", "River jobs/s", "ratio", "tether WAL B/job", "River WAL B/job")
	for _, m := range all {
		fmt.Printf("%-7d %14.0f %14.0f %8.3f %16.0f %16.0f\n", m.agents, m.tether, m.river, m.tether/m.river, m.tetherWAL, m.riverWAL)
		fmt.Printf("        rounds: tether %s, River %s\n", rates(m.tetherRates), rates(m.riverRates))
	}
	fmt.Printf("per job, tether | River (statements and their time from pg_stat_statements, -1: not loaded; CPU from /proc):\n")
	fmt.Printf("%-7s %18s %22s %22s %22s\n", "agents", "statements", "DB time ms", "PostgreSQL CPU ms", "client CPU ms")
	for _, m := range all {
		fmt.Printf("%-7d %8.3f | %7.3f %10.3f | %9.3f %10.3f | %9.3f %10.3f | %9.3f\n", m.agents,
			m.stmts[0], m.stmts[1], m.execMS[0], m.execMS[1], m.pgCPU[0], m.pgCPU[1], m.clientCPU[0], m.clientCPU[1])
	}
	for _, m := range all {
		fmt.Printf("tether/river %d agents: %.2f\n", m.agents, m.tether/m.river)
	}
}

// runRiver runs one River round on a fresh empty database of the same
// server and returns riverbench's result. It records the server's fsync
// setting (riverbench reads it) in *fsync.
func runRiver(b *testing.B, bin string, clients, jobs int, fsync *string) riverResult {
	b.Helper()
	url := pgtest.EmptyURL(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-database-url", url, "-jobs", fmt.Sprint(jobs), "-clients", fmt.Sprint(clients), "-max-workers", fmt.Sprint(riverMaxWorkers))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("riverbench (%d clients, %d jobs): %v\n%s", clients, jobs, err, stderr.String())
	}
	var r riverResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		b.Fatalf("reading riverbench's output %q: %v", stdout.String(), err)
	}
	*fsync = r.Fsync
	if r.Jobs != jobs || r.JobsPerS <= 0 {
		b.Fatalf("riverbench ran %d jobs at %.0f jobs/s, want %d", r.Jobs, r.JobsPerS, jobs)
	}
	return r
}

// riverBinary finds tools/riverbench's binary: TETHER_RIVERBENCH when set,
// else the one `make river-bench` builds, .tether/bin/riverbench-<River
// version> in the repository.
func riverBinary() (string, error) {
	if bin := os.Getenv("TETHER_RIVERBENCH"); bin != "" {
		return bin, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	version, err := requiredVersion(filepath.Join(root, "tools", "riverbench", "go.mod"), "github.com/riverqueue/river")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".tether", "bin", "riverbench-"+version)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("riverbench not found at %s: run `make river-bench` (builds tools/riverbench from the Go module proxy once, under a minute) or set TETHER_RIVERBENCH", bin)
	}
	return bin, nil
}

// riverVersionOf is the River version in the binary's name.
func riverVersionOf(bin string) string {
	if _, v, ok := strings.Cut(filepath.Base(bin), "riverbench-"); ok {
		return v
	}
	return ""
}

// repoRoot is bintest.RepoRoot, saying which variable to set instead.
func repoRoot() (string, error) {
	root, err := bintest.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w; set %s", err, "TETHER_RIVERBENCH")
	}
	return root, nil
}

// requiredVersion is the version of module that a build module's go.mod
// requires (as the Makefile's awk reads it).
func requiredVersion(gomod, module string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", fmt.Errorf("reading the build module: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1], nil
		}
	}
	return "", fmt.Errorf("%s does not require %s", gomod, module)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func rates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " ")
}
