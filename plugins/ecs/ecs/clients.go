package ecs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/time/rate"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// maxAttempts bounds the SDK's retries of one API call (throttling, 5xx,
	// network errors). The plugin paces its own calls (APIRates), so the
	// SDK's standard mode is used, not the adaptive one, whose client-side
	// limiter would slow every job of the process whenever one call is
	// throttled.
	maxAttempts = 5
	// maxRetryBackoff caps the SDK's wait between two tries of one call.
	maxRetryBackoff = 20 * time.Second
)

// The APIs the plugin paces, by their names in APIRates.
const (
	apiDescribeTasks          = "describe_tasks"
	apiGetLogEvents           = "get_log_events"
	apiRunTask                = "run_task"
	apiStopTask               = "stop_task"
	apiListTasks              = "list_tasks"
	apiDescribeTaskDefinition = "describe_task_definition"
	apiRegisterTaskDefinition = "register_task_definition"
)

// DefaultAPIRates are the calls per second one plugin process (one agent)
// makes at most, per API, region and endpoint. ECS and CloudWatch Logs
// throttle per account and region, across every caller. These defaults
// leave room for three agents and other users of the account under the
// documented sustained rates (see the README's rate budget).
var DefaultAPIRates = map[string]float64{
	apiDescribeTasks:          4,
	apiGetLogEvents:           3,
	apiRunTask:                5,
	apiStopTask:               5,
	apiListTasks:              4,
	apiDescribeTaskDefinition: 4,
	apiRegisterTaskDefinition: 0.5,
}

// clients are one ECS and one CloudWatch Logs client for a region and
// endpoint, shared by every job of the plugin process, with what is shared
// along with them: the API budgets, the task definition cache, one
// DescribeTasks poller per cluster and the log reading budget.
type clients struct {
	ecs  *ecs.Client
	logs *cloudwatchlogs.Client
	log  *slog.Logger

	limits map[string]*rate.Limiter
	tds    *tdCache
	logBud *budget
	tails  *tails // live tails by log group (livetail.go)

	mu      sync.Mutex
	pollers map[string]*poller

	// startedByOnly is set once ECS refused a ListTasks that combined
	// startedBy with desiredStatus (listTasks).
	startedByOnly atomic.Bool
}

// wait takes one call of api from the process's budget.
func (c *clients) wait(ctx context.Context, api string) error {
	if err := c.limits[api].Wait(ctx); err != nil {
		return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: waiting for the %s budget: %w", api, err))
	}
	return nil
}

// setRates applies a job's api_rates. The plugin config is the same for
// every job of the process, so the latest wins.
func (c *clients) setRates(rates map[string]float64) {
	for api, lim := range c.limits {
		r := cmp.Or(rates[api], DefaultAPIRates[api]) // parseRates keeps rates above 0
		if lim.Limit() != rate.Limit(r) {
			lim.SetLimit(rate.Limit(r))
			lim.SetBurst(burstOf(r))
		}
	}
}

// burstOf lets one second's worth of calls through at once (at least one).
func burstOf(r float64) int { return max(1, int(r)) }

// poller returns the process's DescribeTasks poller for cluster.
func (c *clients) poller(cluster string) *poller {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pollers[cluster]
	if p == nil {
		p = newPoller(c, cluster)
		c.pollers[cluster] = p
	}
	return p
}

type clientKey struct{ region, endpoint string }

// clientCache holds the clients of the plugin process, one per region and
// endpoint (an awslogs-region may differ from the tasks' region).
type clientCache struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[clientKey]*clients
}

