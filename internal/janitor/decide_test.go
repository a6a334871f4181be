package janitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/jobctx"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

var testRules = Rules{StaleJob: 120 * time.Second, OfflineAfter: 15 * time.Second, AWOLTimeout: time.Hour, ActiveTimeoutGrace: 20 * time.Second}

// queuedFor sets the job's pending_timeout and how long it has been due.
func queuedFor(timeout, age time.Duration) func(*Input) {
	return func(in *Input) { in.PendingTimeout, in.QueuedAge = timeout, age }
}

// activeFor sets the job's active_timeout and its attempt's age.
func activeFor(timeout, age time.Duration) func(*Input) {
	return func(in *Input) { in.ActiveTimeout, in.AttemptAge = timeout, age }
}

// owned is a job of command c held by agent a1 (generation g1), whose agents
// row is live, silent for hb. A live agent serves c, and its plugin p is
// loaded and resumable, unless a case says not.
func owned(status jobstate.JobStatus, hb time.Duration) Input {
	return Input{
		Status: status, Command: "c", Plugin: "p", Started: status == "running" || status == "canceling",
		AgentName: "a1", AgentGeneration: "g1", HeartbeatAge: hb,
		Owner:  Owner{Exists: true, Generation: "g1", State: "running", LastSeenAge: hb},
		Served: true, PluginLoaded: true, Resumable: true,
		Rules: testRules,
	}
}

func unowned(status jobstate.JobStatus) Input {
	return Input{Status: status, Command: "c", Plugin: "p", Served: true, PluginLoaded: true, Resumable: true, Rules: testRules}
}

func with(in Input, fs ...func(*Input)) Input {
	for _, f := range fs {
		f(&in)
	}
	return in
}

var (
	gone      = func(in *Input) { in.Owner = Owner{} }
	restarted = func(in *Input) { in.Owner.Generation = "g2" }
	stopped   = func(in *Input) { in.Owner.State = "stopped" }
	draining  = func(in *Input) { in.Owner.State = "draining" }
	notResum  = func(in *Input) { in.Resumable = false }
	notLoaded = func(in *Input) { in.Resumable, in.PluginLoaded = false, false }
	unserved  = func(in *Input) { in.Served, in.Resumable, in.PluginLoaded = false, false, false }
	notStart  = func(in *Input) { in.Started = false }
)

func released(age time.Duration) Input {
	in := unowned("running")
	in.Started, in.Released, in.ReleasedAge = true, true, age
	return in
}

// noResume and notLoadedMsg are the truthful reasons a running job of
// command c on plugin p is failed rather than released.
func noResume(prefix string) string {
	return prefix + ` (plugin "p" does not declare resume on any live agent serving command "c", so the job cannot be resumed)`
}

func notLoadedMsg(prefix string) string {
	return prefix + ` (plugin "p" is not loaded by any live agent serving command "c", so the job cannot be resumed)`
}

