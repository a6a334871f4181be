package api

import (
	"net/http"

	wire "github.com/tetherjobs/tether/pkg/api"
)

// cleanups lists pending Cleanups in job ID order.
func (s *server) cleanups(w http.ResponseWriter, r *http.Request) {
	p := params{q: r.URL.Query()}
	limit := p.int("limit", wire.DefaultListLimit, 1, wire.MaxListLimit)
	if p.err != nil {
		badRequest(w, p.err.Field, "%s", p.err.Msg)
		return
	}
	list, err := s.opts.Store.ListCleanups(r.Context(), p.q.Get("after"), int(limit)+1)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	next := ""
	if len(list) > int(limit) {
		list = list[:limit]
		next = list[len(list)-1].JobID
	}
	writeJSON(w, http.StatusOK, wire.CleanupList{Cleanups: nonNil(list), Next: next})
}
