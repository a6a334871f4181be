// Package emulator serves a local subset of the Amazon ECS and CloudWatch
// Logs JSON 1.1 protocols, and EKS DescribeCluster (REST-JSON), good enough
// for the real aws-sdk-go-v2 clients. Each ECS task runs its containers'
// commands as local processes. EKS clusters are registered by tests.
package emulator

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	region  = "us-east-1"
	account = "000000000000"

	ecsTargetPrefix  = "AmazonEC2ContainerServiceV20141113."
	logsTargetPrefix = "Logs_20140328."

	// stepDelay separates PROVISIONING, PENDING, ACTIVATING and RUNNING (and
	// DEACTIVATING, STOPPING, DEPROVISIONING and STOPPED) so pollers can see them.
	stepDelay = 20 * time.Millisecond
	// clientTokenTTL is how long RunTask remembers a clientToken, as in ECS.
	clientTokenTTL = 24 * time.Hour
	maxBodyBytes   = 10 << 20
)

// Options configures an Emulator. Zero values get the documented defaults,
// which are the "kind" profile: every hostile behaviour off.
// HostileOptions returns the "hostile" profile.
type Options struct {
	// StoppedRetention is how long stopped tasks stay visible (default 1h).
	StoppedRetention time.Duration
	// StopTimeout is the wait between SIGTERM and SIGKILL (default 30s).
	StopTimeout time.Duration
	// ThrottleRate is the fraction of AWS requests answered with ThrottlingException.
	ThrottleRate float64
	// ServerErrorRate is the fraction of AWS requests answered with HTTP 500.
	ServerErrorRate float64
	// ServerErrorsAfterRun makes an injected HTTP 500 come after the call
	// ran, so its effects stand (a RunTask may have launched) though the
	// answer is lost. Off, a 500 means the call did nothing.
	ServerErrorsAfterRun bool
	// Latency is added to every AWS request.
	Latency time.Duration
	// FailToStartRate is the fraction of tasks that stop with TaskFailedToStart.
	FailToStartRate float64
	// FailToStartReasons are the stopped reasons a failure to start picks
	// from, uniformly per task (default: one injected CannotPullContainerError).
	// The FailToStart* constants are real ones.
	FailToStartReasons []string
	// CapacityErrorRate is the fraction of RunTask task slots returned under
	// failures instead of being launched.
	CapacityErrorRate float64
	// CapacityReasons are the failure reasons a capacity error picks from,
	// uniformly per slot (default: RESOURCE:CPU only). AllCapacityReasons
	// lists the documented ones.
	CapacityReasons []string
	// ConsistencyWindow hides a task RunTask launched from DescribeTasks and
	// ListTasks for a random time in [0, ConsistencyWindow], chosen per task.
	ConsistencyWindow time.Duration
	// LogLag delays each log event's visibility to GetLogEvents by a random
	// time in [0, LogLag], keeping order within a stream.
	LogLag time.Duration
	// LogStreamDelay makes every awslogs stream appear to readers at least
	// this long after its first event was written: CloudWatch showing a
	// stream late. Until then GetLogEvents answers ResourceNotFoundException.
	LogStreamDelay time.Duration
	// EmptyLogPageRate is the fraction of GetLogEvents reads that have
	// events to return but answer an empty page with a new forward token,
	// as CloudWatch does mid-stream. Only a token that comes back unchanged
	// marks the stream's end.
	EmptyLogPageRate float64
	// RunTaskTransientRate is the fraction of RunTask calls answered with a
	// transient capacity or EC2 rate error, launching nothing.
	RunTaskTransientRate float64
	// InfraStopRate is the fraction of tasks that the "infrastructure" stops
	// (Spot interruption, instance termination) while RUNNING.
	InfraStopRate float64
	// InfraStopDelay bounds the random time after RUNNING at which an
	// infrastructure stop hits (default 10s).
	InfraStopDelay time.Duration
	// InfraStopGraceful makes every infrastructure stop graceful: SIGTERM,
	// StopTimeout, then SIGKILL, with the containers' exit codes reported
	// (what a program that traps SIGTERM answers, 0 included). Without it
	// half of them lose the host: SIGKILL and no exit codes.
	InfraStopGraceful bool
	// StartedByOnly makes ListTasks read the reference's words on startedBy
	// literally: "When you specify startedBy as the filter, it must be the
	// only filter that you use". A startedBy with a desiredStatus is then
	// refused (InvalidParameterException), and a startedBy alone lists its
	// tasks of every desired status. Without it (as moto does) the two
	// combine.
	StartedByOnly bool
	// DeprovisionDelay is how long a stopped task stays DEPROVISIONING (its
	// containers exited, their exit codes known, its network interface
	// being released) before it is STOPPED (at least stepDelay).
	DeprovisionDelay time.Duration
	// RateLimits turns on the account-wide token buckets per API action.
	RateLimits bool
	// RateLimitFigures replace DefaultRateLimits' figures for the actions
	// they name. A key may join actions with "+" to share one bucket. A
	// figure with Rate 0 removes the limit.
	RateLimitFigures map[string]RateLimit
	// TokenReplayAfterPurge is what a clientToken replay returns once the
	// token's tasks are gone: TokenReplayMissing (default) or TokenReplayRelaunch.
	TokenReplayAfterPurge string
	// LiveTail are the StartLiveTail limits and faults (livetail.go).
	LiveTail LiveTail
	Logger   *slog.Logger
	// Seed makes fault injection reproducible. 0 picks a random seed.
	Seed int64
}