func TestDecide(t *testing.T) {
	const stale = 130 * time.Second
	tests := []struct {
		name string
		in   Input
		want Action
	}{
		// Terminal jobs are never touched.
		{"succeeded", unowned("succeeded"), Action{Kind: None}},
		{"failed", unowned("failed"), Action{Kind: None}},
		{"canceled", unowned("canceled"), Action{Kind: None}},
		{"unknown status", unowned("archived"), Action{Kind: None}},

		// Queued and accepted jobs ran nothing. Requeue when the owner is not
		// live.
		{"queued unowned", unowned("queued"), Action{Kind: None}},

		// pending_timeout is counted from when the job became due.
		{"queued, pending_timeout off", with(unowned("queued"), queuedFor(0, 48*time.Hour)), Action{Kind: None}},
		{"queued, within pending_timeout", with(unowned("queued"), queuedFor(time.Minute, time.Minute-time.Millisecond)), Action{Kind: None}},
		{"queued, past pending_timeout", with(unowned("queued"), queuedFor(time.Minute, time.Minute)),
			Action{Kind: FailPending, Reason: "pending timeout: not started within pending_timeout (1m0s)"}},
		{"queued, past pending_timeout in days", with(unowned("queued"), queuedFor(48*time.Hour, 49*time.Hour)),
			Action{Kind: FailPending, Reason: "pending timeout: not started within pending_timeout (2d)"}},
		{"accepted past pending_timeout: claimed, not pending", with(owned("accepted", time.Second), queuedFor(time.Minute, time.Hour)), Action{Kind: None}},

		// Nobody can claim it, because no live agent serves the command.
		{"queued backlog of a served command, due for days", with(unowned("queued"), queuedFor(0, 72*time.Hour)), Action{Kind: None}},
		{"queued, unserved, due just under awol_timeout", with(unowned("queued"), unserved, queuedFor(0, time.Hour-time.Millisecond)), Action{Kind: None}},
		{"queued, unserved, due for awol_timeout", with(unowned("queued"), unserved, queuedFor(0, time.Hour)),
			Action{Kind: FailUnclaimed, Reason: `awol: no agent claimed it within awol_timeout (1h0m0s); no live agent serves command "c"`}},
		{"queued, unserved, pending_timeout governs (not yet)", with(unowned("queued"), unserved, queuedFor(2*time.Hour, 90*time.Minute)), Action{Kind: None}},
		{"queued, unserved, pending_timeout governs (past)", with(unowned("queued"), unserved, queuedFor(2*time.Hour, 2*time.Hour)),
			Action{Kind: FailPending, Reason: "pending timeout: not started within pending_timeout (2h0m0s)"}},
		{"queued, unserved, waiting for a Cleanup (run_after infinity)", with(unowned("queued"), unserved, queuedFor(0, 0)), Action{Kind: None}},
		{"queued, unserved, retry not due yet", with(unowned("queued"), unserved, queuedFor(0, -time.Minute)), Action{Kind: None}},
		{"queued but owned, unserved: the owner's rules", with(owned("queued", time.Second), unserved, queuedFor(0, 2*time.Hour)), Action{Kind: None}},
		{"accepted unowned, unserved", with(unowned("accepted"), unserved, queuedFor(0, 2*time.Hour)), Action{Kind: None}},

		// active_timeout backup. A live owner gets active_timeout + grace.
		{"running, owner fresh, within active_timeout + grace", with(owned("running", time.Second), activeFor(time.Minute, time.Minute+testRules.ActiveTimeoutGrace-time.Millisecond)), Action{Kind: None}},
		{"running, owner fresh, past active_timeout + grace", with(owned("running", time.Second), activeFor(time.Minute, time.Minute+testRules.ActiveTimeoutGrace)),
			Action{Kind: FailActiveTimeout, Cleanup: true, Reason: "active_timeout of 1m0s exceeded (running for 80s; agent a1 did not stop it, so the janitor failed it)"}},
		{"running, active_timeout off", with(owned("running", time.Second), activeFor(0, 100*time.Hour)), Action{Kind: None}},
		{"running past active_timeout, owner stale: the stale rule", with(owned("running", stale), activeFor(time.Minute, time.Hour), notResum),
			Action{Kind: Fail, Reason: noResume("awol: agent a1 silent for 130s"), Cleanup: true}},
		{"accepted unowned", unowned("accepted"), Action{Kind: None}},
		{"accepted, owner fresh", owned("accepted", 2*time.Second), Action{Kind: None}},
		{"accepted, just under offline_after", owned("accepted", 15*time.Second-time.Millisecond), Action{Kind: None}},
		{"accepted, owner offline", owned("accepted", 16*time.Second),
			Action{Kind: Requeue, Reason: "requeued: agent a1 offline, silent for 16s; the job never started"}},
		{"accepted, owner missing", with(owned("accepted", 0), gone),
			Action{Kind: Requeue, Reason: "requeued: agent a1 is gone; the job never started"}},
		{"accepted, owner restarted, fresh heartbeat", with(owned("accepted", 0), restarted),
			Action{Kind: Requeue, Reason: "requeued: agent a1 restarted; the job never started"}},
		{"accepted, owner stopped", with(owned("accepted", 0), stopped),
			Action{Kind: Requeue, Reason: "requeued: agent a1 stopped; the job never started"}},
		{"queued but owned, owner offline", owned("queued", time.Minute),
			Action{Kind: Requeue, Reason: "requeued: agent a1 offline, silent for 60s; the job never started"}},

		// Running with a live owner does nothing. The owner enforces
		// active_timeout.
		{"running, owner fresh", owned("running", time.Second), Action{Kind: None}},
		{"running, offline but not stale", owned("running", 60*time.Second), Action{Kind: None}},
		{"running, owner draining and fresh", with(owned("running", time.Second), draining), Action{Kind: None}},
		{"running, fresh, plugin gone", with(owned("running", time.Second), notLoaded), Action{Kind: None}},

		// Running, owner stale / gone / restarted, resumable. Release.
		{"running, stale, resumable", owned("running", stale), Action{Kind: Release, Reason: "stale for 130s"}},
		{"running, exactly stale_job", owned("running", 120*time.Second), Action{Kind: Release, Reason: "stale for 120s"}},
		{"running, restarted, resumable (no wait)", with(owned("running", 0), restarted), Action{Kind: Release, Reason: "agent restarted"}},
		{"running, gone, resumable", with(owned("running", 0), gone), Action{Kind: Release, Reason: "agent gone"}},
		{"running, stopped, resumable", with(owned("running", 0), stopped), Action{Kind: Release, Reason: "agent stopped"}},

		// Running, owner stale / gone / restarted, not resumable. Fail +
		// Cleanup.
		{"running, stale, not resumable", with(owned("running", stale), notResum),
			Action{Kind: Fail, Reason: noResume("awol: agent a1 silent for 130s"), Cleanup: true}},
		{"running, restarted, not resumable (no wait)", with(owned("running", 0), restarted, notResum),
			Action{Kind: Fail, Reason: noResume("agent restarted"), Cleanup: true}},
		{"running, gone, not resumable", with(owned("running", 0), gone, notResum),
			Action{Kind: Fail, Reason: noResume("awol: agent a1 gone"), Cleanup: true}},
		{"running, stopped, not resumable", with(owned("running", 0), stopped, notResum),
			Action{Kind: Fail, Reason: noResume("awol: agent a1 stopped"), Cleanup: true}},

		// The plugin is not loaded by a live agent serving the command.
		{"running, stale, plugin not loaded anywhere", with(owned("running", stale), notLoaded),
			Action{Kind: Fail, Reason: notLoadedMsg("awol: agent a1 silent for 130s"), Cleanup: true}},
		{"running, restarted, plugin not loaded anywhere", with(owned("running", 0), restarted, notLoaded),
			Action{Kind: Fail, Reason: notLoadedMsg("agent restarted"), Cleanup: true}},
		{"running, stale, resumable flag but not loaded", with(owned("running", stale), func(in *Input) { in.PluginLoaded = false }),
			Action{Kind: Fail, Reason: notLoadedMsg("awol: agent a1 silent for 130s"), Cleanup: true}},

		// No live agent serves the command. Nobody would claim a release,
		// whatever the plugin could do.
		{"running, stale, command served by no live agent", with(owned("running", stale), unserved),
			Action{Kind: Fail, Reason: `awol: agent a1 silent for 130s (no live agent serves command "c", so the job cannot be resumed)`, Cleanup: true}},
		{"running, gone, resumable plugin but command unserved", with(owned("running", 0), gone, func(in *Input) { in.Served = false }),
			Action{Kind: Fail, Reason: `awol: agent a1 gone (no live agent serves command "c", so the job cannot be resumed)`, Cleanup: true}},
		{"running, fresh, command unserved: the owner is alive", with(owned("running", time.Second), unserved), Action{Kind: None}},

		// Released and unclaimed.
		{"released, within awol_timeout", released(59 * time.Minute), Action{Kind: None}},
		{"released, past awol_timeout", released(61 * time.Minute),
			Action{Kind: FailAWOL, Reason: "awol: not resumed within awol_timeout (1h0m0s)", Cleanup: true}},
		{"released, past awol_timeout, plugin gone", with(released(2*time.Hour), notLoaded),
			Action{Kind: FailAWOL, Reason: "awol: not resumed within awol_timeout (1h0m0s)", Cleanup: true}},
		{"released, plugin gone, within awol_timeout", with(released(time.Minute), notLoaded), Action{Kind: None}},
		{"released, command unserved, within awol_timeout", with(released(time.Minute), unserved), Action{Kind: None}},
		{"running unowned, never released", unowned("running"), Action{Kind: None}},

		// Canceling.
		{"canceling, owner fresh", owned("canceling", time.Second), Action{Kind: None}},
		{"canceling, owner offline but not stale", owned("canceling", 60*time.Second), Action{Kind: None}},
		{"canceling, owner stale", owned("canceling", stale),
			Action{Kind: Cancel, Reason: "canceled by request; agent a1 stopped answering, so the janitor finished the cancel", Cleanup: true}},
		{"canceling, owner restarted", with(owned("canceling", 0), restarted),
			Action{Kind: Cancel, Reason: "canceled by request; agent a1 stopped answering, so the janitor finished the cancel", Cleanup: true}},
		{"canceling, owner gone", with(owned("canceling", 0), gone),
			Action{Kind: Cancel, Reason: "canceled by request; agent a1 stopped answering, so the janitor finished the cancel", Cleanup: true}},
		{"canceling, unowned (released)", with(unowned("canceling"), func(in *Input) { in.Started = true }),
			Action{Kind: Cancel, Reason: "canceled by request; no live agent held the job, so the janitor finished the cancel", Cleanup: true}},
		{"canceling, never started, owner offline", with(owned("canceling", 16*time.Second), notStart),
			Action{Kind: Cancel, Reason: "canceled by request; agent a1 stopped answering, so the janitor finished the cancel"}},
		{"canceling, never started, owner fresh", with(owned("canceling", time.Second), notStart), Action{Kind: None}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Decide(tt.in))
		})
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := time.Second, 5*time.Minute
	assert.Equal(t, time.Second, cleanupBackoff(1, lo, hi))
	assert.Equal(t, 2*time.Second, cleanupBackoff(2, lo, hi))
	assert.Equal(t, 4*time.Second, cleanupBackoff(3, lo, hi))
	assert.Equal(t, 256*time.Second, cleanupBackoff(9, lo, hi))
	assert.Equal(t, hi, cleanupBackoff(10, lo, hi))
	assert.Equal(t, hi, cleanupBackoff(1000, lo, hi))
}

