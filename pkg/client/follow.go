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
	"strconv"

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
}

// LogRecords reads a job's output as records over one connection, calling fn
// for each line in write order. It returns the end record of a followed
// stream, or ErrStreamCut if a followed stream ended without one.
func (c *Client) LogRecords(ctx context.Context, id string, q LogQuery, fn func(api.LogLine) error) (api.StreamEnd, error) {
	v := url.Values{"format": {"jsonl"}}
	if q.Stream != "" {
		v.Set("stream", q.Stream)
	}
	if q.Follow {
		v.Set("follow", "true")
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	var end api.StreamEnd
	err := c.ndjson(ctx, jobPath(id, "/logs"), v, func(dec *json.Decoder) error {
		var r api.LogRecord
		if err := dec.Decode(&r); err != nil {
			return err
		}
		if r.End {
			end = r.EndRecord()
			return errEnd
		}
		return fn(r.LogLine)
	})
	if err == nil && q.Follow {
		return end, ErrStreamCut
	}
	if err != nil && !errors.Is(err, errEnd) {
		return end, fmt.Errorf("reading logs of %s: %w", id, err)
	}
	return end, nil
}

// EventRecords reads a job's events after seq after over one connection. With
// follow it returns the end record, or ErrStreamCut if the stream ended first.
func (c *Client) EventRecords(ctx context.Context, id string, after int64, follow bool, fn func(api.Event) error) (api.StreamEnd, error) {
	v := url.Values{"follow": {"true"}}
	if after > 0 {
		v.Set("after", strconv.FormatInt(after, 10))
	}
	if !follow {
		// Without follow the API answers a JSON list, not NDJSON.
		evs, err := c.eventsAfter(ctx, id, after)
		if err != nil {
			return api.StreamEnd{}, err
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return api.StreamEnd{}, err
			}
		}
		return api.StreamEnd{}, nil
	}
	var end api.StreamEnd
	err := c.ndjson(ctx, jobPath(id, "/events"), v, func(dec *json.Decoder) error {
		var r api.EventRecord
		if err := dec.Decode(&r); err != nil {
			return err
		}
		if r.End {
			end = r.EndRecord()
			return errEnd
		}
		return fn(r.Event)
	})
	if err == nil {
		return end, ErrStreamCut
	}
	if !errors.Is(err, errEnd) {
		return end, fmt.Errorf("following events of %s: %w", id, err)
	}
	return end, nil
}

func (c *Client) eventsAfter(ctx context.Context, id string, after int64) ([]api.Event, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	var l api.EventList
	_, err := c.call(ctx, http.MethodGet, jobPath(id, "/events"), q, nil, &l)
	return l.Events, err
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