// Token replay modes say what RunTask does with a clientToken whose tasks were
// purged after StoppedRetention. AWS documents neither.
const (
	TokenReplayMissing  = "missing"
	TokenReplayRelaunch = "relaunch"
)

// Faults are the fault-injection knobs that can change at runtime. Durations
// are nanoseconds in JSON.
type Faults struct {
	ThrottleRate          float64              `json:"throttleRate"`
	ServerErrorRate       float64              `json:"serverErrorRate"`
	ServerErrorsAfterRun  bool                 `json:"serverErrorsAfterRun"`
	Latency               time.Duration        `json:"latency"`
	FailToStartRate       float64              `json:"failToStartRate"`
	FailToStartReasons    []string             `json:"failToStartReasons"`
	CapacityErrorRate     float64              `json:"capacityErrorRate"`
	CapacityReasons       []string             `json:"capacityReasons"`
	ConsistencyWindow     time.Duration        `json:"consistencyWindow"`
	LogLag                time.Duration        `json:"logLag"`
	LogStreamDelay        time.Duration        `json:"logStreamDelay"`
	EmptyLogPageRate      float64              `json:"emptyLogPageRate"`
	RunTaskTransientRate  float64              `json:"runTaskTransientRate"`
	InfraStopRate         float64              `json:"infraStopRate"`
	InfraStopDelay        time.Duration        `json:"infraStopDelay"`
	InfraStopGraceful     bool                 `json:"infraStopGraceful"`
	StartedByOnly         bool                 `json:"startedByOnly"`
	DeprovisionDelay      time.Duration        `json:"deprovisionDelay"`
	RateLimits            bool                 `json:"rateLimits"`
	RateLimitFigures      map[string]RateLimit `json:"rateLimitFigures"`
	TokenReplayAfterPurge string               `json:"tokenReplayAfterPurge"`
	LiveTail              LiveTail             `json:"liveTail"`
}

func (o Options) faults() Faults {
	return Faults{
		ThrottleRate:          o.ThrottleRate,
		ServerErrorRate:       o.ServerErrorRate,
		ServerErrorsAfterRun:  o.ServerErrorsAfterRun,
		Latency:               o.Latency,
		FailToStartRate:       o.FailToStartRate,
		FailToStartReasons:    o.FailToStartReasons,
		CapacityErrorRate:     o.CapacityErrorRate,
		CapacityReasons:       o.CapacityReasons,
		ConsistencyWindow:     o.ConsistencyWindow,
		LogLag:                o.LogLag,
		LogStreamDelay:        o.LogStreamDelay,
		EmptyLogPageRate:      o.EmptyLogPageRate,
		RunTaskTransientRate:  o.RunTaskTransientRate,
		InfraStopRate:         o.InfraStopRate,
		InfraStopDelay:        o.InfraStopDelay,
		InfraStopGraceful:     o.InfraStopGraceful,
		StartedByOnly:         o.StartedByOnly,
		DeprovisionDelay:      o.DeprovisionDelay,
		RateLimits:            o.RateLimits,
		RateLimitFigures:      o.RateLimitFigures,
		TokenReplayAfterPurge: o.TokenReplayAfterPurge,
		LiveTail:              o.LiveTail,
	}
}

// clone copies the slice and map so the emulator never shares them with a caller.
func (f Faults) clone() Faults {
	f.CapacityReasons = slices.Clone(f.CapacityReasons)
	f.FailToStartReasons = slices.Clone(f.FailToStartReasons)
	f.RateLimitFigures = maps.Clone(f.RateLimitFigures)
	return f
}

