// Package client is a typed Go client for tether's HTTP API, used by the
// tether CLI, by tests and by services that submit and follow jobs. Its
// requests and answers are the wire types of package
// github.com/tetherjobs/tether/pkg/api. It imports nothing else of tether,
// so any module can use it.
//
// A Client talks to one server. A Failover spreads over several equivalent
// servers (agents sharing one database) and follows a job's output, events or
// status across the loss of any of them, resuming where it left off.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
)

// APIError is an error answer from the API.
type APIError struct {
	Status  int    // HTTP status code
	Message string // the "error" field
	Field   string // the offending request field, if any
	Code    string // machine-readable kind, e.g. "idempotency_conflict"
}

func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (HTTP %d, field %s)", e.Message, e.Status, e.Field)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// IsNotFound reports whether err is a 404 from the API.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// Client talks to one tether API server.
type Client struct {
	base           *url.URL
	token          string
	http           *http.Client
	pollInterval   time.Duration
	requestTimeout time.Duration
}

// Jobs is what a Client does with jobs. Code that submits and follows jobs
// can take a Jobs, and its tests can pass a fake.
type Jobs interface {
	Submit(ctx context.Context, req api.SubmitRequest) (job api.Job, created bool, err error)
	Get(ctx context.Context, id string) (api.JobDetail, error)
	List(ctx context.Context, o ListOptions) (jobs []api.Job, next string, err error)
	Cancel(ctx context.Context, id, reason string) (api.Job, error)
	Requeue(ctx context.Context, id string, req api.RequeueRequest) (api.RequeueResponse, error)
	Events(ctx context.Context, id string) ([]api.Event, error)
	Wait(ctx context.Context, id string, onChange func(api.JobDetail)) (api.JobDetail, error)
}

var _ Jobs = (*Client)(nil)

// Option configures a Client.
type Option func(*Client)

// WithToken sends a bearer token with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient replaces http.DefaultClient. It must not have a Timeout if
// logs are followed. Use contexts instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithPollInterval sets how often Wait polls the job (default 500ms).
func WithPollInterval(d time.Duration) Option { return func(c *Client) { c.pollInterval = d } }

// WithRequestTimeout bounds each single request (not followed streams,
// which last as long as the job). 0, the default, means no bound.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithConnectTimeout bounds connecting to the server and waiting for its
// answer's headers, for every request including followed streams, so a
// server that accepts but never answers is given up on. It replaces the
// HTTP client with one using a copy of http.DefaultTransport.
func WithConnectTimeout(d time.Duration) Option {
	return func(c *Client) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: d, KeepAlive: 30 * time.Second}).DialContext
		t.TLSHandshakeTimeout = d
		t.ResponseHeaderTimeout = d
		c.http = &http.Client{Transport: t}
	}
}

// String returns the server's base URL.
func (c *Client) String() string { return c.base.String() }

// New returns a client of the server at baseURL, e.g. "http://127.0.0.1:9090".
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || !slices.Contains([]string{"http", "https"}, u.Scheme) || u.Host == "" {
		return nil, fmt.Errorf("server %q: want a URL like http://127.0.0.1:9090", baseURL)
	}
	c := &Client{base: u, http: http.DefaultClient, pollInterval: 500 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// do sends a request and returns the response when its status is 2xx. Other
// answers become *APIError. The caller closes the body.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	if body != nil {
		// The API refuses a state-changing request without it (415). A
		// cross-site form cannot send it.
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.Error
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = cmp.Or(strings.TrimSpace(string(b)), http.StatusText(resp.StatusCode))
	}
	return nil, &APIError{Status: resp.StatusCode, Message: e.Error, Field: e.Field, Code: e.Code}
}

