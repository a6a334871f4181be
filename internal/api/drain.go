package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// drainAgent asks a running agent to drain through the database: its next
// heartbeat reads the request and it drains as on SIGTERM. 202 with the
// agent when this request was stored, 200 when an earlier one stands (its
// time, who and why are kept), 404 for no such agent, 409 for one that
// stopped. Who asked and why are stored on the agent's row, shown by GET
// /api/v1/agents, and logged.
func (s *server) drainAgent(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req wire.DrainAgentRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	by, serr := s.submitter(r.Context(), req.By)
	if ie := cmp.Or(tooLong(textLimit{"reason", req.Reason, maxReasonLen}, textLimit{"by", req.By, maxSubmitterLen}), serr); ie != nil {
		badRequest(w, ie.Field, "%s", ie.Msg)
		return
	}
	made, err := s.opts.Store.RequestDrain(r.Context(), name, by, req.Reason)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "", fmt.Sprintf("agent %q not found (tether agents --all lists them)", name))
		return
	case errors.Is(err, store.ErrAgentStopped):
		writeError(w, http.StatusConflict, wire.CodeInvalidTransition, "", fmt.Sprintf("agent %q stopped; there is nothing to drain", name))
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	if made {
		s.log.InfoContext(r.Context(), "agent drain requested", "agent", name, "by", by, "reason", req.Reason)
	}
	agents, err := s.opts.Store.ListAgents(r.Context(), store.AgentListParams{All: true, Name: name})
	if err != nil || len(agents) == 0 {
		s.internalError(w, r, cmp.Or(err, fmt.Errorf("agent %s vanished after its drain request", name)))
		return
	}
	status := http.StatusOK
	if made {
		status = http.StatusAccepted
	}
	writeJSON(w, status, wire.DrainAgentResponse{Agent: s.judged(agents[0]), Requested: made})
}

// judged is an agents row with its liveness by the fleet's rule (the one
// the janitor acts by).
func (s *server) judged(a store.Agent) wire.Agent {
	v := fleet.Classify(s.ownTimings(), fleet.SeenOf(a.Seen))
	a.Liveness, a.Reason, a.Live = string(v.Liveness), v.Reason, v.Counts()
	return a.Agent
}
