package api

import (
	"net/http"

	"github.com/tetherjobs/tether/internal/store"
)

// CleanupList is the answer of GET /api/v1/cleanups. It lists the plugin
// Cleanup calls still pending, so one that keeps failing stays visible. Next
// is the cursor of the next page (pass it as ?after=), "" on the last page.
type CleanupList struct {
	Cleanups []store.Cleanup `json:"cleanups"`
	Next     string          `json:"next"`
}

// cleanups lists pending Cleanups in job ID order.
func (s *server) cleanups(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", DefaultListLimit, 1, MaxListLimit)
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
	writeJSON(w, http.StatusOK, CleanupList{Cleanups: list, Next: next})
}
