package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// dbMeter measures what PostgreSQL spends during the run, the way tether's
// bench measures its own rounds (internal/bench/cost_test.go): statement
// statistics of this database when pg_stat_statements is loaded, and the
// CPU of the postmaster, the backends it reaped and those alive, from /proc.
type dbMeter struct {
	pool       *pgxpool.Pool
	postmaster int // 0: unknown
	cpu0       float64
	stats      bool
}

func startDBMeter(ctx context.Context, pool *pgxpool.Pool) *dbMeter {
	m := &dbMeter{pool: pool}
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err == nil {
		if f, err := procStat(backend); err == nil {
			m.postmaster, _ = strconv.Atoi(f[1])
			m.cpu0 = treeCPU(m.postmaster)
		}
	}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
		_, err = pool.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
		m.stats = err == nil
	}
	return m
}

// stop returns the statements, their time (ms) and the server's CPU (s)
// since start; -1 for what could not be measured.
func (m *dbMeter) stop(ctx context.Context) (statements, execMS, cpuS float64) {
	statements, execMS, cpuS = -1, -1, -1
	if m.postmaster > 0 {
		cpuS = treeCPU(m.postmaster) - m.cpu0
	}
	if m.stats {
		_ = m.pool.QueryRow(ctx, `
			SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(total_exec_time + total_plan_time), 0)::float8
			FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_backend_pid%'`).Scan(&statements, &execMS)
	}
	return statements, execMS, cpuS
}

// treeCPU is the CPU seconds of pid, its reaped children and its living
// children (USER_HZ is 100 on every Linux Go supports).
func treeCPU(pid int) float64 {
	f, err := procStat(pid)
	if err != nil {
		return 0
	}
	ticks := fields(f, 11, 12, 13, 14)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cf, err := procStat(child); err == nil && cf[1] == strconv.Itoa(pid) {
			ticks += fields(cf, 11, 12)
		}
	}
	return ticks / 100
}

// procStat is /proc/<pid>/stat after the command name: ppid is [1], utime [11].
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return nil, os.ErrInvalid
	}
	return f, nil
}

func fields(f []string, idx ...int) float64 {
	var t float64
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		t += v
	}
	return t
}
