package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The checker itself, on hand-written timelines. The sequences tether
// legitimately produces pass, and each kind of violation is reported under
// its invariant.

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// tl builds a job's events. At is milliseconds after t0.
type tl struct {
	evs []event
	j   []invJournalLine
}

func (b *tl) ev(ms int, kind, agent, gen string, lease int64, msg string) *tl {
	b.evs = append(b.evs, event{ID: int64(len(b.evs) + 1), At: t0.Add(time.Duration(ms) * time.Millisecond),
		Kind: kind, Agent: agent, Generation: gen, Lease: lease, Message: msg})
	return b
}

func (b *tl) work(ev string, ms, attempt, pid int, outcome string) *tl {
	b.j = append(b.j, invJournalLine{Event: ev, Attempt: attempt, PID: pid, TimeNS: t0.Add(time.Duration(ms) * time.Millisecond).UnixNano(), Outcome: outcome})
	return b
}

func (b *tl) checkpoint(calledMS, attempt, pid, agentPID int) *tl {
	at := t0.Add(time.Duration(calledMS) * time.Millisecond)
	b.j = append(b.j, invJournalLine{Event: "checkpoint", Attempt: attempt, PID: pid, TimeNS: at.Add(5 * time.Millisecond).UnixNano(),
		CalledNS: at.UnixNano(), Outcome: "accepted", AgentPID: agentPID})
	return b
}

func (b *tl) job(status string, attempt int) invJob {
	return invJob{ID: "job", Command: "resumable", Status: status, Attempt: attempt, Events: b.evs, Journal: b.j}
}

var checkerAgents = map[int]invAgent{100: {"a1", "gen-a1"}, 200: {"a2", "gen-a2"}}

func invariantsOf(j invJob, now time.Time) (nums []int, msgs string) {
	vs := checkInvariants(invData{Now: now, Jobs: []invJob{j}, Agents: checkerAgents})
	var b strings.Builder
	for _, v := range vs {
		nums = append(nums, v.Invariant)
		fmt.Fprintf(&b, "%s\n", v)
	}
	return nums, b.String() + summarize(j, now)
}

