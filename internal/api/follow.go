package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/notify"
	"github.com/tetherjobs/tether/internal/store"
	wire "github.com/tetherjobs/tether/pkg/api"
)

// eventPollInterval bounds how long a followed event stream waits while
// NOTIFY works. Only the job's end and its output are notified, not its
// other events (claimed, released, …).
const eventPollInterval = time.Second

// waiter is how a follower of one job waits for more. It is woken by the job's
// notifications, polling as a fallback — slowly while the hub is live,
// every LogPollInterval while it is not.
type waiter struct {
	sub      *notify.Sub
	hub      *notify.Hub
	st       *store.Store
	log      *slog.Logger
	follower int64         // job_followers row; 0 = none
	slow     time.Duration // poll while the hub is live
	fast     time.Duration // poll while it is not
	timer    *time.Timer
	stopping <-chan struct{}
}

// newWaiter records the follower in the database (the job's end is
// notified only to followed jobs) and subscribes to jobID. Call it before
// the first read, so nothing notified in between is missed. If the record
// cannot be written, the follower still works, on the fallback poll.
func (s *server) newWaiter(ctx context.Context, jobID string, slow time.Duration) *waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	w := &waiter{hub: s.opts.Follow, st: s.opts.Store, log: s.log,
		slow: slow, fast: s.opts.LogPollInterval, timer: t, stopping: s.opts.Stopping}
	fid, err := s.opts.Store.AddFollower(ctx, jobID)
	switch {
	case err == nil:
		w.follower = fid
	case ctx.Err() == nil:
		s.log.WarnContext(ctx, "following a job: its end will be seen by polling", "job", jobID, "err", err)
	}
	w.sub = s.opts.Follow.Subscribe(jobID)
	return w
}

func (w *waiter) close() {
	w.timer.Stop()
	w.sub.Close()
	if w.follower != 0 {
		// The request's context may be gone. The row must go anyway.
		ctx, cancel := context.WithTimeout(context.Background(), followerRemoveTimeout)
		defer cancel()
		if err := w.st.RemoveFollower(ctx, w.follower); err != nil {
			w.log.Warn("following a job: forgetting the follower", "err", err)
		}
	}
}

// followerRemoveTimeout bounds forgetting a follower once its stream ended.
const followerRemoveTimeout = 5 * time.Second

// wait returns true when there may be something new, false when the
// follower must stop (client gone, agent stopping).
func (w *waiter) wait(ctx context.Context) bool {
	d := w.fast
	if w.hub.Live() {
		d = max(w.slow, w.fast)
	}
	w.timer.Reset(d)
	defer w.timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-w.stopping:
		return false // the agent is shutting down; the client may follow another
	case <-w.sub.C():
		return true
	case <-w.timer.C:
		return true
	}
}

// logSink writes chunks in one of the logs formats.
type logSink interface {
	chunk(c store.LogChunk) error
	// end closes a followed stream of a finished job.
	end(status jobstate.JobStatus, attempt int) error
}

type rawSink struct{ w io.Writer }

func (r rawSink) chunk(c store.LogChunk) error    { _, err := r.w.Write(c.Data); return err }
func (rawSink) end(jobstate.JobStatus, int) error { return nil }

type jsonlSink struct{ enc *json.Encoder }

func newJSONLSink(w io.Writer) jsonlSink {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return jsonlSink{enc: enc}
}

func (j jsonlSink) chunk(c store.LogChunk) error {
	for _, l := range splitLines(c.Data) {
		if err := j.enc.Encode(wire.LogLine{Seq: c.Seq, Attempt: c.Attempt, Stream: c.Stream, Time: c.At.UTC(),
			Line: string(l.text), Partial: l.partial}); err != nil {
			return err
		}
	}
	return nil
}

func (j jsonlSink) end(status jobstate.JobStatus, attempt int) error {
	return j.enc.Encode(wire.StreamEnd{End: true, Status: status, Attempt: attempt})
}

type line struct {
	text    []byte
	partial bool
}

// splitLines cuts a chunk into lines without their newlines. A last line
// with no newline is partial (its rest comes in a later chunk, if at all).
func splitLines(data []byte) []line {
	var out []line
	for l := range bytes.Lines(data) {
		text, whole := bytes.CutSuffix(l, []byte("\n"))
		out = append(out, line{text: text, partial: !whole})
	}
	return out
}

