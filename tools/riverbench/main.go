// Command riverbench is the River side of tether's BenchmarkVsRiver
// (internal/bench/river_test.go): the same no-op backlog, worked by River
// clients on the same PostgreSQL, so `make bench` can print tether's
// throughput beside River's. It lives in its own module so that River never
// becomes a dependency of tether itself; `make river-bench` builds it into
// .tether/bin/riverbench-<river version>.
//
// One run: migrate the database with rivermigrate, insert the backlog with
// InsertManyFast (COPY), then start -clients worker processes (this binary
// again, with -worker), one River client each, as tether's bench runs one
// pool per agent. The clock starts when every worker has built its client
// and is told to go, and stops when their job_completed events add up to
// -jobs; no polling of the database. It prints one JSON line.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// NoopArgs is the job: it does nothing, like tether's noop test plugin.
type NoopArgs struct{}

func (NoopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

type options struct {
	databaseURL string
	jobs        int
	clients     int
	maxWorkers  int
	cooldown    time.Duration
	poll        time.Duration
	worker      bool
}

// Result is the JSON line a run prints.
type Result struct {
	Jobs       int `json:"jobs"`
	Clients    int `json:"clients"`
	MaxWorkers int `json:"max_workers"`
	// FetchCooldownMS is River's FetchCooldown in milliseconds.
	FetchCooldownMS float64 `json:"fetch_cooldown_ms"`
	Seconds         float64 `json:"seconds"`
	JobsPerS        float64 `json:"jobs_per_s"`
	// WALBytesPerJob is the server's WAL written during the run (the whole
	// cluster's: run nothing else on it) divided by the jobs.
	WALBytesPerJob float64 `json:"wal_bytes_per_job"`
	// ClientCPUSeconds is user + system CPU of all worker processes, from
	// start-up to exit.
	ClientCPUSeconds float64 `json:"client_cpu_s"`
	InsertSeconds    float64 `json:"insert_s"`
	RiverVersion     string  `json:"river_version"`
	// Fsync is the server's fsync setting: the figures differ greatly.
	Fsync string `json:"fsync"`
	// DBStatements and DBExecMS are the statements the workers ran and
	// their planning + execution time, from pg_stat_statements (-1 when it
	// is not loaded); PGCPUSeconds is the CPU of every server process
	// during the run, from /proc (the server must run on this machine;
	// -1 otherwise).
	DBStatements float64 `json:"db_statements"`
	DBExecMS     float64 `json:"db_exec_ms"`
	PGCPUSeconds float64 `json:"pg_cpu_s"`
}

func main() {
	var o options
	flag.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL ($DATABASE_URL); River's tables are migrated into it")
	flag.IntVar(&o.jobs, "jobs", envInt("RIVERBENCH_JOBS", 50000), "no-op jobs in the backlog ($RIVERBENCH_JOBS)")
	flag.IntVar(&o.clients, "clients", envInt("RIVERBENCH_CLIENTS", 1), "River clients, one process each ($RIVERBENCH_CLIENTS)")
	flag.IntVar(&o.maxWorkers, "max-workers", envInt("RIVERBENCH_MAX_WORKERS", 32), "MaxWorkers of each client's queue, $RIVERBENCH_MAX_WORKERS (tether's bench runs capacity 32 per agent)")
	// River's defaults (100 ms, 1 s) throttle fetching: with MaxWorkers 32
	// and a 100 ms cooldown a client cannot exceed 320 jobs/s whatever the
	// database costs. River's own benchmark (cmd/river bench) uses 2 ms and
	// 20 ms; so does this one.
	flag.DurationVar(&o.cooldown, "fetch-cooldown", 2*time.Millisecond, "River's FetchCooldown (minimum time between fetches)")
	flag.DurationVar(&o.poll, "fetch-poll-interval", 20*time.Millisecond, "River's FetchPollInterval")
	flag.BoolVar(&o.worker, "worker", false, "internal: run one client, driven over stdin/stdout by the parent")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.databaseURL == "" {
		fmt.Fprintln(os.Stderr, "riverbench: -database-url or DATABASE_URL is required")
		os.Exit(2)
	}
	if o.jobs <= 0 || o.clients <= 0 || o.maxWorkers <= 0 || o.cooldown <= 0 || o.poll <= 0 {
		fmt.Fprintln(os.Stderr, "riverbench: -jobs, -clients, -max-workers, -fetch-cooldown and -fetch-poll-interval must be positive")
		os.Exit(2)
	}
	var err error
	if o.worker {
		err = runWorker(ctx, o, logger)
	} else {
		var res Result
		res, err = run(ctx, o, logger)
		if err == nil {
			err = json.NewEncoder(os.Stdout).Encode(res)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func newWorkers() *river.Workers {
	w := river.NewWorkers()
	river.AddWorker(w, noopWorker{})
	return w
}

// run is the parent: migrate, insert, start the workers, time them.
func run(ctx context.Context, o options, logger *slog.Logger) (Result, error) {
	res := Result{Jobs: o.jobs, Clients: o.clients, MaxWorkers: o.maxWorkers,
		FetchCooldownMS: float64(o.cooldown) / float64(time.Millisecond), RiverVersion: riverVersion()}
	pool, err := pgxpool.New(ctx, o.databaseURL)
	if err != nil {
		return res, fmt.Errorf("connecting to the database: %w", err)
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger})
	if err != nil {
		return res, fmt.Errorf("creating River's migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, fmt.Errorf("running River's migrations: %w", err)
	}

	// An insert-only client (no queues): the backlog goes in before any
	// worker starts, as tether's bench COPYs its queued jobs.
	inserter, err := river.NewClient(driver, &river.Config{Logger: logger, Workers: newWorkers()})
	if err != nil {
		return res, fmt.Errorf("creating the inserting client: %w", err)
	}
	params := make([]river.InsertManyParams, o.jobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: NoopArgs{}}
	}
	insertStart := time.Now()
	if n, err := inserter.InsertManyFast(ctx, params); err != nil {
		return res, fmt.Errorf("inserting %d jobs: %w", o.jobs, err)
	} else if n != o.jobs {
		return res, fmt.Errorf("inserting %d jobs: %d inserted", o.jobs, n)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
		return res, fmt.Errorf("vacuuming river_job: %w", err)
	}
	res.InsertSeconds = time.Since(insertStart).Seconds()

	if err := pool.QueryRow(ctx, "SHOW fsync").Scan(&res.Fsync); err != nil {
		return res, fmt.Errorf("reading the fsync setting: %w", err)
	}
	var walBefore string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walBefore); err != nil {
		return res, fmt.Errorf("reading the WAL position: %w", err)
	}

	meter := startDBMeter(ctx, pool)
	workers, err := startWorkers(ctx, o)
	defer func() {
		for _, w := range workers {
			w.kill()
		}
	}()
	if err != nil {
		return res, err
	}

	progress := make(chan progressMsg, 64)
	for i, w := range workers {
		go w.read(i, progress)
	}
	start := time.Now()
	for _, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return res, fmt.Errorf("starting worker %d: %w", w.index, err)
		}
	}
	completed := make([]int, len(workers))
	total := 0
	for total < o.jobs {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case m := <-progress:
			if m.err != nil {
				return res, fmt.Errorf("worker %d: %w", m.worker, m.err)
			}
			total += m.completed - completed[m.worker]
			completed[m.worker] = m.completed
		}
	}
	elapsed := time.Since(start)
	res.Seconds = elapsed.Seconds()
	res.JobsPerS = float64(o.jobs) / elapsed.Seconds()

	// Closing stdin stops each worker, which reports its CPU and exits.
	for _, w := range workers {
		_ = w.stdin.Close()
	}
	for range workers {
		m := <-progress
		for m.cpuSeconds < 0 && m.err == nil {
			m = <-progress
		}
		if m.err != nil {
			return res, fmt.Errorf("worker %d: %w", m.worker, m.err)
		}
		res.ClientCPUSeconds += m.cpuSeconds
	}
	for _, w := range workers {
		if err := w.cmd.Wait(); err != nil {
			return res, fmt.Errorf("worker %d: %w", w.index, err)
		}
	}
	workers = nil
	res.DBStatements, res.DBExecMS, res.PGCPUSeconds = meter.stop(ctx)

	var walBytes float64
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn() - $1::text::pg_lsn", walBefore).Scan(&walBytes); err != nil {
		return res, fmt.Errorf("reading the WAL position: %w", err)
	}
	res.WALBytesPerJob = walBytes / float64(o.jobs)
	var done int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&done); err != nil {
		return res, fmt.Errorf("counting completed jobs: %w", err)
	}
	if done != o.jobs {
		return res, fmt.Errorf("%d of %d jobs completed in river_job", done, o.jobs)
	}
	return res, nil
}