func TestInvariantCheckerAcceptsLegitimateTimelines(t *testing.T) {
	now := t0.Add(time.Minute)
	cases := map[string]invJob{
		"success": new(tl).
			ev(0, "submitted", "", "", 0, "").
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "attempt 1 on a1").
			work("start", 30, 1, 7, "").checkpoint(35, 1, 7, 100).
			work("end", 3030, 1, 7, "ok").
			ev(3100, "succeeded", "a1", "gen-a1", 1, "").
			job("succeeded", 1),
		"killed agent: released by the janitor, resumed; the old holder notices late": new(tl).
			ev(0, "submitted", "", "", 0, "").
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").checkpoint(35, 1, 7, 100).
			ev(2000, "released", "a2", "gen-a2", 2, "released: stale").
			ev(2010, "claimed", "a2", "gen-a2", 3, "attempt 1").
			ev(2020, "resumed", "a2", "gen-a2", 3, "resumed by a2").
			work("end", 3030, 1, 7, "ok").
			ev(3100, "succeeded", "a2", "gen-a2", 3, "").
			ev(3200, "lease_lost", "a1", "gen-a1", 1, "fenced off").
			job("succeeded", 1),
		"retriable failure, Cleanup, retry": new(tl).
			ev(0, "submitted", "", "", 0, "").
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").
			work("end", 1030, 1, 7, "retriable").
			ev(1100, "retry_scheduled", "a1", "gen-a1", 2, "attempt 2 after Cleanup, not before …").
			ev(1150, "cleanup_ok", "a1", "gen-a1", 1, "").
			ev(1300, "claimed", "a2", "gen-a2", 3, "attempt 2").
			ev(1310, "running", "a2", "gen-a2", 3, "").
			work("start", 1320, 2, 8, "").checkpoint(1325, 2, 8, 200).
			work("end", 2320, 2, 8, "ok").
			ev(2400, "succeeded", "a2", "gen-a2", 3, "").
			job("succeeded", 2),
		"active_timeout: killed by Cleanup, then retried": new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").
			ev(2000, "retry_scheduled", "a1", "gen-a1", 2, "attempt 2 after Cleanup").
			work("killed", 2050, 1, 7, "").
			ev(2060, "cleanup_ok", "a1", "gen-a1", 1, "").
			ev(2100, "claimed", "a1", "gen-a1", 3, "attempt 2").
			ev(2110, "running", "a1", "gen-a1", 3, "").
			work("start", 2120, 2, 9, "").
			work("end", 2500, 2, 9, "ok").
			ev(2600, "succeeded", "a1", "gen-a1", 3, "").
			job("succeeded", 2),
		"canceled while running, Cleanup kills the work": new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").
			ev(500, "cancel_requested", "", "", 0, "").
			ev(600, "canceled", "a1", "gen-a1", 1, "canceled by request").
			work("killed", 650, 1, 7, "").
			ev(660, "cleanup_ok", "a1", "gen-a1", 1, "").
			job("canceled", 1),
		"canceled while queued": new(tl).
			ev(0, "submitted", "", "", 0, "").
			ev(5, "canceled", "", "", 0, "canceled by request").
			job("canceled", 1),
		"operator requeue of a failed job, above every earlier lease": new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").
			work("end", 300, 1, 7, "permanent").
			ev(400, "failed", "a1", "gen-a1", 1, "boom").
			ev(1000, "requeued", "", "", 0, "requeued by op (key k): again").
			ev(1010, "claimed", "a2", "gen-a2", 3, "attempt 2").
			ev(1020, "running", "a2", "gen-a2", 3, "").
			work("start", 1030, 2, 8, "").
			work("end", 1300, 2, 8, "ok").
			ev(1400, "succeeded", "a2", "gen-a2", 3, "").
			job("succeeded", 2),
		"janitor's final, requeue, claim at the janitor's lease": new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			ev(3000, "failed", "a2", "gen-a2", 2, "awol: agent a1 silent").
			ev(3100, "cleanup_ok", "a2", "gen-a2", 0, "attempt 1").
			ev(4000, "requeued", "", "", 0, "requeued by op").
			ev(4010, "claimed", "a2", "gen-a2", 2, "attempt 2").
			ev(4020, "running", "a2", "gen-a2", 2, "").
			ev(4400, "succeeded", "a2", "gen-a2", 2, "").
			job("succeeded", 2),
		"still running work counts until now, alone it is fine": func() invJob {
			j := new(tl).
				ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
				ev(20, "running", "a1", "gen-a1", 1, "").
				work("start", 30, 1, 7, "").
				job("running", 1)
			j.Open = "test: expected"
			j.Alive = map[int]bool{7: true}
			return j
		}(),
	}
	for name, j := range cases {
		if nums, msgs := invariantsOf(j, now); len(nums) > 0 {
			t.Errorf("%s: violations %v reported for a legitimate timeline:\n%s", name, nums, msgs)
		}
	}
}

