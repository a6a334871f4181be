package api

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// maxLogTail bounds the tail parameter (lines).
const maxLogTail = wire.MaxLogTail

// logsRequest is what GET /api/v1/jobs/{id}/logs asks for.
type logsRequest struct {
	query  store.LogQuery
	format string
	follow bool
	tail   int           // the last lines only; 0: all
	ago    time.Duration // since, as a duration before the database's now
}

func readLogsRequest(r *http.Request, id string) (logsRequest, *inputError) {
	p := params{q: r.URL.Query()}
	req := logsRequest{query: store.LogQuery{JobID: id}}
	req.query.Stream = p.oneOf("stream", "must be stdout or stderr (or absent for both)", "", "stdout", "stderr")
	// text: what the OpenAPI description calls raw.
	req.format = p.oneOf("format", "must be raw or jsonl", "", "raw", "text", "jsonl")
	req.follow = p.bool("follow")
	req.query.After = p.int("after", 0, 0, 1<<62)
	req.tail = int(p.int("tail", 0, 1, maxLogTail))
	req.query.Since, req.ago = p.timeOrAgo("since")
	return req, p.err
}

// logs answers a job's output in write order across streams: raw bytes
// (format=raw, the default) or one JSON record per line (format=jsonl).
// since keeps the output received from a time on, tail the last lines. With
// follow=true it keeps the response open until the job is finished and
// every chunk written before that has been sent (jsonl then ends with an end
// record), the client goes away, or the agent stops. See followJob.
func (s *server) logs(w http.ResponseWriter, r *http.Request, id string) {
	req, ie := readLogsRequest(r, id)
	if ie != nil {
		badRequest(w, ie.Field, "%s", ie.Msg)
		return
	}
	ctx := r.Context()
	if _, err := s.opts.Store.JobStatus(ctx, id); err != nil {
		s.jobError(w, r, id, err)
		return
	}
	tail, err := s.logsStart(ctx, &req)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	var sink logSink = rawSink{w}
	contentType := "text/plain; charset=utf-8"
	if req.format == "jsonl" {
		sink, contentType = newJSONLSink(w), "application/x-ndjson"
	}
	rc := streamHeaders(w, contentType, req.follow)
	for _, c := range tail {
		if sink.chunk(c) != nil {
			return // the client went away
		}
	}
	feed := s.logFeed(req.query, sink)
	switch {
	case req.follow:
		followJob(ctx, s, rc, id, req.query.After, feed)
	case req.tail == 0:
		sendPages(ctx, s, id, req.query.After, feed)
	}
}

// logsStart resolves a relative since by the database's clock and, with
// tail, reads the last lines. It moves req's After past them, where a
// follow goes on.
func (s *server) logsStart(ctx context.Context, req *logsRequest) ([]store.LogChunk, error) {
	if req.ago > 0 {
		now, err := s.opts.Store.Now(ctx)
		if err != nil {
			return nil, err
		}
		req.query.Since = now.Add(-req.ago)
	}
	if req.tail == 0 {
		return nil, nil
	}
	q := req.query
	q.Limit = req.tail
	chunks, err := s.opts.Store.LogTail(ctx, q)
	if err != nil || len(chunks) == 0 {
		return nil, err
	}
	req.query.After = chunks[len(chunks)-1].Seq
	return lastLines(chunks, req.tail), nil
}

// lastLines keeps the last n lines of chunks, in write order, counted as
// format=jsonl's records are (a chunk ending without a newline ends with a
// partial line). The first chunk kept may be cut to its last lines.
func lastLines(chunks []store.LogChunk, n int) []store.LogChunk {
	skip := -n
	for _, c := range chunks {
		skip += len(splitLines(c.Data))
	}
	for len(chunks) > 0 && skip > 0 {
		lines := len(splitLines(chunks[0].Data))
		if lines > skip {
			c := chunks[0]
			c.Data = dropLines(c.Data, skip)
			return append([]store.LogChunk{c}, chunks[1:]...)
		}
		skip -= lines
		chunks = chunks[1:]
	}
	return chunks
}

// dropLines returns data without its first k lines.
func dropLines(data []byte, k int) []byte {
	for range k {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil
		}
		data = data[i+1:]
	}
	return data
}
