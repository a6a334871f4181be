// Package defaults names every default an agent runs with, once. The
// configuration fills unset keys from here and each service falls back to
// the same constants when built without a configuration (tests, benchmarks),
// so the two can never drift apart.
package defaults

import "time"

// The agent's timing and sizing.
const (
	Capacity        = 10
	PollInterval    = time.Second
	Keepalive       = 5 * time.Second
	StaleJob        = 120 * time.Second
	OfflineAfter    = 3 * Keepalive
	CleanInterval   = 10 * time.Second
	AWOLTimeout     = time.Hour
	ShutdownTimeout = 100 * time.Second
	// CleanupTimeout bounds one plugin Cleanup call (the configuration's
	// default is the smaller of this and stale_job/2).
	CleanupTimeout = 2 * time.Minute
	// FinalTimeout bounds each try of a final write.
	FinalTimeout = 10 * time.Second
	// AgentRetention is how long a stopped or silent agent holding nothing
	// stays listed before the janitor prunes it.
	AgentRetention = 24 * time.Hour
	// HealthInterval is the period of the plugins' health checks.
	HealthInterval = 30 * time.Second
)

// Job output.
const (
	LogFlush          = 200 * time.Millisecond
	LogMaxBytesStream = 10 << 20
)

// The HTTP API.
const (
	Listen        = ":9090"
	MaxBodyBytes  = 1 << 20
	ShutdownGrace = 5 * time.Second

	// API server timeouts. A slow or idle client cannot hold a connection
	// forever. Write excludes followed log streams.
	HTTPReadHeaderTimeout = 10 * time.Second
	HTTPReadTimeout       = 30 * time.Second
	HTTPWriteTimeout      = 60 * time.Second
	HTTPIdleTimeout       = 120 * time.Second

	// DatabaseConnectTimeout bounds one connection attempt to PostgreSQL.
	DatabaseConnectTimeout = 10 * time.Second
)

// An agent's connection budget, whatever its capacity: the work pool
// (claiming, the janitor, the jobs' writes, which are batched) and the API's
// own pool. The heartbeat has 2 of its own, and the name lock and LISTEN one
// session each: 14 connections per agent at most with the defaults. An agent
// running no-op jobs as fast as PostgreSQL takes them held 3 of the work
// pool (BenchmarkEndToEnd, docs/operations.md "Connections").
const (
	DatabaseMaxConns     = 6
	HTTPDatabaseMaxConns = 4
	// HeartbeatConns are the heartbeat's own pool. It is never delayed
	// by a connection the jobs' writes hold.
	HeartbeatConns = 2
	// ConnMaxIdleTime closes a pool's connection idle this long (pgx's
	// health check looks every minute), so a quiet agent gives back what a
	// burst opened within two minutes instead of pgx's 30.
	ConnMaxIdleTime = time.Minute
)

// Fill sets *v to d unless *v is positive. Services call it for each
// setting a test or benchmark may leave at zero.
func Fill[T ~int | ~int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
