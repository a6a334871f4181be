package janitor

import (
	"context"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// refreshGauges sets the cluster-wide backlog gauges (queue per configured
// command, cleanup backlog) once per janitor pass. A scrape reads the last
// values and never queries the database.
func (s *Service) refreshGauges(ctx context.Context) {
	own := fleet.Timings{Keepalive: s.cfg.Keepalive, StaleJob: s.cfg.StaleJob}
	if stats, err := QueueStats(ctx, s.pool, s.commandNames(), own); err == nil {
		s.cfg.Metrics.SetQueue(stats)
	} else {
		s.log.Warn("measuring the queue", "err", err)
	}
	if n, oldest, err := s.store.CleanupBacklog(ctx); err == nil {
		s.pending.Set(float64(n))
		s.cfg.Metrics.CleanupsOldest.Set(oldest.Seconds())
	} else {
		s.log.Warn("measuring the cleanup backlog", "err", err)
	}
}

// QueueCountCap is the most due jobs per command QueueStats counts. A count
// of QueueCountCap means at least that many. Every agent measures the queue
// every janitor pass, and counting a backlog of 1,000,000 jobs read every one
// of them. The cap bounds the pass's cost whatever the backlog
// (docs/operations.md, Metrics, and tether_queue_jobs's help says it too).
const QueueCountCap = 10000

// QueueStats measures the due, unowned jobs of each command (at most
// QueueCountCap of them), how long the oldest has waited, and the live
// agents claiming it, as a checker with own counts them by the fleet's rule
// (fleet.Classify, read from agents_seen.sql), with JIT off (see
// queries/queue_stats.sql: the head of one index range per command).
func QueueStats(ctx context.Context, db store.Batcher, commands []string, own fleet.Timings) ([]metrics.QueueStat, error) {
	if len(commands) == 0 {
		return nil, nil
	}
	agents, err := store.AgentsSeen(ctx, db)
	if err != nil {
		return nil, err
	}
	stats, err := store.QueueStats(ctx, db, commands, fleet.LiveNames(own, agents), QueueCountCap)
	if err != nil {
		return nil, err
	}
	out := make([]metrics.QueueStat, len(stats))
	for i, q := range stats {
		out[i] = metrics.QueueStat{Command: q.Command, Jobs: q.Jobs, Oldest: q.Oldest, Agents: q.Agents}
	}
	return out, nil
}