// validate rejects settings the emulator cannot act on.
func (f Faults) validate() error {
	switch f.TokenReplayAfterPurge {
	case "", TokenReplayMissing, TokenReplayRelaunch:
	default:
		return fmt.Errorf("tokenReplayAfterPurge %q: want %q or %q", f.TokenReplayAfterPurge, TokenReplayMissing, TokenReplayRelaunch)
	}
	if slices.Contains(f.CapacityReasons, "") {
		return errors.New("capacityReasons: empty reason")
	}
	for k, l := range f.RateLimitFigures {
		if err := l.validate(k); err != nil {
			return err
		}
	}
	return nil
}

// Emulator holds all emulated state in memory.
type Emulator struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	faults   Faults
	rng      *mrand.Rand
	clusters map[string]*cluster
	families map[string][]*taskDef
	tasks    map[string]*task // by task ID
	tokens   map[string]*tokenEntry
	launches map[string]int
	seq      uint64
	logs     map[string]*logGroup
	eks      map[string]eksCluster
	secrets  *secretStore
	buckets  map[string]*bucket // by operation; nil when rate limits are off
	calls    map[string]int
	throttle map[string]int
	// emptyPages counts the empty log pages served, so each one's token
	// differs from the last.
	emptyPages int
	// liveSessions counts the open StartLiveTail sessions (livetail.go).
	liveSessions int

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	srv       *http.Server
}

// New returns an Emulator with the implicit "default" cluster.
func New(opts Options) *Emulator {
	opts = opts.withDefaults()
	lg := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	seed := uint64(cmp.Or(opts.Seed, time.Now().UnixNano()))
	e := &Emulator{
		opts:     opts,
		log:      lg,
		faults:   opts.faults().clone(),
		rng:      mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clusters: map[string]*cluster{},
		families: map[string][]*taskDef{},
		tasks:    map[string]*task{},
		tokens:   map[string]*tokenEntry{},
		launches: map[string]int{},
		logs:     map[string]*logGroup{},
		eks:      map[string]eksCluster{},
		secrets:  newSecretStore(),
		calls:    map[string]int{},
		throttle: map[string]int{},
		closing:  make(chan struct{}),
	}
	e.buckets = newBuckets(e.faults, time.Now())
	e.clusters["default"] = newCluster("default", nil)
	e.wg.Add(1)
	go e.janitor()
	return e
}

// withDefaults fills in the documented defaults of zero fields.
func (o Options) withDefaults() Options {
	o.StoppedRetention = positiveOr(o.StoppedRetention, time.Hour)
	o.StopTimeout = positiveOr(o.StopTimeout, 30*time.Second)
	o.InfraStopDelay = positiveOr(o.InfraStopDelay, defaultInfraStopDelay)
	o.TokenReplayAfterPurge = cmp.Or(o.TokenReplayAfterPurge, TokenReplayMissing)
	return o
}

// positiveOr is d, or def when d is not positive.
func positiveOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Handler serves the AWS JSON protocols on POST /, EKS DescribeCluster on
// GET /clusters/{name} and the admin API under /_emulator/.
func (e *Emulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_emulator/launches", e.handleLaunches)
	mux.HandleFunc("GET /_emulator/faults", e.handleGetFaults)
	mux.HandleFunc("POST /_emulator/faults", e.handleSetFaults)
	mux.HandleFunc("GET /_emulator/calls", e.handleCalls)
	mux.HandleFunc("POST /_emulator/calls/reset", e.handleResetCalls)
	mux.HandleFunc("GET /_emulator/health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// EKS is a REST-JSON API, routed by path. Everything else on "/" is
	// the JSON 1.1 protocol, routed by X-Amz-Target.
	mux.HandleFunc("GET /clusters/{name}", e.handleDescribeEKSCluster)
	mux.HandleFunc("POST /_emulator/eks/clusters", e.handlePutEKSCluster)
	mux.HandleFunc("/", e.handleAWS)
	return mux
}

// Start listens on addr and serves in the background. It returns the base URL.
func (e *Emulator) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	e.mu.Lock()
	e.srv = srv
	e.mu.Unlock()
	go func() {
		// Serve always returns an error, ErrServerClosed after Shutdown.
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("emulator server stopped", "err", err)
		}
	}()
	return "http://" + ln.Addr().String(), nil
}

// Close stops the server and kills every task process, waiting for them.
func (e *Emulator) Close() error {
	var err error
	e.closeOnce.Do(func() {
		close(e.closing)
		e.mu.Lock()
		srv := e.srv
		e.mu.Unlock()
		if srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if serr := srv.Shutdown(ctx); serr != nil {
				err = fmt.Errorf("shutting down emulator server: %w", serr)
				_ = srv.Close()
			}
		}
		e.wg.Wait()
	})
	return err
}

