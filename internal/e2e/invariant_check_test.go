package e2e

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The invariant checker is a plain function over what a run left behind (the
// jobs rows, their job_events and the resumable plugin's launch journals),
// never over what the test meant to do. checkInvariants returns every
// violation of:
//
//  1. each lease value of a job had at most one holder;
//  2. no write was accepted from a superseded lease;
//  3. a job's remote work never ran for two attempts at once;
//  4. every job ended in exactly one terminal state;
//  5. a canceled job never ran again (unless an operator requeued it);
//  6. no output line was stored twice (every line the jobs print is unique);
//  7. a succeeded shell job's output holds every line of its last run, in
//     order, unless a database_history_lost event says the database lost
//     some with its history.
//
// After a failover that lost history, what the database forgot cannot be
// checked against it. A job submitted in the lost window may be gone, and
// checkpoints the plugin saw accepted then have no lease on record.

// clockSlack absorbs the gap between an event's `at` (PostgreSQL's now(): the
// start of the writing transaction, which for a janitor pass may come some
// milliseconds before it locked the row) and the moment the write took
// effect, when a database timestamp is compared with a journal's wall-clock
// time (both read this host's clock). Real violations of this kind are
// seconds late: a new claim, a new attempt.
const clockSlack = 250 * time.Millisecond

// invJournalLine mirrors internal/fakeplugintest/resumable's journalLine.
type invJournalLine struct {
	Event     string `json:"event"` // start | end | killed | checkpoint
	Attempt   int    `json:"attempt"`
	PID       int    `json:"pid"`
	TimeNS    int64  `json:"time_ns"`
	Outcome   string `json:"outcome,omitempty"`
	Message   string `json:"message,omitempty"`
	PluginPID int    `json:"plugin_pid,omitempty"`
	AgentPID  int    `json:"agent_pid,omitempty"`
	CalledNS  int64  `json:"called_ns,omitempty"`
}

func (l invJournalLine) time() time.Time { return time.Unix(0, l.TimeNS) }

// invAgent is one agent process the run started.
type invAgent struct {
	Name, Generation string
}

// invJob is everything the checker knows about one job.
type invJob struct {
	ID, Command, Status string
	Attempt             int
	Error, ErrorClass   string
	Missing             bool // no jobs row any more
	// Open, when the job is not terminal, says why that is expected (a
	// retry waiting for a fallback Cleanup that is not due yet). "" = it
	// should have ended.
	Open    string
	Events  []event
	Journal []invJournalLine
	Alive   map[int]bool // journal pids whose work still runs
	// Submitted is when the test submitted it. Stdout is the job's stored
	// stdout, line by line. Lines is how many lines each run of a shell job
	// prints before "slept" (0: not a shell job). Ticks is what its runs
	// wrote to their own file, outside the database.
	Submitted time.Time
	Stdout    []string
	Lines     int
	Ticks     []shellTick
}

// shellTick is one line a shell job's run appends to its ticks file.
type shellTick struct {
	Attempt, PID int
	At           time.Time
}

// invData is the input of checkInvariants.
type invData struct {
	Now    time.Time
	Jobs   []invJob
	Agents map[int]invAgent // by agent process id
	// Losses are the spans whose commits a failover lost.
	Losses []lossWindow
}

type violation struct {
	Invariant int
	Job       string
	Msg       string
}

func (v violation) String() string { return fmt.Sprintf("(%d) %s", v.Invariant, v.Msg) }

var (
	finalKinds = map[string]bool{"succeeded": true, "failed": true, "canceled": true}
	// Events written by whoever holds the lease they carry.
	holderKinds = map[string]bool{"claimed": true, "running": true, "resumed": true, "remote": true, "lease_lost": true, "cleanup_ok": true, "cleanup_failed": true}
	// Fenced changes of a job's state. Their lease must not be superseded.
	writeKinds = map[string]bool{"running": true, "remote": true, "released": true, "requeued": true, "retry_scheduled": true, "succeeded": true, "failed": true, "canceled": true}
	// Events that end the current holder's lease (a new holder, none, or the end).
	supersedeKinds = map[string]bool{"claimed": true, "released": true, "requeued": true, "retry_scheduled": true, "succeeded": true, "failed": true, "canceled": true}
	// Observations that may follow a final event.
	afterFinalKinds = map[string]bool{"cleanup_ok": true, "cleanup_failed": true, "lease_lost": true, "database_history_lost": true}
	attemptRE       = regexp.MustCompile(`^attempt (\d+)`)
)

// operatorRequeue reports whether e is the API's requeue event. It carries
// no agent and no lease (the janitor's requeue of an accepted job carries
// both).
func operatorRequeue(e event) bool { return e.Kind == "requeued" && e.Agent == "" && e.Lease == 0 }

func attemptIn(msg string) int {
	if m := attemptRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// checkInvariants checks every job of d.
func checkInvariants(d invData) []violation {
	var out []violation
	for _, j := range d.Jobs {
		out = append(out, checkJob(j, d.Now, d.Agents, d.Losses)...)
	}
	return out
}

// annotated is an event with the attempt and requeue segment it belongs to.
type annotated struct {
	event
	attempt int // the job's attempt when the event was written
	segment int // operator requeues seen before it
}

func annotate(evs []event) []annotated {
	out := make([]annotated, 0, len(evs))
	attempt, segment := 1, 0
	for _, e := range evs {
		switch {
		case e.Kind == "claimed" || e.Kind == "retry_scheduled":
			if n := attemptIn(e.Message); n > 0 {
				attempt = n
			} else if e.Kind == "retry_scheduled" {
				attempt++ // the message no longer names it
			}
		case operatorRequeue(e):
			attempt++
			segment++
		}
		out = append(out, annotated{event: e, attempt: attempt, segment: segment})
	}
	return out
}

// inLoss reports whether t falls in a span whose commits were lost.
func inLoss(losses []lossWindow, t time.Time) bool {
	for _, w := range losses {
		if !t.Before(w.from.Add(-clockSlack)) && !t.After(w.to.Add(clockSlack)) {
			return true
		}
	}
	return false
}

func checkJob(j invJob, now time.Time, agents map[int]invAgent, losses []lossWindow) []violation {
	var vs []violation
	add := func(inv int, format string, args ...any) {
		vs = append(vs, violation{Invariant: inv, Job: j.ID, Msg: fmt.Sprintf(format, args...)})
	}
	evs := annotate(j.Events)

	// (1) One holder per lease value. Every event a holder writes under a
	// lease names the same (agent, generation), and no lease is handed out
	// by two claims.
	type holder struct {
		agent, gen string
		id         int64
		kind       string
	}
	holders := map[int64]holder{}
	claimedBy := map[int64]annotated{} // the first claim of each lease
	claims := map[int64][]annotated{}  // every claim of each lease
	reported1 := map[int64]bool{}      // one report per lease
	for _, e := range evs {
		if e.Lease == 0 || !holderKinds[e.Kind] {
			continue
		}
		if e.Kind == "claimed" {
			claims[e.Lease] = append(claims[e.Lease], e)
			if prev, ok := claimedBy[e.Lease]; ok {
				if !reported1[e.Lease] {
					add(1, "lease %d was handed out twice: claimed by %s/%s (event #%d, attempt %d) and by %s/%s (event #%d, attempt %d)",
						e.Lease, prev.Agent, short(prev.Generation), prev.ID, prev.attempt, e.Agent, short(e.Generation), e.ID, e.attempt)
				}
				reported1[e.Lease] = true
			} else {
				claimedBy[e.Lease] = e
			}
		}
		h, ok := holders[e.Lease]
		if !ok {
			holders[e.Lease] = holder{e.Agent, e.Generation, e.ID, e.Kind}
			continue
		}
		if (h.agent != e.Agent || h.gen != e.Generation) && !reported1[e.Lease] {
			reported1[e.Lease] = true
			add(1, "lease %d had two holders: %s/%s (event #%d %s) and %s/%s (event #%d %s)",
				e.Lease, h.agent, short(h.gen), h.id, h.kind, e.Agent, short(e.Generation), e.ID, e.Kind)
		}
	}

	// (2) No write from a superseded lease. Leases only grow. A claim hands
	// out a lease above every lease seen before it, and every fenced write
	// carries a lease at least the highest one handed out before it, which
	// was claimed in the attempt the write is about.
	var maxLease, maxClaimed int64
	var maxEv annotated
	lowClaim := map[int64]int64{} // leases claimed below an earlier one: the event that reported it
	for _, e := range evs {
		if e.Lease == 0 {
			continue
		}
		switch {
		case e.Kind == "claimed" && (e.Lease < maxLease || e.Lease < maxClaimed):
			// (A claim equal to the lease of a janitor's final event is
			// fine: nobody held that one.)
			if _, seen := lowClaim[e.Lease]; !seen {
				add(2, "claim (event #%d, attempt %d) handed out lease %d, below lease %d of event #%d %s (attempt %d): an earlier holder's writes are not fenced out",
					e.ID, e.attempt, e.Lease, maxLease, maxEv.ID, maxEv.Kind, maxEv.attempt)
			}
			lowClaim[e.Lease] = e.ID
		case writeKinds[e.Kind] && e.Lease < maxLease && lowClaim[e.Lease] == 0:
			add(2, "%s (event #%d, %s/%s) accepted under lease %d after lease %d was handed out (event #%d %s)",
				e.Kind, e.ID, e.Agent, short(e.Generation), e.Lease, maxLease, maxEv.ID, maxEv.Kind)
		}
		if e.Kind == "running" || finalKinds[e.Kind] {
			// Written by a holder of this lease in an earlier attempt, not
			// by one of this attempt?
			var old, cur *annotated
			for i := range claims[e.Lease] {
				c := &claims[e.Lease][i]
				if c.ID < e.ID && c.Agent == e.Agent && c.Generation == e.Generation {
					if c.attempt == e.attempt {
						cur = c
					} else {
						old = c
					}
				}
			}
			if old != nil && cur == nil {
				add(2, "%s (event #%d, %s/%s) written in attempt %d under lease %d, which it held for attempt %d (claim #%d)",
					e.Kind, e.ID, e.Agent, short(e.Generation), e.attempt, e.Lease, old.attempt, old.ID)
			}
		}
		if supersedeKinds[e.Kind] && e.Lease > maxLease {
			maxLease, maxEv = e.Lease, e
		}
		if e.Kind == "claimed" {
			maxClaimed = max(maxClaimed, e.Lease)
		}
	}
	// Checkpoints the plugin saw accepted. The agent that made the call
	// held the job's lease then, for the attempt the call was about.
	for _, l := range j.Journal {
		if l.Event != "checkpoint" || l.Outcome != "accepted" {
			continue
		}
		ag, ok := agents[l.AgentPID]
		if !ok {
			continue // the plugin's parent is not an agent we know
		}
		called := time.Unix(0, l.CalledNS)
		if inLoss(losses, called) {
			continue // accepted by a database that then forgot it
		}
		claim, end, found := holdingAt(evs, ag.Generation, called)
		switch {
		case !found:
			add(2, "a checkpoint of attempt %d by %s/%s was accepted at %s although that agent held no lease on the job then%s",
				l.Attempt, ag.Name, short(ag.Generation), clock(called), endedNote(evs, ag.Generation, called))
		case claim.attempt != l.Attempt:
			add(2, "a checkpoint of attempt %d by %s/%s was accepted at %s under the lease %d of attempt %d (claim #%d)",
				l.Attempt, ag.Name, short(ag.Generation), clock(called), claim.Lease, claim.attempt, claim.ID)
		case end != nil:
			add(2, "a checkpoint of attempt %d by %s/%s was accepted at %s, %s after its lease %d was superseded by event #%d %s",
				l.Attempt, ag.Name, short(ag.Generation), clock(called), called.Sub(end.At).Round(time.Millisecond), claim.Lease, end.ID, end.Kind)
		}
	}

	// (3) The remote work of different attempts never ran at once (nor
	// the same attempt's twice).
	runs := workRuns(j, now)
	for a := 0; a < len(runs); a++ {
		for b := a + 1; b < len(runs); b++ {
			x, y := runs[a], runs[b]
			overlap := x.start.Before(y.end) && y.start.Before(x.end)
			if x.attempt == y.attempt {
				// A start inside a lost window may be one the database
				// forgot, with the claim it ran under: the attempt is then
				// claimed and started again (docs/operations.md, async
				// failover). It must still never run beside itself.
				if !overlap && inLoss(losses, earlier(x.start, y.start)) {
					continue
				}
				add(3, "attempt %d started its work twice: pid %d %s and pid %d %s", x.attempt, x.pid, x, y.pid, y)
				continue
			}
			if overlap {
				from, to := later(x.start, y.start), earlier(x.end, y.end)
				add(3, "the work of attempt %d (pid %d %s) and of attempt %d (pid %d %s) ran at once for %s",
					x.attempt, x.pid, x, y.attempt, y.pid, y, to.Sub(from).Round(time.Millisecond))
			}
		}
	}

	// (3) for shell jobs, from the ticks their runs wrote. A run of one
	// attempt never wrote after a run of a later attempt had begun, and no
	// attempt ran twice at once.
	type tickRun struct {
		attempt, pid int
		first, last  time.Time
	}
	var truns []*tickRun
	byRun := map[[2]int]*tickRun{}
	for _, tk := range j.Ticks {
		k := [2]int{tk.Attempt, tk.PID}
		r := byRun[k]
		if r == nil {
			r = &tickRun{attempt: tk.Attempt, pid: tk.PID, first: tk.At, last: tk.At}
			byRun[k] = r
			truns = append(truns, r)
		}
		r.first, r.last = earlier(r.first, tk.At), later(r.last, tk.At)
	}
	for _, x := range truns {
		for _, y := range truns {
			switch {
			case x == y:
			case x.attempt < y.attempt && x.last.After(y.first.Add(clockSlack)):
				add(3, "shell attempt %d (pid %d) wrote at %s, %s after attempt %d (pid %d) began at %s",
					x.attempt, x.pid, clock(x.last), x.last.Sub(y.first).Round(time.Millisecond), y.attempt, y.pid, clock(y.first))
			case x.attempt == y.attempt && x.pid < y.pid && x.first.Before(y.last) && y.first.Before(x.last):
				add(3, "shell attempt %d ran twice at once: pid %d [%s, %s] and pid %d [%s, %s]",
					x.attempt, x.pid, clock(x.first), clock(x.last), y.pid, clock(y.first), clock(y.last))
			}
		}
	}

	// (6) Every line once. The jobs print unique lines.
	seen := map[string]int{}
	for _, l := range j.Stdout {
		seen[l]++
		if seen[l] == 2 {
			add(6, "output line %q stored twice", l)
		}
	}
	// (7) A succeeded shell job has every line of its last run.
	historyLost := false
	for _, e := range evs {
		historyLost = historyLost || e.Kind == "database_history_lost"
	}
	if j.Lines > 0 && j.Status == "succeeded" && !historyLost {
		if missing := missingShellLines(j.Stdout, j.Lines); missing != "" {
			add(7, "succeeded, but its last run's output is incomplete: %s", missing)
		}
	}

	// (4) Exactly one terminal state. The row is terminal and each
	// decision (one per operator requeue segment) has exactly one final
	// event, followed only by Cleanup and lease_lost observations.
	switch {
	case j.Missing && inLoss(losses, j.Submitted):
		// Submitted while the standby was away. The failover lost it.
	case j.Missing:
		add(4, "the jobs row vanished")
	case !finalKinds[j.Status] && j.Open == "":
		add(4, "job is still %s, not terminal", j.Status)
	}
	segments := 0
	for _, e := range evs {
		segments = max(segments, e.segment+1)
	}
	var lastFinal *annotated
	for s := 0; s < segments; s++ {
		var final *annotated
		for i := range evs {
			e := &evs[i]
			if e.segment != s || e.Kind == "requeued" && operatorRequeue(e.event) {
				continue
			}
			switch {
			case finalKinds[e.Kind] && final == nil:
				final = e
			case finalKinds[e.Kind]:
				add(4, "a second final event #%d %s (%s/%d) after #%d %s (%s/%d)",
					e.ID, e.Kind, e.Agent, e.Lease, final.ID, final.Kind, final.Agent, final.Lease)
			case final != nil && !afterFinalKinds[e.Kind]:
				add(4, "event #%d %s (%s/%d) after the final #%d %s",
					e.ID, e.Kind, e.Agent, e.Lease, final.ID, final.Kind)
			}
		}
		last := s == segments-1
		switch {
		case final == nil && !last:
			add(4, "requeued by an operator (segment %d) without a final event before it", s+1)
		case final != nil && !last && final.Kind == "succeeded":
			add(4, "requeued by an operator after it succeeded (event #%d)", final.ID)
		}
		if last {
			lastFinal = final
		}
	}
	if finalKinds[j.Status] {
		switch {
		case lastFinal == nil:
			add(4, "the row says %s but no final event records it", j.Status)
		case lastFinal.Kind != j.Status:
			add(4, "the row says %s but the final event #%d says %s", j.Status, lastFinal.ID, lastFinal.Kind)
		}
	}

	// (5) A canceled job never ran again. No claim, no start of work after
	// the cancel took effect, until an operator requeue.
	for i, e := range evs {
		if e.Kind != "canceled" {
			continue
		}
		until := time.Time{} // the next operator requeue, if any
		for _, f := range evs[i+1:] {
			if operatorRequeue(f.event) {
				until = f.At
				break
			}
			if f.Kind == "claimed" || f.Kind == "running" || f.Kind == "resumed" {
				add(5, "%s (event #%d, %s) after it was canceled (event #%d)", f.Kind, f.ID, f.Agent, e.ID)
			}
		}
		for _, r := range runs {
			if !r.start.After(e.At.Add(clockSlack)) {
				continue
			}
			if until.IsZero() || r.start.Before(until) || r.attempt <= e.attempt {
				add(5, "work of attempt %d (pid %d) started at %s, %s after it was canceled (event #%d)",
					r.attempt, r.pid, clock(r.start), r.start.Sub(e.At).Round(time.Millisecond), e.ID)
			}
		}
	}
	return vs
}

// missingShellLines checks that the run that printed "a<attempt> p<pid>
// slept" last also printed "a<attempt> p<pid> line 1" … "line n" before it,
// in order. It says what is wrong, or "".
func missingShellLines(stdout []string, n int) string {
	last := -1
	for i, l := range stdout {
		if strings.HasSuffix(l, " slept") {
			last = i
		}
	}
	if last < 0 {
		return `no "slept" line`
	}
	prefix := strings.TrimSuffix(stdout[last], " slept")
	want := n
	for i := last - 1; i >= 0 && want > 0; i-- {
		var a, p, k int
		if _, err := fmt.Sscanf(stdout[i], "a%d p%d line %d", &a, &p, &k); err != nil {
			continue
		}
		run := fmt.Sprintf("a%d p%d", a, p)
		if run != prefix {
			continue // an earlier run's line
		}
		if k != want {
			return fmt.Sprintf("%s: line %d where line %d belongs", run, k, want)
		}
		want--
	}
	if want > 0 {
		return fmt.Sprintf("%s: lines 1 to %d missing", prefix, want)
	}
	return ""
}

// holdingAt finds gen's claim that was the latest before t, and the event
// that superseded it, if one did before t (beyond clockSlack). found is
// false when gen never claimed the job before t.
func holdingAt(evs []annotated, gen string, t time.Time) (claim annotated, end *annotated, found bool) {
	idx := -1
	for i, e := range evs {
		if e.Kind == "claimed" && e.Generation == gen && !e.At.After(t.Add(clockSlack)) {
			idx = i
		}
	}
	if idx < 0 {
		return annotated{}, nil, false
	}
	for i := idx + 1; i < len(evs); i++ {
		if supersedeKinds[evs[i].Kind] {
			if evs[i].At.Add(clockSlack).Before(t) {
				return evs[idx], &evs[i], true
			}
			break
		}
	}
	return evs[idx], nil, true
}

func endedNote(evs []annotated, gen string, t time.Time) string {
	for _, e := range evs {
		if e.Kind == "claimed" && e.Generation == gen {
			return fmt.Sprintf(" (it claimed the job at %s, event #%d)", clock(e.At), e.ID)
		}
	}
	return ""
}

// workRun is one work process of a job, from its journal.
type workRun struct {
	attempt    int
	pid        int
	start, end time.Time
	how        string // how it ended: ok, retriable, permanent, killed, running, unrecorded
}

func (r workRun) String() string {
	return fmt.Sprintf("[%s, %s %s]", clock(r.start), clock(r.end), r.how)
}

// workRuns pairs each journaled start with the first end or kill of its
// pid. Work still alive counts as running until now. A process that is gone
// without an end on record (its killer died before journaling the kill) is
// taken as ended at its start, so it can cause no false alarm.
func workRuns(j invJob, now time.Time) []workRun {
	var runs []workRun
	for _, l := range j.Journal {
		if l.Event != "start" {
			continue
		}
		r := workRun{attempt: l.Attempt, pid: l.PID, start: l.time()}
		for _, m := range j.Journal {
			if m.PID != l.PID || m.TimeNS < l.TimeNS || (m.Event != "end" && m.Event != "killed") {
				continue
			}
			if r.how == "" || m.time().Before(r.end) {
				r.end, r.how = m.time(), m.Outcome
				if m.Event == "killed" {
					r.how = "killed"
				}
			}
		}
		switch {
		case r.how != "":
		case j.Alive[l.PID]:
			r.end, r.how = now, "running"
		default:
			r.end, r.how = r.start, "unrecorded"
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(a, b int) bool { return runs[a].start.Before(runs[b].start) })
	return runs
}

// summarize is a job's timeline for a violation report: its events, then
// its work runs.
func summarize(j invJob, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s (%s) status=%s attempt=%d", j.ID, j.Command, j.Status, j.Attempt)
	if j.Error != "" {
		fmt.Fprintf(&b, " error=%q (%s)", trunc(j.Error, 80), j.ErrorClass)
	}
	if j.Open != "" {
		fmt.Fprintf(&b, " open: %s", j.Open)
	}
	for _, e := range annotate(j.Events) {
		fmt.Fprintf(&b, "\n      #%d %s a%d %-15s %s/%s lease=%d %q", e.ID, clock(e.At), e.attempt, e.Kind, e.Agent, short(e.Generation), e.Lease, trunc(e.Message, 90))
	}
	for _, r := range workRuns(j, now) {
		fmt.Fprintf(&b, "\n      work a%d pid %d %s", r.attempt, r.pid, r)
	}
	for _, l := range j.Journal {
		if l.Event == "checkpoint" {
			fmt.Fprintf(&b, "\n      checkpoint a%d pid %d by agent pid %d at %s: %s %s", l.Attempt, l.PID, l.AgentPID, clock(time.Unix(0, l.CalledNS)), l.Outcome, trunc(l.Message, 60))
		}
	}
	return b.String()
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }

func short(gen string) string {
	if len(gen) > 8 {
		return gen[:8]
	}
	return gen
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
