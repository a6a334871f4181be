package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgStatSettings load pg_stat_statements into the bench's own cluster, so a
// round can say what its statements cost (TestMain).
var pgStatSettings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"}

// dbCost is what PostgreSQL spent on one database during a timed window.
type dbCost struct {
	statements float64 // statements executed (pg_stat_statements calls); -1 unknown
	execMS     float64 // their planning and execution time, ms; -1 unknown
	cpuS       float64 // CPU of the server's processes (user + system), s
}

// dbMeter measures a dbCost. It reads statement statistics of the pool's
// database (when pg_stat_statements is loaded) and the CPU of every process
// of the server (the postmaster, the backends it reaped and those alive),
// read from /proc, so the server must run on this machine.
type dbMeter struct {
	pool       *pgxpool.Pool
	postmaster int
	cpu0       float64
	stats      bool
}

// startDBMeter resets the database's statement statistics and reads the
// server's CPU so far.
func startDBMeter(ctx context.Context, b *testing.B, pool *pgxpool.Pool) *dbMeter {
	b.Helper()
	m := &dbMeter{pool: pool}
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	pm, err := parentPID(backend)
	if err != nil {
		b.Fatalf("finding the postmaster (the bench reads its CPU from /proc; run PostgreSQL on this machine): %v", err)
	}
	m.postmaster = pm
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
		_, err = pool.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
		m.stats = err == nil
	}
	if m.cpu0, err = processTreeCPU(pm); err != nil {
		b.Fatal(err)
	}
	return m
}

// stop returns what the database cost since start. The meter's own
// statements and the bench's progress count are left out.
func (m *dbMeter) stop(ctx context.Context, b *testing.B) dbCost {
	b.Helper()
	cpu1, err := processTreeCPU(m.postmaster)
	if err != nil {
		b.Fatal(err)
	}
	c := dbCost{statements: -1, execMS: -1, cpuS: cpu1 - m.cpu0}
	if m.stats {
		err := m.pool.QueryRow(ctx, `
			SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(total_exec_time + total_plan_time), 0)::float8
			FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_backend_pid%'
			  AND query NOT LIKE '%pg_current_wal_lsn%' AND query <> $1`, progressQuery).Scan(&c.statements, &c.execMS)
		if err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// parentPID is pid's parent, from /proc/<pid>/stat.
func parentPID(pid int) (int, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// processTreeCPU is the CPU seconds of pid, of its children it has reaped
// (cutime, cstime) and of its living children.
func processTreeCPU(pid int) (float64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	ticks := sumFields(f, 11, 12, 13, 14) // utime stime cutime cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cf, err := procStat(child)
		if err != nil || cf[1] != strconv.Itoa(pid) {
			continue // gone, or not a child
		}
		ticks += sumFields(cf, 11, 12)
	}
	return ticks / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// procStat returns the fields of /proc/<pid>/stat after the command name:
// state is [0], ppid [1], utime [11] and so on.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return f, nil
}

func sumFields(f []string, idx ...int) float64 {
	var t float64
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		t += v
	}
	return t
}

// cpuNow is this process's CPU seconds and that of its children it has
// waited for (the plugin processes, once closed).
func cpuNow() (self, children float64) {
	var s, c syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
