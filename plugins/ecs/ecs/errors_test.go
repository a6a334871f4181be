package ecs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

func apiErr(code, msg string, fault smithy.ErrorFault) error {
	return fmt.Errorf("operation error: %w", &smithy.GenericAPIError{Code: code, Message: msg, Fault: fault})
}

// How the API errors the plugin meets are taken: gone (for StopTask),
// passing with time (for RunTask), or a request refused for good.
func TestErrorClasses(t *testing.T) {
	client, server := smithy.FaultClient, smithy.FaultServer
	for _, tc := range []struct {
		err                            error
		notFound, transient, permanent bool
	}{
		{apiErr("ResourceNotFoundException", "x", client), true, false, true},
		{apiErr("TaskNotFoundException", "x", client), true, false, true},
		{apiErr("InvalidParameterException", "The referenced task was NOT FOUND.", client), true, false, true},
		{apiErr("ClientException", "task not found", client), true, false, true},
		{apiErr("AccessDeniedException", "not found", client), false, false, true},
		{apiErr("ThrottlingException", "Rate exceeded", client), false, true, false},
		{apiErr("ServiceUnavailable", "", server), false, true, false},
		{apiErr("ClientException", "Capacity is unavailable", client), false, true, false},
		{apiErr("ClientException", "too many tasks PROVISIONING", client), false, true, false},
		{apiErr("ClientException", "bad task definition", client), false, false, true},
		{apiErr("InvalidParameterException", "EC2 RequestLimitExceeded", client), false, true, false},
		{apiErr("InvalidParameterException", "capacity", client), false, false, true},
		{apiErr("ServerException", "not found", server), false, false, false},
		{errors.New("dial tcp: connection refused"), false, false, false},
	} {
		require.Equal(t, tc.notFound, notFound(tc.err), "notFound(%v)", tc.err)
		require.Equal(t, tc.transient, transientRunTask(tc.err), "transientRunTask(%v)", tc.err)
		require.Equal(t, tc.permanent, clientFault(tc.err), "clientFault(%v)", tc.err)
	}
}
