package api

import (
	"net/http"

	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// cleanups lists pending Cleanups in job ID order.
func (s *server) cleanups(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", wire.DefaultListLimit, 1, wire.MaxListLimit)
	if err != nil {
		badRequest(w, "limit", "%v", err)
		return
	}
	list, err := s.opts.Store.ListCleanups(r.Context(), r.URL.Query().Get("after"), int(limit)+1)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	next := ""
	if len(list) > int(limit) {
		list = list[:limit]
		next = list[len(list)-1].JobID
	}
	if list == nil {
		list = []store.Cleanup{}
	}
	writeJSON(w, http.StatusOK, wire.CleanupList{Cleanups: list, Next: next})
}