// Launches reports how many tasks RunTask has launched with this startedBy.
func (e *Emulator) Launches(startedBy string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.launches[startedBy]
}

// SetFaults replaces the fault-injection settings. Changing the rate-limit
// settings refills every bucket.
func (e *Emulator) SetFaults(f Faults) {
	f = f.clone()
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.faults
	e.faults = f
	if old.RateLimits != f.RateLimits || !maps.Equal(old.RateLimitFigures, f.RateLimitFigures) {
		e.buckets = newBuckets(f, time.Now())
	}
}

func (e *Emulator) currentFaults() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults.clone()
}

// Calls reports how many AWS requests each operation received, and how many
// of those the rate limiter answered with ThrottlingException.
func (e *Emulator) Calls() (calls, throttled map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.calls), maps.Clone(e.throttle)
}

// EmptyLogPages is how many empty GetLogEvents pages EmptyLogPageRate made
// the emulator answer.
func (e *Emulator) EmptyLogPages() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.emptyPages
}

// ResetCalls zeroes the call counters.
func (e *Emulator) ResetCalls() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.calls)
	clear(e.throttle)
}

// admit counts a request for op and takes a token from its bucket. false
// means the rate limiter throttled it.
func (e *Emulator) admit(op string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls[op]++
	if b := e.buckets[op]; b != nil && !b.take(time.Now()) {
		e.throttle[op]++
		return false
	}
	return true
}

// chance reports true with probability p. e.mu must be held.
func (e *Emulator) chance(p float64) bool {
	return p > 0 && e.rng.Float64() < p
}

// janitor drops stopped tasks past retention and expired client tokens.
func (e *Emulator) janitor() {
	defer e.wg.Done()
	every := min(e.opts.StoppedRetention, time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			return
		case now := <-t.C:
			e.mu.Lock()
			maps.DeleteFunc(e.tasks, func(_ string, tk *task) bool { return e.expired(tk, now) })
			maps.DeleteFunc(e.tokens, func(_ string, te *tokenEntry) bool { return now.Sub(te.at) > clientTokenTTL })
			e.mu.Unlock()
		}
	}
}

func (e *Emulator) handleLaunches(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.URL.Query().Has("startedBy") {
		sb := r.URL.Query().Get("startedBy")
		writeJSON(w, http.StatusOK, map[string]any{"startedBy": sb, "count": e.launches[sb]})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"counts": maps.Clone(e.launches)})
}

func (e *Emulator) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, e.currentFaults())
}

// handleSetFaults merges the posted fields into the current settings:
// fields absent from the JSON keep their values.
func (e *Emulator) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	f := e.currentFaults()
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes)).Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err := f.validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	e.SetFaults(f)
	writeJSON(w, http.StatusOK, f)
}

func (e *Emulator) handleCalls(w http.ResponseWriter, _ *http.Request) {
	calls, throttled := e.Calls()
	writeJSON(w, http.StatusOK, map[string]any{"calls": calls, "throttled": throttled})
}

func (e *Emulator) handleResetCalls(w http.ResponseWriter, r *http.Request) {
	e.ResetCalls()
	e.handleCalls(w, r)
}

// apiError is an AWS error reply: {"__type": ..., "message": ...}.
type apiError struct {
	status int
	typ    string
	msg    string
	extra  map[string]any
}

func (a *apiError) Error() string { return a.typ + ": " + a.msg }

func errf(typ, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typ, msg: fmt.Sprintf(format, args...)}
}

func invalidParam(format string, args ...any) *apiError {
	return errf("InvalidParameterException", format, args...)
}

// pageSize reads a request's page size, named name in errors: most when
// unset, else 1 to most.
func pageSize(n *int, most int, name string) (int, error) {
	return intParam(n, most, most, name)
}

// intParam reads a request's count, named name in errors: def when unset,
// else 1 to most.
func intParam(n *int, def, most int, name string) (int, error) {
	if n == nil {
		return def, nil
	}
	if !inRange(*n, 1, most) {
		return 0, invalidParam("%s must be between 1 and %d", name, most)
	}
	return *n, nil
}

// inRange reports whether lo <= v <= hi.
func inRange[T cmp.Ordered](v, lo, hi T) bool { return lo <= v && v <= hi }

func clientErr(format string, args ...any) *apiError {
	return errf("ClientException", format, args...)
}

// rateExceeded is how ECS and CloudWatch Logs answer an over-limit call
// (HTTP 400), per "Request throttling for the Amazon ECS API".
func rateExceeded() *apiError { return errf("ThrottlingException", "Rate exceeded") }

