package janitor

import (
	"context"
	"time"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// refreshGauges sets the cluster-wide gauges (queue per command the
// database knows, agents by state, cleanup backlog) once per janitor pass.
// A scrape reads the last values and never queries the database.
func (s *Service) refreshGauges(ctx context.Context) {
	own := fleet.Timings{Keepalive: s.cfg.Keepalive, StaleJob: s.cfg.StaleJob}
	if stats, err := QueueStats(ctx, s.pool, s.commandNames(), own); err == nil {
		s.cfg.Metrics.SetQueue(stats)
	} else {
		s.log.Warn("measuring the queue", "err", err)
	}
	if agents, err := s.store.ListAgents(ctx, store.AgentListParams{All: true, LiveWithin: s.cfg.StaleJob}); err == nil {
		s.cfg.Metrics.SetAgents(agentStates(own, agents))
	} else {
		s.log.Warn("counting the agents", "err", err)
	}
	if n, oldest, err := s.store.CleanupBacklog(ctx); err == nil {
		s.pending.Set(float64(n))
		s.cfg.Metrics.CleanupsOldest.Set(oldest.Seconds())
	} else {
		s.log.Warn("measuring the cleanup backlog", "err", err)
	}
}

// agentStates counts agents by the states of tether_agents, judged by the
// fleet's rule (fleet.Classify, the one the janitor acts by and the views
// show). A draining agent that counts is draining, any other that counts
// (live, late) running. One that went silent without stopping (dead,
// stale) is lost while its silence is younger than metrics.LostWindow
// (older ones wait for pruning, counted nowhere).
func agentStates(own fleet.Timings, agents []store.Agent) map[string]int {
	out := map[string]int{}
	for _, a := range agents {
		v := fleet.Classify(own, fleet.SeenOf(a.Seen))
		switch {
		case v.Liveness == fleet.Draining:
			out[metrics.AgentDraining]++
		case v.Counts():
			out[metrics.AgentRunning]++
		case v.Liveness != fleet.Stopped && time.Duration(a.SilentFor*float64(time.Second)) < metrics.LostWindow:
			out[metrics.AgentLost]++
		}
	}
	return out
}

// QueueCountCap is the most due jobs per command QueueStats counts. A count
// of QueueCountCap means at least that many. Every agent measures the queue
// every janitor pass, and counting a backlog of 1,000,000 jobs read every one
// of them. The cap bounds the pass's cost whatever the backlog
// (docs/operations.md, Metrics, and tether_queue_jobs's help says it too).
const QueueCountCap = 10000

// QueueCommandCap is the most commands QueueStats measures (the configured
// ones first): it bounds both the pass's cost and the series of the queue
// gauges, whatever a database holds.
const QueueCommandCap = 500

// QueueStats measures, for the configured commands and every other command
// the database knows (announced by an agents row, or with unowned jobs), at
// most QueueCommandCap in all: the due, unowned jobs (at most QueueCountCap
// of them), how long the oldest has waited, and the live agents claiming
// it, as a checker with own counts them by the fleet's rule
// (fleet.Classify, read from agents_seen.sql). It is one statement for the
// agents and one for the queues (see queries/queue_stats.sql: the head of
// one index range per command), with JIT off.
func QueueStats(ctx context.Context, db store.Batcher, commands []string, own fleet.Timings) ([]metrics.QueueStat, error) {
	if commands == nil {
		commands = []string{}
	}
	agents, err := store.AgentsSeen(ctx, db)
	if err != nil {
		return nil, err
	}
	stats, err := store.QueueStats(ctx, db, store.QueueParams{
		Commands: commands, MaxCommands: QueueCommandCap, Live: fleet.LiveNames(own, agents), Cap: QueueCountCap})
	if err != nil {
		return nil, err
	}
	out := make([]metrics.QueueStat, len(stats))
	for i, q := range stats {
		out[i] = metrics.QueueStat{Command: q.Command, Jobs: q.Jobs, Oldest: q.Oldest, Agents: q.Agents}
	}
	return out, nil
}
