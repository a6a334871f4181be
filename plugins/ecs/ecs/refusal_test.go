package ecs

import (
	"errors"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
)

// Every RunTask failures[] reason the references list, and some they do
// not, with what the launch does about it.
func TestClassifyFailure(t *testing.T) {
	for reason, want := range map[string]refusal{
		"MISSING":                       refusalUnknownOutcome,
		emulator.ReasonResourceCPU:      refusalPasses,
		emulator.ReasonResourceMemory:   refusalPasses,
		"RESOURCE:ENI":                  refusalPasses,
		"RESOURCE:PORTS_TCP":            refusalPasses,
		"RESOURCE:GPU":                  refusalPasses,
		emulator.ReasonAgent:            refusalPasses,
		emulator.ReasonFargateCapacity:  refusalPasses,
		emulator.ReasonFargateVCPUQuota: refusalPasses,
		"You've reached the limit on the number of tasks you can run concurrently": refusalPasses,
		"Internal error.": refusalPasses,
		"ATTRIBUTE":       refusalFailedLaunch,
		"MemberOf placement constraint unsatisfied.":              refusalFailedLaunch,
		"The requested CPU configuration is above your limit.":    refusalFailedLaunch,
		"The requested MEMORY configuration is above your limit.": refusalFailedLaunch,
		"Something ECS says tomorrow":                             refusalUnknown,
		"":                                                        refusalUnknown,
	} {
		require.Equal(t, want, classifyFailure(reason), "%q", reason)
	}
}

// Every RunTask API error the reference lists, and some it does not.
func TestClassifyRunTaskError(t *testing.T) {
	client, server := smithy.FaultClient, smithy.FaultServer
	for _, tc := range []struct {
		code, msg string
		fault     smithy.ErrorFault
		want      refusal
	}{
		{"ThrottlingException", "Rate exceeded", client, refusalPasses},
		{"ServiceUnavailable", "", server, refusalPasses},
		{"ClientException", "Tasks provisioning capacity limit exceeded.", client, refusalPasses},
		{"InvalidParameterException", "Error retrieving security group information for [sg-1]: Request limit exceeded. (ErrorCode: RequestLimitExceeded)", client, refusalPasses},
		{"ConflictException", "The clientToken is already in use", client, refusalUnknownOutcome},
		{"ClientException", "Unable to find task definition", client, refusalWrongRequest},
		{"InvalidParameterException", "Network Configuration must be provided", client, refusalWrongRequest},
		{"AccessDeniedException", "not authorized to perform iam:PassRole", client, refusalWrongRequest},
		{"ClusterNotFoundException", "Cluster not found.", client, refusalWrongRequest},
		{"PlatformUnknownException", "", client, refusalWrongRequest},
		{"PlatformTaskDefinitionIncompatibilityException", "", client, refusalWrongRequest},
		{"UnsupportedFeatureException", "", client, refusalWrongRequest},
		{"BlockedException", "", client, refusalWrongRequest},
		{"SomeNewException", "no reference lists it", client, refusalUnknown},
		{"ServerException", "Service Unavailable", server, refusalMayHaveRun},
		{"", "", smithy.FaultUnknown, refusalMayHaveRun}, // a network error or a lost answer
		{"SomethingElse", "", smithy.FaultUnknown, refusalMayHaveRun},
	} {
		require.Equal(t, tc.want, classifyRunTaskError(tc.code, tc.msg, tc.fault), "%s %q", tc.code, tc.msg)
	}
	require.Equal(t, refusalMayHaveRun, runTaskErrorKind(errors.New("dial tcp: connection refused")))
	require.Equal(t, refusalUnknown, runTaskErrorKind(apiErr("SomeNewException", "x", client)))
}
