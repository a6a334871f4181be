package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/store"
)

// When the database forgets. A failover to an asynchronous standby that had
// not received the last commits, or a crash with synchronous_commit off,
// leaves a database without writes it had acknowledged. Those are claims,
// running writes, checkpoints, output and ends. The agent notices (a new
// timeline, or a WAL position behind one it saw, see internal/dbhistory) and
// holds back its claims and writes. It compares what it knows it stored about
// every attempt it holds, or ended a moment ago, with what the database now
// says (decideRepair), and repairs each. It re-asserts lost claims and
// running writes and stores lost ends again. It hands resumable jobs whose
// checkpoint or output was lost to a resume from the checkpoint the database
// kept (their plugin writes that output again). It stops what is no longer
// its own. It marks on the job, never silently, whatever is lost for good.

// Why a job's context was cancelled by the reconcile.
var (
	// errHistoryLost means the job is not this process's any more in the
	// database that lost its history. Stop, and write nothing.
	errHistoryLost = errors.New("the database lost this agent's lease with its history")
	// errHistoryResume marks a resumable job whose checkpoint or output the
	// database lost. Release it to be resumed from the checkpoint it kept.
	errHistoryResume = errors.New("the database lost this job's latest checkpoint with its history")
)

const (
	// recentEndsKeep is how long an acknowledged end or release is
	// remembered, so a database that lost it can be given it again. It is
	// longer than a failover takes to be noticed (the outage, then a
	// keepalive).
	recentEndsKeep = 5 * time.Minute
	// recentEndsMax bounds the memory of them.
	recentEndsMax = 10000
	// reconcileTimeout bounds one reconcile. What it could not check waits
	// for the janitor's rules, fenced as ever.
	reconcileTimeout = 30 * time.Second
)

// recentEnd is an attempt this process ended (or released) and the
// database acknowledged.
type recentEnd struct {
	key   jobKey
	known known
	at    time.Time
}

// rememberEnd records an acknowledged end or release of j (a release passes e
// nil).
func (s *Service) rememberEnd(j *runningJob, e *store.End) {
	k := s.knownOf(j)
	k.Ended, k.Released = e, e == nil
	now := time.Now()
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	s.recent = append(s.recent, recentEnd{key: j.key, known: k, at: now})
	drop := 0
	for drop < len(s.recent) && (len(s.recent)-drop > recentEndsMax || now.Sub(s.recent[drop].at) > recentEndsKeep) {
		drop++
	}
	s.recent = append(s.recent[:0], s.recent[drop:]...)
}

// knownOf is what this process knows it stored about j's attempt.
func (s *Service) knownOf(j *runningJob) known {
	return known{Lease: j.key.Lease, Attempt: j.claimed.Job.Attempt, Called: j.called.Load(), Resumable: j.resumable,
		StoredSeq: s.logs.storedSeq(j.key), Handle: j.lastHandle()}
}

// onHistoryChange is the tracker's OnChange. It hands the change to the
// reconcile loop without waiting, because it runs on a heartbeat or a new
// connection. A newer change replaces one not yet read.
func (s *Service) onHistoryChange(e dbhistory.Event) {
	offerNewest(s.historyChanges, e)
}