func TestMergeContext(t *testing.T) {
	got, err := jobctx.Merge([]byte(`{"a":1,"b":2}`), []byte(`{"b":3}`))
	assert.NoError(t, err)
	assert.JSONEq(t, `{"a":1,"b":3}`, string(got))
	got, err = jobctx.Merge(nil, nil)
	assert.NoError(t, err)
	assert.JSONEq(t, `{}`, string(got))
	_, err = jobctx.Merge([]byte(`[1]`), nil)
	assert.Error(t, err)
}

// A janitor judges the jobs of an owner by the larger of its own stale_job
// and the owner's announced one, and requeues its accepted jobs no sooner
// than three of its keepalives (internal/fleet). An owner older than v15
// announced nothing and is judged by the janitor's own.
func TestDecideJudgesByTheOwnersTimings(t *testing.T) {
	const s = time.Second
	fast := Rules{StaleJob: 20 * s, OfflineAfter: 1500 * time.Millisecond, AWOLTimeout: time.Hour, ActiveTimeoutGrace: 2 * s}
	slow := store.Timings{Keepalive: 3 * s, DeadAfter: 6 * s, StaleJob: 120 * s}
	judged := func(theirs store.Timings) func(*Input) {
		return func(in *Input) { in.Rules = fast.judging(theirs) }
	}
	tests := []struct {
		name string
		in   Input
		want Kind
	}{
		{"running, silent 30s, slow owner: within its stale_job", with(owned("running", 30*s), judged(slow)), None},
		{"running, silent 120s, slow owner: past its stale_job", with(owned("running", 120*s), judged(slow)), Release},
		{"running, silent 30s, owner announced nothing: the janitor's 20s", with(owned("running", 30*s), judged(store.Timings{})), Release},
		{"accepted, silent 5s, slow owner: within 3 of its keepalives", with(owned("accepted", 5*s), judged(slow)), None},
		{"accepted, silent 9s, slow owner: 3 of its keepalives", with(owned("accepted", 9*s), judged(slow)), Requeue},
		{"accepted, silent 2s, owner announced nothing", with(owned("accepted", 2*s), judged(store.Timings{})), Requeue},
		{"canceling, silent 30s, slow owner", with(owned("canceling", 30*s), judged(slow)), None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Decide(tt.in).Kind)
		})
	}
}
