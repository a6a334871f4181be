package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherjobs/tether/internal/fleet"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

const (
	maxKeyLen       = 255
	maxSubmitterLen = 255
	maxReasonLen    = 4096
	logPageSize     = 1000
	readyTimeout    = 2 * time.Second
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

func writeError(w http.ResponseWriter, status int, code, field, msg string) {
	writeJSON(w, status, wire.Error{Error: msg, Field: field, Code: code})
}

func badRequest(w http.ResponseWriter, field, format string, args ...any) {
	writeError(w, http.StatusBadRequest, wire.CodeBadRequest, field, fmt.Sprintf(format, args...))
}

// internalError logs err and answers 500 without database details, or 503
// database_unavailable when err says the database cannot be reached.
func (s *server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	level := slog.LevelError
	if r.Context().Err() != nil {
		level = slog.LevelInfo // the client went away: its query was cancelled, nothing failed
	}
	s.log.Log(r.Context(), level, "http request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	if databaseUnavailable(err) {
		unavailable(w)
		return
	}
	writeError(w, http.StatusInternalServerError, wire.CodeInternal, "", "internal error; the agent's log has the details")
}

func jobNotFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, wire.CodeNotFound, "", fmt.Sprintf("job %q not found", id))
}

// jobError answers a failed store call about job id: 404 when there is no
// such job, else 500.
func (s *server) jobError(w http.ResponseWriter, r *http.Request, id string, err error) {
	if errors.Is(err, store.ErrNotFound) {
		jobNotFound(w, id)
		return
	}
	s.internalError(w, r, err)
}

// decode reads a JSON object body into v. Unknown fields, trailing data and
// bodies over MaxBodyBytes are rejected. With allowEmpty an empty body leaves
// v as it is. It answers the request itself and returns false on error.
//
// Before decoding, every string in the body (object keys included) must be
// valid UTF-8 without NUL or lone surrogates, and context numbers must be
// storable (checkBody). Decoding would silently replace what PostgreSQL
// refuses.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err == nil {
		if ie := checkBody(body); ie != nil {
			badRequest(w, ie.Field, "%s", ie.Msg)
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
		if err == nil {
			// Exactly one JSON value. Anything after it is a malformed body.
			if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
				err = cmp.Or(terr, errors.New("data after the JSON object"))
			}
		}
	}
	if err == nil || (allowEmpty && errors.Is(err, io.EOF)) {
		return true
	}
	var (
		tooBig   *http.MaxBytesError
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
		unknownF = "json: unknown field "
	)
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "",
			fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit))
	case errors.Is(err, io.EOF):
		badRequest(w, "", "request body is empty; send a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		badRequest(w, "", "malformed JSON in request body: %v", err)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			badRequest(w, "", "request body must be a JSON object, not %s", typeErr.Value)
		} else {
			badRequest(w, typeErr.Field, "%s: expected %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
		}
	case strings.HasPrefix(err.Error(), unknownF):
		// encoding/json writes the name with %q, which always unquotes.
		field, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), unknownF))
		badRequest(w, field, "unknown field %q in request body", field)
	default:
		badRequest(w, "", "malformed request body: %v", err)
	}
	return false
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	var req wire.SubmitRequest
	if !s.decode(w, r, &req, false) {
		return
	}
	if req.Command == "" {
		s.unknownCommand(w, r, wire.CodeBadRequest, "command is required")
		return
	}
	spec, ok, err := s.commandSpec(r.Context(), req.Command)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if !ok {
		s.unknownCommand(w, r, wire.CodeUnknownCommand, fmt.Sprintf("unknown command %q: neither this agent's config nor any live agent serves it", req.Command))
		return
	}
	jobCtx := bytes.TrimSpace(req.Context)
	if string(jobCtx) == "null" {
		jobCtx = nil
	}
	if len(jobCtx) > 0 && jobCtx[0] != '{' {
		badRequest(w, "context", "context must be a JSON object, e.g. {\"key\": \"value\"}")
		return
	}
	submitter, serr := s.submitter(r.Context(), req.Submitter)
	if ie := cmp.Or(tooLong(textLimit{"idempotency_key", req.IdempotencyKey, maxKeyLen}), serr); ie != nil {
		badRequest(w, ie.Field, "%s", ie.Msg)
		return
	}
	var override limits.Override
	if req.Limits != nil {
		override = limits.Override(*req.Limits)
	}
	partial, ferr := override.Partial()
	if ferr != nil {
		badRequest(w, "limits."+ferr.Field, "limits.%s", ferr)
		return
	}
	resolved, ferrs := spec.ResolveLimits(partial)
	if len(ferrs) > 0 {
		msgs := make([]string, len(ferrs))
		for i, fe := range ferrs {
			msgs[i] = "limits." + fe.Error()
		}
		badRequest(w, "limits."+ferrs[0].Field, "%s", strings.Join(msgs, "; "))
		return
	}
	job, created, err := s.opts.Store.Submit(r.Context(), store.SubmitParams{
		Command:        req.Command,
		Plugin:         spec.Plugin,
		Context:        json.RawMessage(jobCtx),
		Submitter:      submitter,
		IdempotencyKey: req.IdempotencyKey,
		Limits:         resolved,
		Override:       override,
	})
	switch {
	case errors.Is(err, store.ErrIdempotencyConflict):
		writeError(w, http.StatusConflict, wire.CodeIdempotencyConflict, "idempotency_key",
			fmt.Sprintf("idempotency_key %q was already used for a different request; use a new key or resend the original request", req.IdempotencyKey))
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/jobs/"+job.ID)
	status := http.StatusOK // a replay of an earlier identical request
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, job)
}

