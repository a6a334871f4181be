package ecs

import (
	"errors"
	"slices"
	"strings"

	"github.com/aws/smithy-go"
)

// refusal is what a RunTask answer without a task means for the launch.
type refusal int

const (
	// refusalPasses: nothing was launched and the cause passes with time
	// (capacity, a quota that frees as tasks end, throttling). Tried again
	// on a new client token with a backoff, up to launch_retry_timeout;
	// then the job ends retriable.
	refusalPasses refusal = iota
	// refusalUnknown: nothing was launched, for a reason no reference the
	// plugin follows lists. Tried again as refusalPasses (so bounded by
	// launch_retry_timeout, then retriable), and named on stderr as
	// unknown: waiting costs a job minutes, failing it for good on words
	// ECS may add tomorrow would cost it the work.
	refusalUnknown
	// refusalMayHaveRun: a 5xx or a lost answer; the task may exist. Tried
	// again with the same client token, which returns it if so.
	refusalMayHaveRun
	// refusalFailedLaunch: a failures[] entry that waiting does not fix
	// (the cluster has no instance the task may be placed on; the task is
	// larger than the account may run). A failed launch: it counts against
	// max_fail_count.
	refusalFailedLaunch
	// refusalWrongRequest: an API error that says the request is wrong
	// (the RunTask reference's client errors). The job fails, permanent.
	refusalWrongRequest
	// refusalUnknownOutcome: ECS knows the client token but not as asked
	// (ConflictException), or has forgotten its task (MISSING).
	refusalUnknownOutcome
)

// refusalRule is one line of a table: a reason (or an API error code and
// message) matching it means kind.
type refusalRule struct {
	code   string // API error code; "" for a failures[] reason
	prefix string // the reason (message) starts with it, in any case
	word   string // the reason (message) contains it, in any case
	kind   refusal
}

func (r refusalRule) matches(code, text string) bool {
	t := strings.ToLower(text)
	return r.code == code && strings.HasPrefix(t, r.prefix) && strings.Contains(t, r.word)
}

// failureRules classify RunTask failures[] reasons. Sources: "API failure
// reasons" (RESOURCE:*, AGENT, ATTRIBUTE, MISSING; the RunTask response's
// failures point there) and "Service event messages" (the Fargate
// quotas, Internal error; the same reasons a placement gives) in the ECS
// developer guide, and re:Post's "ecs-fargate-runtask-capacity" for the
// Fargate capacity text. The first rule that matches wins.
//
// https://docs.aws.amazon.com/AmazonECS/latest/developerguide/api_failures_messages.html
// https://docs.aws.amazon.com/AmazonECS/latest/developerguide/service-event-messages.html
var failureRules = []refusalRule{
	{prefix: "missing", kind: refusalUnknownOutcome},
	{prefix: "resource:", kind: refusalPasses}, // CPU, MEMORY, PORTS, ENI, GPU on the instances there are
	{prefix: "agent", kind: refusalPasses},     // the chosen instance's agent is disconnected
	{word: "capacity is unavailable", kind: refusalPasses},
	{word: "reached the limit on the number of tasks", kind: refusalPasses}, // a concurrency quota: frees as tasks end
	{word: "reached the limit on the number of vcpus", kind: refusalPasses},
	{prefix: "internal error", kind: refusalPasses},
	{prefix: "attribute", kind: refusalFailedLaunch}, // no instance has an attribute the task requires
	{word: "placement constraint", kind: refusalFailedLaunch},
	{word: "configuration is above your limit", kind: refusalFailedLaunch}, // CPU or MEMORY above what the account may run
}

// classifyFailure says what a RunTask failures[] reason means.
func classifyFailure(reason string) refusal {
	if i := slices.IndexFunc(failureRules, func(r refusalRule) bool { return r.matches("", reason) }); i >= 0 {
		return failureRules[i].kind
	}
	return refusalUnknown
}

// errorRules classify RunTask API errors. The RunTask API reference lists
// its errors: ClientException about capacity or provisioning (too many
// tasks in PROVISIONING in the cluster) passes with time, and
// InvalidParameterException wrapping EC2's RequestLimitExceeded
// (awsvpc tasks whose ENI creation EC2 throttled) is EC2 throttling; the
// other client errors are a wrong request. ConflictException is a client
// token reused with other parameters. The first rule that matches wins.
//
// https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_RunTask.html
var errorRules = []refusalRule{
	{code: "ConflictException", kind: refusalUnknownOutcome},
	{code: "ClientException", word: "capacity", kind: refusalPasses},
	{code: "ClientException", word: "provisioning", kind: refusalPasses},
	{code: "InvalidParameterException", word: "requestlimitexceeded", kind: refusalPasses},
	{code: "AccessDeniedException", kind: refusalWrongRequest},
	{code: "BlockedException", kind: refusalWrongRequest},
	{code: "ClientException", kind: refusalWrongRequest},
	{code: "ClusterNotFoundException", kind: refusalWrongRequest},
	{code: "InvalidParameterException", kind: refusalWrongRequest},
	{code: "PlatformTaskDefinitionIncompatibilityException", kind: refusalWrongRequest},
	{code: "PlatformUnknownException", kind: refusalWrongRequest},
	{code: "UnsupportedFeatureException", kind: refusalWrongRequest},
}

// classifyRunTaskError says what a RunTask API error means. code and
// message are the API error's ("" when err was no API error: a network
// error or a lost answer), fault who it blames.
func classifyRunTaskError(code, message string, fault smithy.ErrorFault) refusal {
	switch {
	case throttlingCodes[code]:
		return refusalPasses
	case code == "" || fault == smithy.FaultServer:
		return refusalMayHaveRun
	}
	if i := slices.IndexFunc(errorRules, func(r refusalRule) bool { return r.matches(code, message) }); i >= 0 {
		return errorRules[i].kind
	}
	if fault == smithy.FaultClient {
		return refusalUnknown // refused, so nothing launched
	}
	return refusalMayHaveRun
}

// runTaskErrorKind classifies err as classifyRunTaskError does.
func runTaskErrorKind(err error) refusal {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return classifyRunTaskError("", "", smithy.FaultUnknown)
	}
	return classifyRunTaskError(ae.ErrorCode(), ae.ErrorMessage(), ae.ErrorFault())
}