type worker struct {
	index int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// progressMsg is one line from a worker: its running count of completed
// jobs, its CPU when it exits (cpuSeconds ≥ 0), or an error.
type progressMsg struct {
	worker     int
	completed  int
	cpuSeconds float64
	err        error
}

// startWorkers starts one process per client and waits until each has built
// its client and subscribed (its "ready" line), so start-up is not timed.
func startWorkers(ctx context.Context, o options) ([]*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable: %w", err)
	}
	var workers []*worker
	for i := 0; i < o.clients; i++ {
		cmd := exec.CommandContext(ctx, self, "-worker",
			"-database-url", o.databaseURL,
			"-jobs", strconv.Itoa(o.jobs),
			"-max-workers", strconv.Itoa(o.maxWorkers),
			"-fetch-cooldown", o.cooldown.String(),
			"-fetch-poll-interval", o.poll.String())
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return workers, fmt.Errorf("starting worker %d: %w", i, err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return workers, fmt.Errorf("starting worker %d: %w", i, err)
		}
		if err := cmd.Start(); err != nil {
			return workers, fmt.Errorf("starting worker %d: %w", i, err)
		}
		workers = append(workers, &worker{index: i, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)})
	}
	for _, w := range workers {
		if !w.out.Scan() || w.out.Text() != "ready" {
			return workers, fmt.Errorf("worker %d did not get ready (%q): %v", w.index, w.out.Text(), w.out.Err())
		}
	}
	return workers, nil
}