// submitter is who a request acts for. With auth on the token decides, and
// what the body claims is ignored.
func (s *server) submitter(ctx context.Context, claimed string) (string, *inputError) {
	if len(s.opts.Tokens) > 0 {
		return principal(ctx), nil
	}
	return claimed, tooLong(textLimit{"submitter", claimed, maxSubmitterLen})
}

// commandSpec returns what a submit of command resolves with: this agent's
// config when it has the command, else what the live agents serving it
// announce (see store.LiveCommandSpecs for whose when they differ). false
// means nobody serves it.
func (s *server) commandSpec(ctx context.Context, command string) (store.CommandSpec, bool, error) {
	if c, ok := s.opts.Commands[command]; ok {
		return SpecOf(c, *s.opts.Defaults), true, nil
	}
	live, err := s.announced.get(ctx)
	if err != nil {
		return store.CommandSpec{}, false, err
	}
	a, ok := live[command]
	return a.Spec, ok, nil
}

// unknownCommand refuses a submit whose command nobody serves, saying what
// is served and by whom.
func (s *server) unknownCommand(w http.ResponseWriter, r *http.Request, code, why string) {
	live, err := s.announced.get(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeError(w, http.StatusBadRequest, code, "command",
		why+"; "+servedCommands(s.commandNames, live)+"; submit one of these, or start an agent that configures the command")
}

// jobHandler answers a request about the job of the canonical ID id.
type jobHandler func(w http.ResponseWriter, r *http.Request, id string)

// withJob passes h the canonical job ID of the request's path. A path ID
// that is not a UUID names no job. It answers 404 before any query
// (PostgreSQL would refuse a NUL or invalid UTF-8 in it).
func withJob(h jobHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := r.PathValue("id")
		id, ok := parseJobID(raw)
		if !ok {
			if len(raw) > 64 {
				raw = raw[:64] + "…" // a long path is not worth echoing whole
			}
			jobNotFound(w, raw)
			return
		}
		h(w, r, id)
	}
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request, id string) {
	job, err := s.opts.Store.GetJob(r.Context(), id)
	if err != nil {
		s.jobError(w, r, id, err)
		return
	}
	// Only the one job's view carries its remote resources. The list stays
	// one query.
	resources, err := s.opts.Store.JobResources(r.Context(), id)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.JobDetail{Job: job, Resources: resources})
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request) {
	p := params{q: r.URL.Query()}
	status := jobstate.JobStatus(p.q.Get("status"))
	if status != "" && !validStatus(status) {
		p.fail("status", "unknown status %q; use one of %s", status, statusList())
	}
	limit := p.int("limit", wire.DefaultListLimit, 1, wire.MaxListLimit)
	after := p.q.Get("after")
	if after != "" {
		// The cursor is a job ID (the next of an earlier page).
		id, ok := parseJobID(after)
		if !ok {
			p.fail("after", "after must be the next cursor of an earlier page (a job ID), got %q", after)
		}
		after = id
	}
	agent := p.q.Get("agent")
	if agent != "" && status != "" && !jobstate.Held(status) {
		p.fail("agent", "agent lists the jobs an agent holds now (accepted, running, canceling); a %s job has no holder: drop status or agent", status)
	}
	since, until := p.window()
	if p.err != nil {
		badRequest(w, p.err.Field, "%s", p.err.Msg)
		return
	}
	jobs, next, err := s.opts.Store.ListJobs(r.Context(), store.ListParams{
		Status:         status,
		Command:        p.q.Get("command"),
		Submitter:      p.q.Get("submitter"),
		IdempotencyKey: p.q.Get("idempotency_key"),
		Agent:          agent,
		Since:          since,
		Until:          until,
		After:          after,
		Limit:          int(limit),
	})
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.JobList{Jobs: nonNil(jobs), Next: next})
}