func TestInvariantCheckerReportsViolations(t *testing.T) {
	now := t0.Add(time.Minute)
	cases := []struct {
		name string
		job  invJob
		want []int // each must be reported (others may be too)
	}{
		{"lease below an earlier one after an operator requeue", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			ev(1000, "released", "a1", "gen-a1", 2, "handoff").
			ev(1010, "claimed", "a1", "gen-a1", 3, "attempt 1").
			ev(1400, "failed", "a1", "gen-a1", 3, "boom").
			ev(2000, "requeued", "", "", 0, "requeued by op").
			ev(2010, "claimed", "a2", "gen-a2", 2, "attempt 2").
			ev(2020, "running", "a2", "gen-a2", 2, "").
			ev(2400, "succeeded", "a2", "gen-a2", 2, "").
			job("succeeded", 2), []int{2}},
		{"lease handed out again after a second operator requeue", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(400, "failed", "a1", "gen-a1", 1, "boom").
			ev(1000, "requeued", "", "", 0, "requeued by op").
			ev(1010, "claimed", "a1", "gen-a1", 2, "attempt 2").
			ev(1400, "failed", "a1", "gen-a1", 2, "boom").
			ev(2000, "requeued", "", "", 0, "requeued by op").
			ev(2010, "claimed", "a2", "gen-a2", 2, "attempt 3").
			ev(2400, "succeeded", "a2", "gen-a2", 2, "").
			job("succeeded", 3), []int{1}},
		{"a holder of an earlier attempt writes under a reused lease", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(400, "failed", "a1", "gen-a1", 1, "boom").
			ev(1000, "requeued", "", "", 0, "requeued by op").
			ev(1010, "claimed", "a1", "gen-a1", 2, "attempt 2").
			ev(1020, "running", "a1", "gen-a1", 2, "").
			ev(1400, "failed", "a2", "gen-a2", 3, "awol: agent a1 silent").
			ev(2000, "requeued", "", "", 0, "requeued by op").
			ev(2010, "claimed", "a2", "gen-a2", 2, "attempt 3").
			ev(2400, "succeeded", "a1", "gen-a1", 2, "").
			job("succeeded", 3), []int{1, 2}},
		{"final write from a lease the janitor released", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			ev(2000, "released", "a2", "gen-a2", 2, "released: stale").
			ev(2100, "succeeded", "a1", "gen-a1", 1, "").
			job("succeeded", 1), []int{2}},
		{"checkpoint accepted after the lease was superseded", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			ev(1000, "retry_scheduled", "a1", "gen-a1", 2, "attempt 2 at …").
			checkpoint(1500, 1, 7, 100).
			ev(2000, "claimed", "a2", "gen-a2", 3, "attempt 2").
			ev(2100, "succeeded", "a2", "gen-a2", 3, "").
			job("succeeded", 2), []int{2}},
		{"two attempts' work at once", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").
			ev(500, "retry_scheduled", "a1", "gen-a1", 2, "attempt 2 at …: plugin resumable crashed").
			ev(700, "claimed", "a2", "gen-a2", 3, "attempt 2").
			ev(710, "running", "a2", "gen-a2", 3, "").
			work("start", 720, 2, 8, "").
			work("end", 3030, 1, 7, "ok").
			work("end", 3720, 2, 8, "ok").
			ev(3800, "succeeded", "a2", "gen-a2", 3, "").
			job("succeeded", 2), []int{3}},
		{"an earlier attempt's work still alive", func() invJob {
			j := new(tl).
				ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
				work("start", 30, 1, 7, "").
				ev(500, "failed", "a1", "gen-a1", 1, "plugin crashed").
				ev(600, "requeued", "", "", 0, "requeued by op").
				ev(700, "claimed", "a2", "gen-a2", 3, "attempt 2").
				work("start", 720, 2, 8, "").
				work("end", 1720, 2, 8, "ok").
				ev(1800, "succeeded", "a2", "gen-a2", 3, "").
				job("succeeded", 2)
			j.Alive = map[int]bool{7: true}
			return j
		}(), []int{3}},
		{"two final events", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			ev(1000, "succeeded", "a1", "gen-a1", 1, "").
			ev(1010, "failed", "a2", "gen-a2", 2, "awol").
			job("failed", 1), []int{4}},
		{"not terminal", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			job("accepted", 1), []int{4}},
		{"claimed again after the cancel", new(tl).
			ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").
			ev(20, "running", "a1", "gen-a1", 1, "").
			work("start", 30, 1, 7, "").
			ev(500, "cancel_requested", "", "", 0, "").
			ev(600, "canceled", "a2", "gen-a2", 2, "canceled").
			ev(700, "claimed", "a2", "gen-a2", 3, "attempt 1").
			work("start", 720, 1, 8, "").
			job("canceled", 1), []int{5}},
	}
	for _, c := range cases {
		nums, msgs := invariantsOf(c.job, now)
		got := map[int]bool{}
		for _, n := range nums {
			got[n] = true
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("%s: invariant (%d) not reported; got %v:\n%s", c.name, w, nums, msgs)
			}
		}
	}
}

