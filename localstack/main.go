// Command localstack serves the tether ECS, CloudWatch Logs and EKS
// (DescribeCluster) emulator on 127.0.0.1:4566 (LocalStack's port), so one
// endpoint setting points at either this emulator or real LocalStack.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
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

// envString is the variable key, or def when it is unset or empty.
func envString(key, def string) string {
	return cmp.Or(os.Getenv(key), def)
}

func run() error {
	var (
		addr    string
		verbose bool
	)
	fs := flag.NewFlagSet("localstack", flag.ContinueOnError)
	fs.StringVar(&addr, "addr", envString("TETHER_EMULATOR_ADDR", "127.0.0.1:4566"), "listen address (env TETHER_EMULATOR_ADDR)")
	fs.BoolVar(&verbose, "v", os.Getenv("TETHER_EMULATOR_DEBUG") != "", "log every request (env TETHER_EMULATOR_DEBUG)")
	opts, profile, err := emulator.ParseFlags(fs, os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// A random seed is picked here, not in the emulator, so the settings
	// line below is enough to reproduce a run.
	opts.Seed = cmp.Or(opts.Seed, time.Now().UnixNano())
	opts.Logger.Info("emulator settings", "profile", profile, "settings", opts)

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