// nonNil is list, or an empty one for nil. A list answers [], never null.
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

func validStatus(s jobstate.JobStatus) bool { return slices.Contains(jobstate.Statuses(), s) }

// statusList names the statuses a list may filter on, for an error message.
func statusList() string {
	names := make([]string, 0, len(jobstate.Statuses()))
	for _, v := range jobstate.Statuses() {
		names = append(names, string(v))
	}
	return strings.Join(names, ", ")
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request, id string) {
	var req wire.CancelRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	if ie := tooLong(textLimit{"reason", req.Reason, maxReasonLen}); ie != nil {
		badRequest(w, ie.Field, "%s", ie.Msg)
		return
	}
	reason := req.Reason
	if who := principal(r.Context()); who != "" {
		reason = cmp.Or(reason, "canceled by request") + " (by " + who + ")"
	}
	job, err := s.opts.Store.Cancel(r.Context(), id, reason)
	var te *store.TransitionError
	switch {
	case errors.As(err, &te):
		writeJSON(w, http.StatusConflict, wire.Error{Code: wire.CodeInvalidTransition, Status: te.Status,
			Error: fmt.Sprintf("job %s is already %s; only unfinished jobs can be canceled", id, te.Status)})
	case err != nil:
		s.jobError(w, r, id, err)
	default:
		writeJSON(w, http.StatusOK, job)
	}
}

// requeue puts a failed or canceled job back in the queue as a new attempt,
// recording who asked, why and the key. See store.Requeue.
func (s *server) requeue(w http.ResponseWriter, r *http.Request, id string) {
	var req wire.RequeueRequest
	if !s.decode(w, r, &req, false) {
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		badRequest(w, "reason", "reason is required: say why the job should run again")
		return
	}
	by, serr := s.submitter(r.Context(), req.Submitter)
	if ie := cmp.Or(tooLong(textLimit{"reason", req.Reason, maxReasonLen}, textLimit{"key", req.Key, maxKeyLen}), serr); ie != nil {
		badRequest(w, ie.Field, "%s", ie.Msg)
		return
	}
	job, replayed, err := s.opts.Store.Requeue(r.Context(), store.RequeueParams{JobID: id, Reason: req.Reason, Key: req.Key, By: by})
	var te *store.TransitionError
	switch {
	case errors.Is(err, store.ErrIdempotencyConflict):
		writeError(w, http.StatusConflict, wire.CodeIdempotencyConflict, "key",
			fmt.Sprintf("key %q was already used for a different requeue request; use a new key or resend the original request", req.Key))
	case errors.As(err, &te):
		writeJSON(w, http.StatusConflict, wire.Error{Code: wire.CodeInvalidTransition, Status: te.Status,
			Error: fmt.Sprintf("job %s is %s; only failed or canceled jobs can be requeued", id, te.Status)})
	case err != nil:
		s.jobError(w, r, id, err)
	default:
		writeJSON(w, http.StatusOK, wire.RequeueResponse{Job: job, Replayed: replayed})
	}
}

// events answers a job's events as an wire.EventList, or with follow=true as
// NDJSON until the job is finished (then an end record; see followJob).
func (s *server) events(w http.ResponseWriter, r *http.Request, id string) {
	p := params{q: r.URL.Query()}
	after := p.int("after", 0, 0, 1<<62)
	limit := p.int("limit", 1000, 1, 10000)
	follow := p.bool("follow")
	if p.err != nil {
		badRequest(w, p.err.Field, "%s", p.err.Msg)
		return
	}
	if _, err := s.opts.Store.JobStatus(r.Context(), id); err != nil {
		s.jobError(w, r, id, err)
		return
	}
	if follow {
		rc := streamHeaders(w, "application/x-ndjson", true)
		followJob(r.Context(), s, rc, id, after, s.eventFeed(id, int(limit), w))
		return
	}
	evs, err := s.opts.Store.Events(r.Context(), id, after, int(limit))
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.EventList{Events: nonNil(evs)})
}

