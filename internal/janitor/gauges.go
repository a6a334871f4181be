package janitor

import (
	"context"
	"time"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// clusterStats are the cluster-wide gauges one pass measures: the queue per
// command the database knows, agents by state, the Cleanup backlog. The
// janitor turn's pass publishes them and every agent exports them. Each Has
// says the measurement succeeded (a failed one leaves its gauges alone).
type clusterStats struct {
	HasQueue        bool                `json:"has_queue"`
	Queue           []metrics.QueueStat `json:"queue"`
	HasAgents       bool                `json:"has_agents"`
	Agents          map[string]int      `json:"agents"`
	HasCleanups     bool                `json:"has_cleanups"`
	CleanupsPending int                 `json:"cleanups_pending"`
	CleanupsOldest  time.Duration       `json:"cleanups_oldest"`
}

// measureGauges measures the cluster-wide gauges. A measurement that fails
// is logged and left out.
func (s *Service) measureGauges(ctx context.Context) clusterStats {
	var c clusterStats
	own := fleet.Timings{Keepalive: s.cfg.Keepalive, StaleJob: s.cfg.StaleJob}
	if stats, err := QueueStats(ctx, s.pool, s.commandNames(), own); err == nil {
		c.HasQueue, c.Queue = true, stats
	} else {
		s.log.Warn("measuring the queue", "err", err)
	}
	if agents, err := s.store.ListAgents(ctx, store.AgentListParams{All: true, LiveWithin: s.cfg.StaleJob}); err == nil {
		c.HasAgents, c.Agents = true, agentStates(own, agents)
	} else {
		s.log.Warn("counting the agents", "err", err)
	}
	if n, oldest, err := s.store.CleanupBacklog(ctx); err == nil {
		c.HasCleanups, c.CleanupsPending, c.CleanupsOldest = true, n, oldest
	} else {
		s.log.Warn("measuring the cleanup backlog", "err", err)
	}
	return c
}

// exportGauges sets this agent's cluster-wide gauges to c. A scrape reads
// the last values and never queries the database.
func (s *Service) exportGauges(c clusterStats) {
	if c.HasQueue {
		s.cfg.Metrics.SetQueue(c.Queue)
	}
	if c.HasAgents {
		s.cfg.Metrics.SetAgents(c.Agents)
	}
	if c.HasCleanups {
		s.pending.Set(float64(c.CleanupsPending))
		s.cfg.Metrics.CleanupsOldest.Set(c.CleanupsOldest.Seconds())
	}
}

// refreshGauges measures the cluster-wide gauges and exports them.
func (s *Service) refreshGauges(ctx context.Context) clusterStats {
	c := s.measureGauges(ctx)
	s.exportGauges(c)
	return c
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
