package janitor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tetherjobs/tether/internal/startstop"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// defaultBatchSize is how many active rows one janitor transaction locks
// (Config.BatchSize).
const defaultBatchSize = 100

// PassLoop is the service that, at once and then every jittered
// clean_interval, takes the fleet's janitor turn and, when it got it, runs
// a Pass and publishes the cluster gauges it measured. Every agent, turn or
// not, exports the last published gauges. One pass per interval serves the
// whole fleet, so a pass's cost per agent does not grow with the number of
// agents. Database errors are logged and retried next interval.
func (s *Service) PassLoop() *startstop.Loop {
	return s.periodic("janitor pass", func(ctx context.Context) (int, error) {
		n, took, err := s.Turn(ctx)
		if took {
			signal(ctx, s.cfg.TestSignals.Passed, Passed{Actions: n, Err: err})
		}
		return n, err
	})
}

// turnMargin is how much sooner than its clean_interval an agent may take
// the turn: the timers are jittered ±20%, so the next agent's tick comes
// a little early.
const turnMargin = 0.75

// gapPasses is how many clean_intervals without a pass mean the fleet's
// janitors were cut off (a database outage, every agent down). The first
// pass after such a gap judges nobody: every agent's last_seen is old until
// its heartbeats get through, and a pass that counted only its own agent
// live would take the other agents' commands for unserved and their
// resumable jobs for unresumable.
const gapPasses = 3

// Turn is one step of PassLoop: it takes the janitor turn and, when it got
// it, passes and publishes the gauges. It then exports the last published
// gauges. took says whether this agent passed.
func (s *Service) Turn(ctx context.Context) (n int, took bool, err error) {
	t, took, err := s.store.TakeJanitorTurn(ctx, s.cfg.Holder.Name, time.Duration(turnMargin*float64(s.cfg.CleanInterval)))
	if err != nil {
		return 0, false, err
	}
	if took {
		var stats clusterStats
		if gap := afterGap(t, s.cfg.CleanInterval); gap > 0 {
			s.log.Info("first janitor pass after a gap: judging agents from the next pass, once their heartbeats are through", "gap", gap.Round(time.Second), "server_changed", t.ServerChanged)
			stats = s.measureGauges(ctx)
		} else {
			n, stats, err = s.pass(ctx)
		}
		if stats.HasQueue || stats.HasAgents || stats.HasCleanups {
			if perr := s.store.PublishClusterStats(ctx, stats); perr != nil {
				s.log.Warn("publishing the cluster gauges", "err", perr)
			}
		}
	}
	var stats clusterStats
	if _, ok, rerr := s.store.ClusterStats(ctx, &stats); rerr != nil {
		s.log.Warn("reading the cluster gauges", "err", rerr)
	} else if ok {
		s.exportGauges(stats)
	}
	return n, took, err
}

// afterGap is how long the fleet went without a pass before t, when that is
// a gap (gapPasses intervals, or the server restarted or changed since),
// else 0. The first pass ever is no gap.
func afterGap(t store.JanitorTurn, interval time.Duration) time.Duration {
	if t.PrevPassed.IsZero() {
		return 0
	}
	since := t.Now.Sub(t.PrevPassed)
	if t.ServerChanged || since >= gapPasses*interval {
		return max(since, time.Nanosecond)
	}
	return 0
}

// Pass settles every job that needs it now, a bounded batch per transaction,
// and returns how many actions it applied. A full batch is followed by the
// next one at once. Rows a batch looked at and left alone (nothing to do, or
// changed since they were read) are not read again in the same pass, so a
// pass always ends. Then it lifts orphaned retry gates, deletes expired jobs,
// prunes long-gone agents and refreshes this agent's cluster gauges.
func (s *Service) Pass(ctx context.Context) (int, error) {
	n, _, err := s.pass(ctx)
	return n, err
}

func (s *Service) pass(ctx context.Context) (int, clusterStats, error) {
	done, err := s.batches(ctx, nil)
	total := len(done)
	if err != nil {
		return total, clusterStats{}, err
	}
	if n, err := s.store.LiftOrphanGates(ctx, s.cfg.BatchSize); err != nil {
		return total, clusterStats{}, err
	} else if n > 0 {
		s.log.Info("released retries whose Cleanup is no longer queued", "jobs", n)
	}
	if _, err := s.Retention(ctx); err != nil {
		return total, clusterStats{}, err
	}
	if _, err := s.PruneAgents(ctx); err != nil {
		s.log.Warn("pruning agents", "err", err)
	}
	return total, s.refreshGauges(ctx), nil
}