// streamHeaders starts a 200 answer. A followed one may last as long as the
// job, so the server-wide write timeout must not cut it.
func streamHeaders(w http.ResponseWriter, contentType string, follow bool) *http.ResponseController {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if follow {
		_ = rc.SetWriteDeadline(time.Time{}) // not every writer supports it; the default has none
	}
	w.WriteHeader(http.StatusOK)
	return rc
}

// feed is what a stream of one job sends: its log chunks or its events.
type feed[T any] struct {
	what string        // "job logs" or "job events", for the log
	poll time.Duration // the waiter's poll while the hub is live
	page int           // a shorter page is the last one
	read func(ctx context.Context, after int64) ([]T, error)
	send func(T) error
	seq  func(T) int64
	end  func(status jobstate.JobStatus, attempt int) error
}

// sendPages sends the items after `after`, a page at a time, and returns
// the seq of the last one sent. False means the stream must stop.
func sendPages[T any](ctx context.Context, s *server, id string, after int64, f feed[T]) (int64, bool) {
	for {
		items, err := f.read(ctx, after)
		if err != nil {
			s.stopFollowing(ctx, "reading "+f.what, id, err)
			return after, false
		}
		for _, it := range items {
			if err := f.send(it); err != nil {
				return after, false // the client went away
			}
			after = f.seq(it)
		}
		if len(items) < f.page {
			return after, true
		}
	}
}

// followJob sends a job's items after `after` until the job is finished and
// every item is sent (then f.end), the client goes away, or the agent stops
// (no end: the client resumes elsewhere with after=<last seq>).
func followJob[T any](ctx context.Context, s *server, rc *http.ResponseController, id string, after int64, f feed[T]) {
	wt := s.newWaiter(ctx, id, f.poll)
	defer wt.close()
	for {
		// Subscribed already, so no end notified from now on is missed. The
		// status is read before the items. If it was final, every item the
		// job wrote is committed and this pass sends the rest.
		status, err := s.opts.Store.JobStatus(ctx, id)
		if err != nil {
			// Deleted by retention or the database is gone. End the stream
			// without an end record. The client sees it cut.
			s.stopFollowing(ctx, "following "+f.what, id, err)
			return
		}
		var ok bool
		if after, ok = sendPages(ctx, s, id, after, f); !ok {
			return
		}
		if store.Terminal(status) {
			s.endStream(ctx, id, status, f.end)
			return
		}
		if rc.Flush() != nil || !wt.wait(ctx) {
			return
		}
	}
}

// logFeed is the feed of the log chunks q selects (its After and Limit
// aside), a page at a time.
func (s *server) logFeed(q store.LogQuery, sink logSink) feed[store.LogChunk] {
	return feed[store.LogChunk]{what: "job logs", poll: s.opts.FollowPollInterval, page: logPageSize,
		read: func(ctx context.Context, after int64) ([]store.LogChunk, error) {
			q.After, q.Limit = after, logPageSize
			return s.opts.Store.LogPage(ctx, q)
		},
		send: sink.chunk, seq: func(c store.LogChunk) int64 { return c.Seq }, end: sink.end}
}

// eventFeed is the feed of a job's events as NDJSON, limit a page.
func (s *server) eventFeed(id string, limit int, w io.Writer) feed[store.Event] {
	j := newJSONLSink(w)
	return feed[store.Event]{what: "job events", poll: eventPollInterval, page: limit,
		read: func(ctx context.Context, after int64) ([]store.Event, error) {
			return s.opts.Store.Events(ctx, id, after, limit)
		},
		send: func(e store.Event) error { return j.enc.Encode(e) }, seq: func(e store.Event) int64 { return e.ID }, end: j.end}
}

// endStream writes the end record with the job's last attempt.
func (s *server) endStream(ctx context.Context, id string, status jobstate.JobStatus, end func(jobstate.JobStatus, int) error) {
	j, err := s.opts.Store.GetJob(ctx, id)
	if err != nil {
		s.stopFollowing(ctx, "ending a followed stream", id, err)
		return
	}
	_ = end(status, j.Attempt) // a client gone now has everything but the end
}

func (s *server) stopFollowing(ctx context.Context, doing, id string, err error) {
	if ctx.Err() == nil {
		s.log.WarnContext(ctx, doing, "job", id, "err", err)
	}
}
