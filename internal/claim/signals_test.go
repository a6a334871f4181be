package claim_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/claim"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

// signals gathers one agent's test signals, so a test waits for what the
// agent did instead of polling the database for it.
type signals struct {
	mu           sync.Mutex
	changed      chan struct{} // closed and replaced by every signal
	ended        []claim.Ended
	called       []claim.Called
	checkpointed []claim.Checkpointed
	flushed      []claim.Flushed
}

// watchSignals sets cfg's Ended, Called and Checkpointed signals to ones it
// gathers, and Flushed too. It reads them for as long as the test binary
// runs, so an agent never waits to send one, even while it shuts down.
func watchSignals(cfg *claim.Config) *signals {
	s := &signals{changed: make(chan struct{})}
	ended, called, checkpointed := make(chan claim.Ended), make(chan claim.Called), make(chan claim.Checkpointed)
	flushed := make(chan claim.Flushed)
	cfg.TestSignals.Ended, cfg.TestSignals.Called, cfg.TestSignals.Checkpointed = ended, called, checkpointed
	cfg.TestSignals.Flushed = flushed
	go func() {
		for {
			select {
			case e := <-ended:
				s.add(func() { s.ended = append(s.ended, e) })
			case c := <-called:
				s.add(func() { s.called = append(s.called, c) })
			case c := <-checkpointed:
				s.add(func() { s.checkpointed = append(s.checkpointed, c) })
			case f := <-flushed:
				s.add(func() { s.flushed = append(s.flushed, f) })
			}
		}
	}()
	return s
}

func (s *signals) add(record func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	record()
	close(s.changed)
	s.changed = make(chan struct{})
}

// await waits until found (called under the lock) holds of the signals
// so far, or fails the test after within.
func (s *signals) await(t *testing.T, within time.Duration, what string, found func() bool) {
	t.Helper()
	timeout := time.After(within)
	for {
		s.mu.Lock()
		ok, changed := found(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("%s: not signalled within %s (ends signalled: %+v)", what, within, s.ended)
		}
	}
}

// waitEnd waits until the agent has stored an end of job id with one of
// statuses, and returns the job as stored then. A status is a job's
// (queued for a retry) or one of the ends that store none (released,
// lease_lost, history_lost).
func (a *agent) waitEnd(t *testing.T, st *store.Store, id string, within time.Duration, statuses ...jobstate.JobStatus) store.Job {
	t.Helper()
	a.sig.await(t, within, fmt.Sprintf("job %s ending %v", id, statuses), func() bool {
		return slices.ContainsFunc(a.sig.ended, func(e claim.Ended) bool {
			return e.JobID == id && slices.Contains(statuses, jobstate.JobStatus(e.Status))
		})
	})
	return getJob(t, st, id)
}

// waitCalled waits until the agent is about to call the plugin for job id
// (running is stored, or the attempt resumes), and returns the job then.
func (a *agent) waitCalled(t *testing.T, st *store.Store, id string) store.Job {
	t.Helper()
	a.sig.await(t, 20*time.Second, "the plugin call for job "+id, func() bool {
		return slices.ContainsFunc(a.sig.called, func(c claim.Called) bool { return c.JobID == id })
	})
	return getJob(t, st, id)
}

// waitCheckpointed waits until a checkpoint of job id is stored, and with
// it the output written before it. A noop job that prints a stdout line
// and checkpoints is then inside its plugin call. The running write alone
// is not enough. It is written just before the call, and a job stopped in
// between never reaches the plugin (so it writes no cancel_file).
func (a *agent) waitCheckpointed(t *testing.T, id string) {
	t.Helper()
	a.sig.await(t, 20*time.Second, "a checkpoint of job "+id, func() bool {
		return slices.ContainsFunc(a.sig.checkpointed, func(c claim.Checkpointed) bool { return c.JobID == id })
	})
}

// waitResumed waits until the agent resumed job id and stored a checkpoint
// under the lease it resumed it with, and with it the output before it.
func (a *agent) waitResumed(t *testing.T, id string) {
	t.Helper()
	a.sig.await(t, 20*time.Second, "job "+id+" resumed and checkpointed", func() bool {
		return slices.ContainsFunc(a.sig.called, func(c claim.Called) bool {
			return c.JobID == id && c.Resume && slices.Contains(a.sig.checkpointed, claim.Checkpointed{JobID: id, Lease: c.Lease})
		})
	})
}

// waitFlushed waits until a flush stored output of job id.
func (a *agent) waitFlushed(t *testing.T, id string) {
	t.Helper()
	a.sig.await(t, 10*time.Second, "output of job "+id+" stored", func() bool {
		return slices.ContainsFunc(a.sig.flushed, func(f claim.Flushed) bool { return f.JobID == id })
	})
}

// waitIdle waits until the agent holds no job.
func (a *agent) waitIdle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.svc.WaitIdle(ctx, true), "the agent still runs %v", a.svc.Running())
}

func getJob(t *testing.T, st *store.Store, id string) store.Job {
	t.Helper()
	j, err := st.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}