func (e *Emulator) handleAWS(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	if r.Method != http.MethodPost || target == "" {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "not an AWS JSON request"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		writeAPIError(w, errf("SerializationException", "reading body: %v", err))
		return
	}
	if target == logsTargetPrefix+liveTailOp {
		e.serveLiveTail(w, r, body) // an event stream, not one JSON answer
		return
	}
	handler, service, op := e.route(target)
	if handler == nil {
		writeAPIError(w, errf("UnknownOperationException", "unknown operation %q", target))
		return
	}
	fault, ok := e.injectFault(r, service, op)
	if !ok {
		return
	}
	if fault != nil {
		// AWS does not say whether a call answered 500 ran. A lost answer
		// to a call that ran is the harder case for a client.
		if fault.status >= 500 && e.currentFaults().ServerErrorsAfterRun {
			_, _ = handler(body)
		}
		writeAPIError(w, fault)
		return
	}

	out, err := handler(body)
	e.writeResult(w, op, out, err)
}

// route finds the handler of an X-Amz-Target, and the service and
// operation it names. The handler is nil for an operation the emulator does
// not serve.
func (e *Emulator) route(target string) (handler func([]byte) (any, error), service, op string) {
	switch {
	case strings.HasPrefix(target, ecsTargetPrefix):
		op = strings.TrimPrefix(target, ecsTargetPrefix)
		return e.ecsOps()[op], "ecs", op
	case strings.HasPrefix(target, logsTargetPrefix):
		op = strings.TrimPrefix(target, logsTargetPrefix)
		return e.logsOps()[op], "logs", op
	case strings.HasPrefix(target, secretsTargetPrefix):
		op = strings.TrimPrefix(target, secretsTargetPrefix)
		return e.secretsOps()[op], "secretsmanager", op
	}
	return nil, "", ""
}

// writeResult writes what an operation's handler answered. An error that
// is not an apiError is a ServerException.
func (e *Emulator) writeResult(w http.ResponseWriter, op string, out any, err error) {
	if err == nil {
		e.log.Debug("aws request", "op", op)
		writeAWS(w, http.StatusOK, out)
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, typ: "ServerException", msg: err.Error()}
	}
	e.log.Debug("aws request failed", "op", op, "type", ae.typ, "msg", ae.msg)
	writeAPIError(w, ae)
}

// injectFault applies the rate limiter and the fault-injection settings to
// an AWS request for op. It waits the configured latency, then returns the
// error to answer with, if any. ok is false when the client went away while
// waiting.
func (e *Emulator) injectFault(r *http.Request, service, op string) (ae *apiError, ok bool) {
	// Throttled calls do not run, as in ECS.
	if !e.admit(op) {
		e.log.Debug("aws request throttled", "op", op)
		return rateExceeded(), true
	}
	f := e.currentFaults()
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-r.Context().Done():
			t.Stop()
			return nil, false
		case <-e.closing:
			t.Stop()
		case <-t.C:
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// A throttled request draws no server error.
	switch {
	case e.chance(f.ThrottleRate):
		return rateExceeded(), true
	case e.chance(f.ServerErrorRate):
		return &apiError{status: http.StatusInternalServerError, typ: serverErrorType[service], msg: "injected server error"}, true
	}
	return nil, true
}

// serverErrorType is the error type each service answers HTTP 500 with.
var serverErrorType = map[string]string{"ecs": "ServerException", "logs": "ServiceUnavailableException", "eks": "ServerException", "secretsmanager": "InternalServiceError"}

// decode parses a request body. An empty body is an empty object.
func decode(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errf("SerializationException", "decoding request: %v", err)
	}
	return nil
}

// op makes an operation that takes its decoded request a handler of the
// raw body. Each operation declares its own request type, and decoding
// errors quote that type's fields.
func op[R any](f func(R) (any, error)) func([]byte) (any, error) {
	return func(body []byte) (any, error) {
		var req R
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		return f(req)
	}
}

func writeAPIError(w http.ResponseWriter, ae *apiError) {
	m := map[string]any{"__type": ae.typ, "message": ae.msg}
	maps.Copy(m, ae.extra)
	w.Header().Set("X-Amzn-ErrorType", ae.typ)
	writeAWS(w, ae.status, m)
}

func writeAWS(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", newID()[:32])
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"__type":"ServerException","message":"encoding response"}`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newID returns 32 lowercase hex characters, like an ECS task ID.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// epoch renders a time as the JSON protocol's epoch seconds. Zero stays absent.
func epoch(t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	v := float64(t.UnixMilli()) / 1000
	return &v
}

func millis(t time.Time) int64 { return t.UnixMilli() }
