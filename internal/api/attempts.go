package api

import (
	"net/http"
	"strconv"
	"strings"

	wire "github.com/tetherjobs/tether/pkg/api"
)

// attemptEnds are the event kinds that end a holding, with whether their
// message says why it ended badly (the attempt table's error).
var attemptEnds = map[string]bool{
	"succeeded": false, "failed": true, "canceled": true, "retry_scheduled": true,
	"released": true, "lease_lost": true, "requeued": true,
}

// attemptsOf derives a job's holdings from its events, in order: each
// claimed event opens one (its agent and lease, the attempt from its
// "attempt N" message, else the last one seen); the first ending event of
// its lease, of the next one (a release, a retry or a janitor's requeue
// bump the lease in the statement that writes the event) or of none (a
// cancel written without a holder) closes it, and a
// claim by another agent closes the open one as taken_over. An ending
// event of a lease already closed is ignored (a frozen holder's late
// lease_lost after the takeover). The one still open is "holding".
func attemptsOf(events []wire.Event) []wire.Attempt {
	var out []wire.Attempt
	open := -1 // index in out of the open holding
	last := 1
	for _, ev := range events {
		if ev.Kind == "claimed" {
			if open >= 0 {
				closeAttempt(&out[open], ev, "taken_over")
			}
			last = attemptNumber(ev.Message, last)
			out = append(out, wire.Attempt{Attempt: last, Agent: ev.Agent, Lease: ev.Lease, Start: ev.At, Outcome: "holding"})
			open = len(out) - 1
			continue
		}
		if _, ends := attemptEnds[ev.Kind]; !ends || open < 0 {
			continue
		}
		if l := out[open].Lease; ev.Lease == 0 || ev.Lease == l || ev.Lease == l+1 {
			closeAttempt(&out[open], ev, ev.Kind)
			open = -1
		}
	}
	return out
}

func closeAttempt(a *wire.Attempt, ev wire.Event, outcome string) {
	at := ev.At
	a.End, a.Outcome = &at, outcome
	a.Seconds = at.Sub(a.Start).Seconds()
	if attemptEnds[ev.Kind] {
		a.Error = ev.Message
	}
}

// attemptNumber reads N from a claim's "attempt N" message, else def.
func attemptNumber(msg string, def int) int {
	rest, ok := strings.CutPrefix(msg, "attempt ")
	if !ok {
		return def
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return def
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 1 {
		return def
	}
	return n
}

// attemptPage is how many events one read of GET .../attempts takes.
const attemptPage = 5000

// attempts answers the job's holdings, derived from all its events.
func (s *server) attempts(w http.ResponseWriter, r *http.Request, id string) {
	if !s.jobFound(w, r, id, &params{}) {
		return
	}
	var all []wire.Event
	for after := int64(0); ; {
		page, err := s.opts.Store.Events(r.Context(), id, after, attemptPage)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		all = append(all, page...)
		if len(page) < attemptPage {
			break
		}
		after = page[len(page)-1].ID
	}
	writeJSON(w, http.StatusOK, wire.AttemptList{Attempts: nonNil(attemptsOf(all))})
}
