package api

import (
	"fmt"
	"net/http"
)

// logDownload makes GET /api/v1/jobs/{id}/logs?download=true an attachment
// (Content-Disposition, named after the job and the format) of the whole
// stored log, which next then writes as without download. A followed
// stream is no file: download with follow=true is refused.
func (s *server) logDownload(next jobHandler) jobHandler {
	return func(w http.ResponseWriter, r *http.Request, id string) {
		p := params{q: r.URL.Query()}
		if !p.bool("download") {
			next(w, r, id)
			return
		}
		if p.bool("follow") {
			p.fail("download", "download=true answers the whole stored log as a file; drop follow=true (or download)")
		}
		// Before the header: a missing job's 404 is no attachment.
		if !s.jobFound(w, r, id, &p) {
			return
		}
		ext := "log"
		if r.URL.Query().Get("format") == "jsonl" {
			ext = "jsonl"
		}
		if stream := r.URL.Query().Get("stream"); stream == "stdout" || stream == "stderr" {
			ext = stream + "." + ext
		}
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="tether-job-%s.%s"`, id, ext))
		next(w, r, id)
	}
}

// jobFound answers 400 for p's first bad parameter, else 404 when job id
// does not exist; it returns whether the request may go on.
func (s *server) jobFound(w http.ResponseWriter, r *http.Request, id string, p *params) bool {
	if p.err != nil {
		badRequest(w, p.err.Field, "%s", p.err.Msg)
		return false
	}
	if _, err := s.opts.Store.JobStatus(r.Context(), id); err != nil {
		s.jobError(w, r, id, err)
		return false
	}
	return true
}