// settled is one action a batch applied, to the job of agent.
type settled struct {
	kind  Kind
	agent string
	cause Cause // the metrics label
}

// batches runs batches until one is not full. With dead set, only the jobs of
// those agents are read (a liveness pass). Otherwise every candidate is.
func (s *Service) batches(ctx context.Context, dead []DeadAgent) ([]settled, error) {
	var all []settled
	skip := []string{}
	for {
		done, left, full, err := s.batch(ctx, skip, dead)
		all = append(all, done...)
		if err != nil {
			return all, err
		}
		if !full {
			return all, nil
		}
		skip = append(skip, left...)
	}
}

// commandNames is what this process serves by its configuration, the
// commands it knows (Config.Commands), sorted. The gauges measure these.
// A pass counts them for this process only while it has no agents row of
// its own, which otherwise speaks for it.
func (s *Service) commandNames() []string {
	return slices.Sorted(maps.Keys(s.cfg.Commands))
}

// countSelf adds this process to what the live agents serve for c, when its
// own agents row did not already count (not registered yet). It serves c's
// command if it is configured here and c's plugin is loaded here.
func countSelf(in *Input, commands map[string]bool, caps func(string) (plugin.Info, bool)) {
	if commands != nil && !commands[in.Command] {
		return
	}
	info, ok := caps(in.Plugin)
	if !ok {
		return
	}
	in.Served, in.PluginLoaded = true, true
	in.Resumable = in.Resumable || info.Has(plugin.CapResume)
}

// candidateQuery is the batch query of one pass (of the dead agents only,
// when dead is set), after the rows in skip.
func (s *Service) candidateQuery(skip []string, dead []DeadAgent) store.CandidateQuery {
	q := store.CandidateQuery{
		OfflineAfter: s.cfg.OfflineAfter, AWOLTimeout: s.cfg.AWOLTimeout,
		StaleJob: s.cfg.StaleJob, ActiveGrace: s.cfg.activeTimeoutGrace(),
		Batch: s.cfg.BatchSize, Skip: skip,
		Self: s.cfg.Holder, SelfCommands: s.commandNames(),
	}
	for _, d := range dead {
		q.Dead = append(q.Dead, store.DeadGeneration{Name: d.Name, Generation: d.Generation, FreeSince: d.FreeSince})
	}
	return q
}

// batch locks, decides and applies one batch of rows not in skip (of the
// dead agents only, when dead is set). It returns the actions applied, the
// IDs of the rows it left alone and whether the batch was full (more may
// follow).
func (s *Service) batch(ctx context.Context, skip []string, dead []DeadAgent) ([]settled, []string, bool, error) {
	var applied []settled
	var left []string
	var full bool
	q := s.candidateQuery(skip, dead)
	served := setOf(q.SelfCommands)
	err := s.store.InJanitorTx(ctx, s.cfg.IdleInTransaction, func(tx store.JanitorTx) error {
		applied, left = applied[:0], left[:0]
		rows, err := tx.Candidates(ctx, q)
		if err != nil {
			return err
		}
		full = len(rows) == s.cfg.BatchSize
		if s.afterCandidates != nil {
			s.afterCandidates(ctx)
		}
		for _, r := range rows {
			c := candidateOf(r)
			if !c.SelfRegistered {
				countSelf(&c.Input, served, s.plugins.Info)
			}
			c.Input.Rules = s.cfg.rules().judging(c.Input.Owner.Timings)
			a := Decide(c.Input)
			ok, err := apply(ctx, tx, s.cfg.Holder, c, a)
			if err != nil {
				return err
			}
			if !ok {
				left = append(left, c.JobID)
				continue
			}
			applied = append(applied, settled{kind: a.Kind, agent: c.Input.AgentName, cause: CauseOf(a.Kind, c.Input)})
			s.log.Info("janitor settled job", "job", c.JobID, "action", string(a.Kind),
				"reason", a.Reason, "was_held_by", c.Input.AgentName, "cleanup", a.Cleanup)
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("janitor batch: %w", err)
	}
	for _, a := range applied {
		s.actions.WithLabelValues(string(a.kind), string(a.cause)).Inc()
	}
	return applied, left, full, nil
}

// setOf is names as a set.
func setOf(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}