// historySettled reports whether claims may go ahead. They may when no
// reconcile is pending and the pause after the last one is over. Every holder
// gets that long to re-assert what the database lost before anyone claims it.
func (s *Service) historySettled() bool {
	select {
	case <-s.cfg.History.Pending():
	default:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !time.Now().Before(s.claimsPausedUntil)
}

// reconcileLoop runs a reconcile for each change of history.
func (s *Service) reconcileLoop(ctx context.Context) {
	receiveEach(ctx, s.historyChanges, func(e dbhistory.Event) {
		s.reconcile(ctx, e)
		s.mu.Lock()
		s.claimsPausedUntil = time.Now().Add(2 * s.cfg.Keepalive)
		s.mu.Unlock()
		s.cfg.History.Settle(e.Episode)
		signal(s.cfg.TestSignals.Reconciled, e)
	})
}

// reconcile checks every attempt this process holds or ended recently
// against the database and repairs what it lost.
func (s *Service) reconcile(ctx context.Context, e dbhistory.Event) {
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	s.cfg.Metrics.DatabaseHistory.WithLabelValues(e.Change.String()).Inc()
	s.log.Error("the database's history changed: it may have lost writes it had acknowledged; checking every job this agent holds before writing again",
		"change", e.Change.String(), "was", e.Known.String(), "now", e.Seen.String())

	type entry struct {
		j   *runningJob // nil for an ended attempt
		key jobKey
		k   known
	}
	var entries []entry
	var ids []string
	s.mu.Lock()
	for key, j := range s.jobs {
		if !j.ended.Load() {
			entries = append(entries, entry{j: j, key: key, k: s.knownOf(j)})
			ids = append(ids, key.ID)
		}
	}
	s.mu.Unlock()
	s.recentMu.Lock()
	for _, r := range s.recent {
		entries = append(entries, entry{key: r.key, k: r.known})
		ids = append(ids, r.key.ID)
	}
	s.recentMu.Unlock()
	if len(entries) == 0 {
		s.log.Info("the database's history changed; this agent held no job")
		return
	}
	db := s.cfg.Liveness
	var states map[string]store.HeldState
	if err := retryFor(ctx, func(ctx context.Context) error {
		var err error
		states, err = db.ReadHeld(ctx, ids)
		return err
	}); err != nil {
		s.log.Error("could not read the jobs this agent holds after the database's history changed; the fences and the janitor's rules settle them", "err", err)
		return
	}
	lost := 0
	for _, en := range entries {
		var st *store.HeldState
		if h, ok := states[en.key.ID]; ok {
			st = &h
		}
		r := decideRepair(s.cfg.Holder.Generation, en.k, st)
		if r.Lost {
			lost++
			s.applyRepair(ctx, en.j, en.key, en.k, r)
		}
	}
	s.log.Warn("checked every job this agent holds after the database's history changed", "jobs", len(entries), "with_losses", lost)
}

// applyRepair carries out r for one attempt the database lost writes of.
func (s *Service) applyRepair(ctx context.Context, j *runningJob, key jobKey, k known, r repair) {
	rp := &repairer{s: s, ctx: ctx, j: j, key: key, log: s.log.With("job", key.ID, "lease", key.Lease)}
	if rp.restoreClaim(k, r) {
		rp.settle(k, r)
	}
	s.cfg.Metrics.HistoryLost.Inc()
	rp.log.Warn("the database had lost writes about this job", "what", r.Why)
	msg := fmt.Sprintf("agent %s, lease %d: %s", s.cfg.Holder.Name, key.Lease, r.Why)
	if err := retryFor(ctx, func(ctx context.Context) error {
		return s.cfg.Liveness.RecordEvent(ctx, s.cfg.Holder, key.ID, 0, "database_history_lost", msg)
	}); err != nil {
		rp.log.Error("recording the job's database_history_lost event", "err", err)
	}
}

// repairer carries out one attempt's repair (j is nil for an ended attempt).
type repairer struct {
	s   *Service
	ctx context.Context
	j   *runningJob
	key jobKey
	log *slog.Logger
}

// write runs one of the repair's writes until it lands. It reports
// whether it did. A fence that refuses it stops the runner.
func (rp *repairer) write(what string, fn func(ctx context.Context) error) bool {
	err := retryFor(rp.ctx, fn)
	if errors.Is(err, store.ErrLeaseLost) {
		rp.log.Warn(what+": the database has moved on; stopping without writing", "err", err)
		if rp.j != nil {
			rp.j.cancel(errHistoryLost)
		}
		return false
	}
	if err != nil {
		rp.log.Error(what+" failed; the fences and the janitor's rules settle the job", "err", err)
		return false
	}
	return true
}

// restoreClaim re-asserts a lost claim and stores running again, as r
// says. It reports whether the rest of the repair may go ahead.
func (rp *repairer) restoreClaim(k known, r repair) bool {
	db, h, key := rp.s.cfg.Liveness, rp.s.cfg.Holder, rp.key
	if r.Reassert && !rp.write("re-asserting the lost claim", func(ctx context.Context) error {
		return db.Reassert(ctx, h, key.ID, key.Lease, k.Attempt, k.Called)
	}) {
		return false
	}
	if !r.MarkRunning {
		return true
	}
	return rp.write("storing running again", func(ctx context.Context) error {
		statuses, err := db.MarkRunningBatch(ctx, []store.Running{{JobID: key.ID, Lease: key.Lease, Generation: h.Generation,
			Message: fmt.Sprintf("attempt %d on %s (re-asserted after the database lost it)", k.Attempt, h.Name)}})
		if err == nil && statuses[0] == "" {
			err = store.ErrLeaseLost
		}
		return err
	})
}

// settle stops, releases or stores the end of the attempt again, as r says.
func (rp *repairer) settle(k known, r repair) {
	db, h, key, j := rp.s.cfg.Liveness, rp.s.cfg.Holder, rp.key, rp.j
	switch {
	case r.Stop && j != nil:
		j.cancel(errHistoryLost)
	case r.Release && j != nil:
		j.cancel(errHistoryResume) // the executor releases it once the reconcile is over
	case r.Release || r.Rerelease:
		rp.write("releasing again", func(ctx context.Context) error {
			return db.Release(ctx, h, key.ID, key.Lease, historyResumeReason)
		})
	case r.RestoreEnd:
		e := *k.Ended
		e.CleanupBy, e.CleanupHold = "", 0 // the queue runs a Cleanup due again
		rp.write("storing the end again", func(ctx context.Context) error {
			_, err := db.EndAttempt(ctx, e)
			return err
		})
	}
}

// retryFor runs fn until it succeeds, its fence refuses it, or ctx ends, with
// a short backoff. The database has just come back.
func retryFor(ctx context.Context, fn func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(tctx)
		cancel()
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		if !sleepCtx(ctx, wait) {
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
		wait = min(2*wait, writeRetryMax)
	}
}