// call sends a JSON request and decodes a JSON answer into out.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, body, out any) (int, error) {
	if c.requestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.requestTimeout)
		defer cancel()
	}
	resp, err := c.do(ctx, method, path, query, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: decoding answer: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// set adds key=value to q unless value is empty (the server's default).
func set(q url.Values, key, value string) {
	if value != "" {
		q.Set(key, value)
	}
}

// setPositive adds key=n to q unless n is 0 or less (the server's default).
func setPositive(q url.Values, key string, n int64) {
	if n > 0 {
		q.Set(key, strconv.FormatInt(n, 10))
	}
}

func jobPath(id string, rest ...string) string {
	return "/api/v1/jobs/" + url.PathEscape(id) + strings.Join(rest, "")
}

// Submit submits a job. created is false when the idempotency key replayed an
// earlier identical request.
func (c *Client) Submit(ctx context.Context, req api.SubmitRequest) (job api.Job, created bool, err error) {
	status, err := c.call(ctx, http.MethodPost, "/api/v1/jobs", nil, req, &job)
	return job, status == http.StatusCreated, err
}

// Get returns a job with the remote resources its plugin reported.
func (c *Client) Get(ctx context.Context, id string) (api.JobDetail, error) {
	var j api.JobDetail
	_, err := c.call(ctx, http.MethodGet, jobPath(id), nil, nil, &j)
	return j, err
}

// ListOptions filter List. Empty fields match everything.
type ListOptions struct {
	Status             api.JobStatus
	Command, Submitter string
	IdempotencyKey     string // exact, any submitter's
	Agent              string // only the jobs this agent holds now
	// Since and Until bound the creation time (since ≤ created < until).
	// Zero means unbounded.
	Since, Until time.Time
	Limit        int    // 0 = server default (50)
	After        string // cursor from a previous page
}

// List returns one page of jobs, newest first, and the cursor of the next
// page ("" on the last).
func (c *Client) List(ctx context.Context, o ListOptions) ([]api.Job, string, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": string(o.Status), "command": o.Command, "submitter": o.Submitter,
		"idempotency_key": o.IdempotencyKey, "after": o.After, "agent": o.Agent} {
		set(q, k, v)
	}
	for k, v := range map[string]time.Time{"since": o.Since, "until": o.Until} {
		if !v.IsZero() {
			q.Set(k, v.UTC().Format(time.RFC3339Nano))
		}
	}
	setPositive(q, "limit", int64(o.Limit))
	var l api.JobList
	_, err := c.call(ctx, http.MethodGet, "/api/v1/jobs", q, nil, &l)
	return l.Jobs, l.Next, err
}

// Cancel cancels a job. reason may be empty.
func (c *Client) Cancel(ctx context.Context, id, reason string) (api.Job, error) {
	var j api.Job
	_, err := c.call(ctx, http.MethodPost, jobPath(id, "/cancel"), nil, api.CancelRequest{Reason: reason}, &j)
	return j, err
}

// Requeue puts a failed or canceled job back in the queue as a new attempt.
// reason is required. Key (optional) makes the request idempotent. Resending
// it returns the first answer with Replayed set.
func (c *Client) Requeue(ctx context.Context, id string, req api.RequeueRequest) (api.RequeueResponse, error) {
	var out api.RequeueResponse
	_, err := c.call(ctx, http.MethodPost, jobPath(id, "/requeue"), nil, req, &out)
	return out, err
}

// Logs copies a job's output to w: stream "stdout", "stderr" or "" for both.
// With follow it returns when the job has finished and all its output was
// written, or ctx ends.
func (c *Client) Logs(ctx context.Context, id, stream string, follow bool, w io.Writer) error {
	q := url.Values{}
	set(q, "stream", stream)
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.do(ctx, http.MethodGet, jobPath(id, "/logs"), q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("reading logs of %s: %w", id, err)
	}
	return nil
}

// Events returns a job's timeline.
func (c *Client) Events(ctx context.Context, id string) ([]api.Event, error) {
	var l api.EventList
	_, err := c.call(ctx, http.MethodGet, jobPath(id, "/events"), nil, nil, &l)
	return l.Events, err
}