// TestInvariantCheckerOutputAndHistory covers the checks added for a
// database in between: shell runs from their own tick files (3), every
// output line once (6), a succeeded shell job's last run complete (7), and
// what a failover that lost history may legitimately leave.
func TestInvariantCheckerOutputAndHistory(t *testing.T) {
	now := t0.Add(time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	shell := func(status string, stdout []string, ticks []shellTick, kinds ...string) invJob {
		b := new(tl).ev(0, "submitted", "", "", 0, "").ev(10, "claimed", "a1", "gen-a1", 1, "attempt 1").ev(20, "running", "a1", "gen-a1", 1, "")
		for i, k := range kinds {
			b.ev(3000+i, k, "a1", "gen-a1", 0, "")
		}
		b.ev(3100, status, "a1", "gen-a1", 1, "")
		j := b.job(status, 1)
		j.Command, j.Lines, j.Stdout, j.Ticks = "shell", 2, stdout, ticks
		return j
	}
	run := []string{"a1 p7 line 1", "a1 p7 line 2", "a1 p7 slept"}
	ticks := []shellTick{{1, 7, at(100)}, {1, 7, at(200)}}
	check := func(name string, j invJob, losses []lossWindow, want ...int) {
		t.Helper()
		vs := checkInvariants(invData{Now: now, Jobs: []invJob{j}, Agents: checkerAgents, Losses: losses})
		var got []int
		var msgs []string
		for _, v := range vs {
			got = append(got, v.Invariant)
			msgs = append(msgs, v.String())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("%s: invariants %v, want %v:\n%s", name, got, want, strings.Join(msgs, "\n"))
		}
	}
	check("a complete run", shell("succeeded", run, ticks), nil)
	check("a line stored twice", shell("succeeded", append([]string{"a1 p7 line 1"}, run...), ticks), nil, 6)
	check("a line missing", shell("succeeded", []string{"a1 p7 line 2", "a1 p7 slept"}, ticks), nil, 7)
	check("a line missing, the loss on record", shell("succeeded", []string{"a1 p7 line 2", "a1 p7 slept"}, ticks, "database_history_lost"), nil)
	check("an earlier attempt's lines do not count",
		shell("succeeded", []string{"a1 p6 line 1", "a1 p7 line 2", "a1 p7 slept"}, ticks), nil, 7)
	check("attempt 1 writes after attempt 2 began",
		shell("succeeded", run, []shellTick{{1, 6, at(100)}, {2, 7, at(1000)}, {1, 6, at(1500)}}), nil, 3)
	check("one attempt run twice at once",
		shell("succeeded", run, []shellTick{{1, 6, at(100)}, {1, 7, at(200)}, {1, 6, at(900)}, {1, 7, at(950)}}), nil, 3)
	check("one attempt run twice, one after the other",
		shell("succeeded", run, []shellTick{{1, 6, at(100)}, {1, 6, at(200)}, {1, 7, at(900)}}), nil)

	missing := invJob{ID: "gone", Missing: true, Submitted: at(1500), Alive: map[int]bool{}}
	check("a job vanished", missing, nil, 4)
	check("a job submitted in a lost window vanished with it", missing, []lossWindow{{at(1000), at(2000)}})
	lateCheckpoint := new(tl).
		ev(0, "submitted", "", "", 0, "").
		work("start", 30, 1, 7, "").checkpoint(1500, 1, 7, 100).
		ev(5000, "claimed", "a1", "gen-a1", 1, "attempt 1 (re-asserted: the database had lost this claim)").
		ev(5010, "running", "a1", "gen-a1", 1, "").
		work("end", 6000, 1, 7, "ok").
		ev(6100, "succeeded", "a1", "gen-a1", 1, "").
		ev(6101, "database_history_lost", "a1", "gen-a1", 0, "").
		job("succeeded", 1)
	restarted := func(secondStart int) invJob {
		return new(tl).
			ev(0, "submitted", "", "", 0, "").
			work("start", 1500, 2, 7, "").work("end", 2500, 2, 7, "killed").
			ev(2300, "claimed", "a1", "gen-a1", 1, "attempt 2").
			ev(2310, "running", "a1", "gen-a1", 1, "").
			work("start", secondStart, 2, 8, "").work("end", 4000, 2, 8, "ok").
			ev(4100, "succeeded", "a1", "gen-a1", 1, "").
			job("succeeded", 2)
	}
	lost := []lossWindow{{at(1000), at(2000)}}
	check("one resumable attempt started twice", restarted(2600), nil, 3)
	check("an attempt started again after the database forgot its start", restarted(2600), lost)
	check("an attempt the database forgot, started again beside itself", restarted(2400), lost, 3)
	check("a checkpoint the database forgot", lateCheckpoint, nil, 2)
	check("a checkpoint the database forgot, in the lost window", lateCheckpoint, []lossWindow{{at(1000), at(2000)}})
}