func (c *clientCache) get(ctx context.Context, region, endpoint string) (*clients, error) {
	key := clientKey{region, endpoint}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.m[key]; ok {
		return cl, nil
	}
	limits := map[string]*rate.Limiter{}
	for api, r := range DefaultAPIRates {
		limits[api] = rate.NewLimiter(rate.Limit(r), burstOf(r))
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRetryer(func() aws.Retryer {
			return budgetRetryer{limits: limits, RetryerV2: retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = maxAttempts
				o.MaxBackoff = maxRetryBackoff
				// No client-side retry quota either. Once spent (a few dozen
				// failed calls) it fails every retry of every job at once.
				o.RateLimiter = ratelimit.None
			})}
		}),
		awsconfig.WithAPIOptions([]func(*middleware.Stack) error{countAttempts}),
		// An empty region or endpoint sets nothing.
		awsconfig.WithRegion(region),
		awsconfig.WithBaseEndpoint(endpoint),
	}
	// Credentials, region and AWS_ENDPOINT_URL come from the environment the
	// agent passes (pass_env: ["AWS_*"]) unless the config sets them.
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, plugin.Errorf(plugin.Permanent, "ecs: loading AWS configuration: %v", err)
	}
	if cfg.Region == "" {
		return nil, plugin.Errorf(plugin.Permanent, "ecs: no AWS region: set region in the config or AWS_REGION in the plugin's environment")
	}
	cl := &clients{
		ecs:     ecs.NewFromConfig(cfg),
		logs:    cloudwatchlogs.NewFromConfig(cfg),
		log:     c.log,
		limits:  limits,
		tds:     newTDCache(),
		pollers: map[string]*poller{},
	}
	cl.logBud = newBudget(cl.limits[apiGetLogEvents])
	cl.tails = newTails(cl.logs, cfg.BaseEndpoint != nil, c.log)
	c.m[key] = cl
	return cl, nil
}

// pacedOperations are the API operations the plugin paces, by their
// names in APIRates.
var pacedOperations = map[string]string{
	"DescribeTasks": apiDescribeTasks, "GetLogEvents": apiGetLogEvents, "RunTask": apiRunTask,
	"StopTask": apiStopTask, "ListTasks": apiListTasks, "DescribeTaskDefinition": apiDescribeTaskDefinition,
	"RegisterTaskDefinition": apiRegisterTaskDefinition,
}

// budgetRetryer is the SDK's retryer with one change: every attempt of a
// paced operation after its first takes a call from the process's budget,
// as the first did (its caller waited for it). So the SDK's retries of a
// throttled or failed call count against api_rates too, and under
// account-wide throttling the process still makes no more calls than its
// rates (without it, each call could become maxAttempts of them).
type budgetRetryer struct {
	aws.RetryerV2
	limits map[string]*rate.Limiter
}

// GetAttemptToken is called by the SDK before each attempt of a call.
func (r budgetRetryer) GetAttemptToken(ctx context.Context) (func(error) error, error) {
	n, _ := ctx.Value(attemptsKey{}).(*atomic.Int32)
	lim := r.limits[pacedOperations[awsmiddleware.GetOperationName(ctx)]]
	if n != nil && n.Add(1) > 1 && lim != nil {
		if err := lim.Wait(ctx); err != nil {
			return nil, fmt.Errorf("waiting for the budget of a retry: %w", err)
		}
	}
	return r.RetryerV2.GetAttemptToken(ctx)
}

// attemptsKey holds a call's attempt count in its context.
type attemptsKey struct{}

// countAttempts gives every call a fresh attempt count, before the SDK's
// retry loop, which budgetRetryer counts in.
func countAttempts(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("tetherCountAttempts",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(context.WithValue(ctx, attemptsKey{}, new(atomic.Int32)), in)
		}), middleware.Before)
}

// throttlingCodes are API errors that reject a request without doing it.
var throttlingCodes = map[string]bool{
	"ThrottlingException": true, "Throttling": true, "TooManyRequestsException": true,
	"RequestLimitExceeded": true, "RequestThrottled": true, "ServiceUnavailable": true,
}

// errorCode is the AWS error code of err, or "".
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func errorMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return err.Error()
}

// clientFault reports whether err is a request AWS refused as wrong (not
// throttling, which transientRunTask covers). Repeating it cannot help.
func clientFault(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient && !transientRunTask(err)
}

// errorSays reports whether err is an API error with one of codes whose
// message contains word, in any case.
func errorSays(err error, word string, codes ...string) bool {
	return slices.Contains(codes, errorCode(err)) && strings.Contains(strings.ToLower(errorMessage(err)), word)
}

// transientRunTask reports API errors that refused a call for a cause
// that passes with time, though ECS may answer them as client errors
// (throttling; RunTask's capacity and EC2 request limit refusals, see
// errorRules).
func transientRunTask(err error) bool {
	return runTaskErrorKind(err) == refusalPasses
}

// classify gives an API error that ended a call its class. A refused request
// is permanent, anything else (throttling past the retryer, 5xx, network) is
// retriable. Callers whose call may have had an effect decide for themselves.
func classify(what string, err error) error {
	if clientFault(err) {
		return plugin.Errorf(plugin.Permanent, "ecs: %s: %v", what, err)
	}
	return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: %s: %w", what, err))
}
