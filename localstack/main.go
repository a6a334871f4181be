// Command localstack serves the tether ECS, CloudWatch Logs and EKS
// (DescribeCluster) emulator on 127.0.0.1:4566 (LocalStack's port), so one
// endpoint setting points at either this emulator or real LocalStack.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tetherjobs/tether/localstack/emulator"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localstack:", err)
		os.Exit(1)
	}
}

func envString(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func envFloat(key string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(key), 64); err == nil {
		return v
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

func run() error {
	var (
		opts    emulator.Options
		addr    string
		verbose bool
	)
	fs := flag.NewFlagSet("localstack", flag.ContinueOnError)
	fs.StringVar(&addr, "addr", envString("TETHER_EMULATOR_ADDR", "127.0.0.1:4566"), "listen address (env TETHER_EMULATOR_ADDR)")
	fs.DurationVar(&opts.StoppedRetention, "stopped-retention", envDuration("TETHER_EMULATOR_STOPPED_RETENTION", time.Hour), "how long stopped tasks stay visible (env TETHER_EMULATOR_STOPPED_RETENTION)")
	fs.DurationVar(&opts.StopTimeout, "stop-timeout", envDuration("TETHER_EMULATOR_STOP_TIMEOUT", 30*time.Second), "SIGTERM to SIGKILL wait on StopTask (env TETHER_EMULATOR_STOP_TIMEOUT)")
	fs.Float64Var(&opts.ThrottleRate, "throttle-rate", envFloat("TETHER_EMULATOR_THROTTLE_RATE", 0), "fraction of requests answered with ThrottlingException (env TETHER_EMULATOR_THROTTLE_RATE)")
	fs.Float64Var(&opts.ServerErrorRate, "server-error-rate", envFloat("TETHER_EMULATOR_SERVER_ERROR_RATE", 0), "fraction of requests answered with HTTP 500 (env TETHER_EMULATOR_SERVER_ERROR_RATE)")
	fs.DurationVar(&opts.Latency, "latency", envDuration("TETHER_EMULATOR_LATENCY", 0), "latency added to every request (env TETHER_EMULATOR_LATENCY)")
	fs.Float64Var(&opts.FailToStartRate, "fail-to-start-rate", envFloat("TETHER_EMULATOR_FAIL_TO_START_RATE", 0), "fraction of tasks stopping with TaskFailedToStart (env TETHER_EMULATOR_FAIL_TO_START_RATE)")
	fs.Float64Var(&opts.CapacityErrorRate, "capacity-error-rate", envFloat("TETHER_EMULATOR_CAPACITY_ERROR_RATE", 0), "fraction of RunTask slots returned as RESOURCE:CPU failures (env TETHER_EMULATOR_CAPACITY_ERROR_RATE)")
	fs.Int64Var(&opts.Seed, "seed", 0, "fault-injection random seed (0 = random)")
	fs.BoolVar(&verbose, "v", os.Getenv("TETHER_EMULATOR_DEBUG") != "", "log every request (env TETHER_EMULATOR_DEBUG)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	em := emulator.New(opts)
	url, err := em.Start(addr)
	if err != nil {
		return err
	}
	opts.Logger.Info("ECS and CloudWatch Logs emulator listening", "url", url)
	<-ctx.Done()
	opts.Logger.Info("shutting down; killing task processes")
	return em.Close()
}