// ownTimings are this agent's own, by which it judges the others
// (fleet.Classify).
func (s *server) ownTimings() fleet.Timings {
	return fleet.Timings{Keepalive: s.opts.Keepalive, DeadAfter: s.opts.DeadAfter, StaleJob: s.opts.StaleJob}
}

// agents answers the agents not stopped and seen within stale_job, or
// every agents row with all=true, each with its liveness and the reason by
// the fleet's rule (fleet.Classify, the one the janitor acts by).
func (s *server) agents(w http.ResponseWriter, r *http.Request) {
	p := params{q: r.URL.Query()}
	all := p.oneOf("all", "must be true or false", "", "false", "true") == "true"
	if p.err != nil {
		badRequest(w, p.err.Field, "%s", p.err.Msg)
		return
	}
	agents, err := s.opts.Store.ListAgents(r.Context(), store.AgentListParams{All: all, LiveWithin: s.opts.StaleJob})
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out := make([]wire.Agent, len(agents)) // never nil: no agents answer []
	for i, a := range agents {
		out[i] = s.judged(a)
	}
	writeJSON(w, http.StatusOK, wire.AgentList{Agents: out})
}

// commands answers every command known to this agent's config or announced
// by any agent, with the live agents serving it and its queue, and a hint
// for a command no live agent serves (its jobs would wait queued forever).
func (s *server) commands(w http.ResponseWriter, r *http.Request) {
	out, err := s.commandList(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.CommandList{Commands: out})
}

// commandList is GET /api/v1/commands' answer. /readyz warns from it too.
func (s *server) commandList(ctx context.Context) ([]wire.Command, error) {
	config := make(map[string]string, len(s.opts.Commands))
	for name, c := range s.opts.Commands {
		config[name] = c.Plugin
	}
	seen, err := store.AgentsSeen(ctx, s.opts.Store.Pool())
	if err != nil {
		return nil, err
	}
	list, err := s.opts.Store.ListCommands(ctx, store.CommandListParams{Config: config, Live: fleet.LiveNames(s.ownTimings(), seen)})
	if err != nil {
		return nil, err
	}
	live, err := s.announced.get(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Command, 0, len(list))
	for _, c := range list {
		a, announced := live[c.Name]
		if !c.Configured && announced {
			c.Plugin = a.Spec.Plugin // what a submit here would store, not the latest job's
		}
		cmd := wire.Command{CommandStatus: c, Served: len(c.Agents) > 0, Accepted: c.Configured || announced}
		if !cmd.Served {
			cmd.Hint = commandHint(c)
		}
		out = append(out, cmd)
	}
	return out, nil
}

// commandHint says why nothing runs a command's jobs and what to do.
func commandHint(c store.CommandStatus) string {
	plugin := "its plugin"
	if c.Plugin != "" {
		plugin = "its plugin (" + c.Plugin + ")"
	}
	who := "no live agent serves command " + c.Name
	if len(c.Unhealthy) > 0 {
		return who + " with a healthy plugin: " + plugin + " fails its health check on " + strings.Join(c.Unhealthy, ", ") +
			"; jobs wait queued until it passes again (tether agents -o json shows each agent's unhealthy_plugins)"
	}
	if len(c.Draining) > 0 {
		who += " (only draining agents announce it: " + strings.Join(c.Draining, ", ") + ")"
	}
	return who + ": jobs wait queued; start an agent with this command or check " + plugin + " loaded (tether agents lists each agent's plugins)"
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, wire.Status{Status: "ok"})
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.opts.Store.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, wire.Status{Status: "not ready", Error: "database: " + err.Error()})
		return
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, wire.Status{Status: "not ready", Error: err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, wire.Status{Status: "ready", Warnings: s.readyWarnings(ctx)})
}

// readyWarnings names the commands no live agent serves that this agent is
// configured with or that have queued jobs. Their jobs wait (a command only
// a stopped agent once announced is not worth a warning). They do not make
// this agent unready. Another agent may be starting. A failed look-up is
// logged, not a warning. The database answered the ping.
func (s *server) readyWarnings(ctx context.Context) []string {
	list, err := s.commandList(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "readyz: listing commands", "err", err)
		return nil
	}
	var out []string
	for _, c := range list {
		if !c.Served && (c.Configured || c.Queued > 0) {
			out = append(out, "command "+c.Name+": no live agent serves it; jobs wait queued")
		}
	}
	return out
}