func (w *worker) read(index int, ch chan<- progressMsg) {
	for w.out.Scan() {
		kind, value, _ := strings.Cut(w.out.Text(), " ")
		switch kind {
		case "completed":
			n, err := strconv.Atoi(value)
			ch <- progressMsg{worker: index, completed: n, cpuSeconds: -1, err: err}
		case "cpu":
			s, err := strconv.ParseFloat(value, 64)
			ch <- progressMsg{worker: index, cpuSeconds: s, err: err}
			return
		case "failed":
			ch <- progressMsg{worker: index, err: fmt.Errorf("a job did not complete: %s", value)}
			return
		default:
			ch <- progressMsg{worker: index, err: fmt.Errorf("unexpected line %q", w.out.Text())}
			return
		}
	}
	ch <- progressMsg{worker: index, err: fmt.Errorf("exited before reporting: %v", w.out.Err())}
}

func (w *worker) kill() {
	if w.cmd.Process != nil && w.cmd.ProcessState == nil {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	}
}

// runWorker is one client: it says "ready", starts on "go", writes its
// running count of completed jobs ("completed N", at most one line per
// batch of events), and on stdin's end stops and writes "cpu SECONDS".
func runWorker(ctx context.Context, o options, logger *slog.Logger) error {
	pool, err := pgxpool.New(ctx, o.databaseURL)
	if err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     o.cooldown,
		FetchPollInterval: o.poll,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.maxWorkers}},
		Workers:           newWorkers(),
	})
	if err != nil {
		return fmt.Errorf("creating the client: %w", err)
	}
	// A buffer for every job: River drops events a full channel cannot take.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: o.jobs,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancel()

	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	if err := out.Flush(); err != nil {
		return fmt.Errorf("writing to the parent: %w", err)
	}
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("the parent did not say go")
	}
	stdinClosed := make(chan struct{})
	go func() {
		for in.Scan() {
		}
		close(stdinClosed)
	}()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("starting the client: %w", err)
	}

	completed := 0
	handle := func(e *river.Event) error {
		if e == nil {
			return errors.New("the subscription closed")
		}
		if e.Kind != river.EventKindJobCompleted {
			return fmt.Errorf("job %d: %s", e.Job.ID, e.Kind)
		}
		completed++
		return nil
	}
loop:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stdinClosed:
			break loop
		case e := <-events:
			err := handle(e)
			// Take what else is already there, then write one line.
			for drained := false; err == nil && !drained; {
				select {
				case e := <-events:
					err = handle(e)
				default:
					drained = true
				}
			}
			if err != nil {
				fmt.Fprintln(out, "failed", err)
				_ = out.Flush()
				return err
			}
			fmt.Fprintln(out, "completed", completed)
			if err := out.Flush(); err != nil {
				return fmt.Errorf("writing to the parent: %w", err)
			}
		}
	}

	stopCtx, cancelStop := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStop()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stopping the client: %w", err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return fmt.Errorf("reading CPU usage: %w", err)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Fprintln(out, "cpu", strconv.FormatFloat(cpu.Seconds(), 'f', 3, 64))
	return out.Flush()
}

// riverVersion is the River module this binary was built with.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "unknown"
}
