package api

import (
	"net/http"
	"time"

	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// countCap is how many rows each part of a count reads at most
// (queries/job_counts.sql): past it a count is "at least".
const countCap = 10000

// window reads the created_at window since ≤ created_at < until. A set
// until is after 1970, so it is after an unset since.
func (p *params) window() (since, until time.Time) {
	since, until = p.time("since"), p.time("until")
	if !until.IsZero() && !until.After(since) {
		p.fail("until", "until (%s) must be later than since (%s)", until.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
	}
	return since, until
}

// jobCounts answers the jobs per status matching the list's filters
// (command, submitter, since, until, agent). status, idempotency_key and
// the cursor are not filters of a count: it is every status.
func (s *server) jobCounts(w http.ResponseWriter, r *http.Request) {
	p := params{q: r.URL.Query()}
	since, until := p.window()
	if p.err != nil {
		badRequest(w, p.err.Field, "%s", p.err.Msg)
		return
	}
	counts, err := s.opts.Store.CountJobs(r.Context(), store.ListParams{
		Command: p.q.Get("command"), Submitter: p.q.Get("submitter"), Agent: p.q.Get("agent"),
		Since: since, Until: until,
	}, countCap)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out := wire.JobCounts{Counts: counts, Cap: countCap}
	for _, c := range counts {
		out.Total += c.Count
		out.TotalAtLeast = out.TotalAtLeast || c.AtLeast
	}
	writeJSON(w, http.StatusOK, out)
}
