package ecs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// maxAttempts bounds the SDK's retries of one API call (throttling, 5xx,
// network errors); the adaptive mode also slows the client down when ECS
// throttles it, which matters since every job of the process shares it.
const maxAttempts = 10

// clients are one ECS and one CloudWatch Logs client.
type clients struct {
	ecs  *ecs.Client
	logs *cloudwatchlogs.Client
}

type clientKey struct{ region, endpoint string }

// clientCache holds one pair of clients per region and endpoint for the
// plugin process: every job shares them, and with them the adaptive
// retryer's view of how hard ECS is throttling.
type clientCache struct {
	mu sync.Mutex
	m  map[clientKey]*clients
}

func (c *clientCache) get(ctx context.Context, region, endpoint string) (*clients, error) {
	key := clientKey{region, endpoint}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.m[key]; ok {
		return cl, nil
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRetryMode(aws.RetryModeAdaptive),
		awsconfig.WithRetryMaxAttempts(maxAttempts),
	}
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	if endpoint != "" {
		opts = append(opts, awsconfig.WithBaseEndpoint(endpoint))
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
	cl := &clients{ecs: ecs.NewFromConfig(cfg), logs: cloudwatchlogs.NewFromConfig(cfg)}
	if c.m == nil {
		c.m = map[clientKey]*clients{}
	}
	c.m[key] = cl
	return cl, nil
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

// clientFault reports whether err is a request AWS refused as wrong (not
// throttling): repeating it cannot help.
func clientFault(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient && !throttlingCodes[ae.ErrorCode()]
}

// classify gives an API error that ended a call its class: a refused request
// is permanent, anything else (throttling past the retryer, 5xx, network) is
// retriable. Callers whose call may have had an effect decide for themselves.
func classify(what string, err error) error {
	if clientFault(err) {
		return plugin.Errorf(plugin.Permanent, "ecs: %s: %v", what, err)
	}
	return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: %s: %w", what, err))
}