// Agents lists the live agents: ListAgents(ctx, false).
func (c *Client) Agents(ctx context.Context) ([]api.Agent, error) {
	return c.ListAgents(ctx, false)
}

// ListAgents lists the live agents (running or draining, seen within the
// server's stale_job), or every agents row, stopped and silent ones too,
// when all is true.
func (c *Client) ListAgents(ctx context.Context, all bool) ([]api.Agent, error) {
	var q url.Values
	if all {
		q = url.Values{"all": {"true"}}
	}
	var l api.AgentList
	_, err := c.call(ctx, http.MethodGet, "/api/v1/agents", q, nil, &l)
	return l.Agents, err
}

// DrainAgent asks a running agent to drain through the database, as SIGTERM
// does (POST /api/v1/agents/{name}/drain). The answer's Requested is false
// when an earlier request stands.
func (c *Client) DrainAgent(ctx context.Context, name string, req api.DrainAgentRequest) (api.DrainAgentResponse, error) {
	var out api.DrainAgentResponse
	_, err := c.call(ctx, http.MethodPost, "/api/v1/agents/"+url.PathEscape(name)+"/drain", nil, req, &out)
	return out, err
}

// Commands lists every command the server's config knows or an agent
// announces: who serves it, what is queued, and a hint when nobody does.
func (c *Client) Commands(ctx context.Context) ([]api.Command, error) {
	var l api.CommandList
	_, err := c.call(ctx, http.MethodGet, "/api/v1/commands", nil, nil, &l)
	return l.Commands, err
}

// Cleanups returns one page of the pending plugin Cleanup calls, in job ID
// order, and the cursor of the next page ("" on the last). limit 0 is the
// server's default.
func (c *Client) Cleanups(ctx context.Context, after string, limit int) ([]api.Cleanup, string, error) {
	q := url.Values{}
	set(q, "after", after)
	setPositive(q, "limit", int64(limit))
	var l api.CleanupList
	_, err := c.call(ctx, http.MethodGet, "/api/v1/cleanups", q, nil, &l)
	return l.Cleanups, l.Next, err
}

// Ready returns nil when the server answers /readyz with 200.
func (c *Client) Ready(ctx context.Context) error {
	var s api.Status
	_, err := c.call(ctx, http.MethodGet, "/readyz", nil, nil, &s)
	return err
}

// maxWaitFailures is how many network errors in a row Wait rides out.
const maxWaitFailures = 20

// Wait polls a job until it is finished and returns it. onChange, if not nil,
// is called with the job whenever its status (or attempt) changes, first with
// its state when Wait starts. Network errors are retried a few times (the
// server may be restarting). API errors end the wait.
func (c *Client) Wait(ctx context.Context, id string, onChange func(api.JobDetail)) (api.JobDetail, error) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	w := watch{onChange: onChange}
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return w.last, ctx.Err()
		case <-timer.C:
		}
		timer.Reset(c.pollInterval)
		j, err := c.Get(ctx, id)
		if err != nil {
			var ae *APIError
			if !errors.As(err, &ae) && ctx.Err() == nil && failures < maxWaitFailures {
				failures++ // the server may be restarting (a rollout): try again
				continue
			}
			return w.last, err
		}
		failures = 0
		if w.saw(j) {
			return j, nil
		}
	}
}

// watch is what a Wait has seen of a job.
type watch struct {
	onChange func(api.JobDetail) // nil: not told
	last     api.JobDetail
	seen     bool
}

// saw records j, calls onChange when it is the first or its status or
// attempt changed, and reports whether j is finished.
func (w *watch) saw(j api.JobDetail) bool {
	if w.onChange != nil && (!w.seen || j.Status != w.last.Status || j.Attempt != w.last.Attempt) {
		w.onChange(j)
	}
	w.last, w.seen = j, true
	return j.Status.Terminal()
}
