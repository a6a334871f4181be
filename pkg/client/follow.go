package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
)

// ErrStreamCut says a followed stream ended before the job did (the agent
// drained, restarted or died). Follow again with After set to the last seq.
var ErrStreamCut = errors.New("stream ended before the job did")

// LogQuery selects the records of one LogRecords call.
type LogQuery struct {
	Stream string // "stdout", "stderr" or "" for both, in write order
	After  int64  // only records with a larger seq
	Follow bool   // keep the stream open until the job is finished
	// Tail, when above 0, keeps only the last Tail lines (of those the
	// other fields select); a follow goes on from there.
	Tail int
	// Since keeps the output received at or after it; SinceAgo, when above
	// 0, the output received within that long before the database's now.
	Since    time.Time
	SinceAgo time.Duration
}

// values adds q's filters to v.
func (q LogQuery) values(v url.Values) {
	set(v, "stream", q.Stream)
	if q.Follow {
		v.Set("follow", "true")
	}
	setPositive(v, "after", q.After)
	setPositive(v, "tail", int64(q.Tail))
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.SinceAgo > 0 {
		v.Set("since", q.SinceAgo.String())
	}
}

// LogRecords reads a job's output as records over one connection, calling fn
// for each line in write order. It returns the end record of a followed
// stream, or ErrStreamCut if a followed stream ended without one.
func (c *Client) LogRecords(ctx context.Context, id string, q LogQuery, fn func(api.LogLine) error) (api.StreamEnd, error) {
	v := url.Values{"format": {"jsonl"}}
	q.values(v)
	return records(ctx, c, jobPath(id, "/logs"), v, q.Follow, "reading logs of "+id, func(r api.LogRecord) error { return fn(r.LogLine) })
}

// EventRecords reads a job's events after seq after over one connection. With
// follow it returns the end record, or ErrStreamCut if the stream ended first.
func (c *Client) EventRecords(ctx context.Context, id string, after int64, follow bool, fn func(api.Event) error) (api.StreamEnd, error) {
	v := url.Values{}
	setPositive(v, "after", after)
	if !follow {
		// Without follow the API answers a JSON list, not NDJSON.
		var l api.EventList
		if _, err := c.call(ctx, http.MethodGet, jobPath(id, "/events"), v, nil, &l); err != nil {
			return api.StreamEnd{}, err
		}
		for _, e := range l.Events {
			if err := fn(e); err != nil {
				return api.StreamEnd{}, err
			}
		}
		return api.StreamEnd{}, nil
	}
	v.Set("follow", "true")
	return records(ctx, c, jobPath(id, "/events"), v, true, "following events of "+id, func(r api.EventRecord) error { return fn(r.Event) })
}

// records reads the NDJSON records at path, calling fn for each until the
// end record, and returns that. A followed stream without one is
// ErrStreamCut. Other errors are wrapped with doing.
func records[R interface{ EndRecord() api.StreamEnd }](ctx context.Context, c *Client, path string, q url.Values,
	follow bool, doing string, fn func(R) error) (api.StreamEnd, error) {
	var end api.StreamEnd
	err := c.ndjson(ctx, path, q, func(dec *json.Decoder) error {
		var r R
		if err := dec.Decode(&r); err != nil {
			return err
		}
		if e := r.EndRecord(); e.End {
			end = e
			return errEnd
		}
		return fn(r)
	})
	switch {
	case errors.Is(err, errEnd):
		return end, nil
	case err != nil:
		return end, fmt.Errorf("%s: %w", doing, err)
	case follow:
		return end, ErrStreamCut
	}
	return end, nil
}

// errEnd stops an NDJSON read at an end record.
var errEnd = errors.New("end record")

// ndjson GETs path and calls next until the body ends (nil) or next fails.
func (c *Client) ndjson(ctx context.Context, path string, q url.Values, next func(*json.Decoder) error) error {
	resp, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for dec.More() {
		if err := next(dec); err != nil {
			return err
		}
	}
	// More is false at EOF and on a read error alike. Tell them apart.
	if _, err := dec.Token(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
