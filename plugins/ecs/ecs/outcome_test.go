package ecs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
)

func code(n int32) *int32 { return &n }

func TestTransientStartFailure(t *testing.T) {
	for reason, want := range map[string]bool{
		emulator.FailToStartPullRateLimit: true,
		emulator.FailToStartSecretTimeout: true,
		emulator.FailToStartNoImage:       false,
		emulator.FailToStartSecretDenied:  false,
		"ResourceInitializationError: failed to configure ENI: Timeout waiting for network interface provisioning to complete.":                                                                  true,
		"CannotPullContainerError: ref pull has been retried 1 time(s): failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io: 429 Too Many Requests": true,
		"CannotPullContainerError: pull access denied for private/app, repository does not exist or may require 'docker login': denied: requested access to the resource is denied":              false,
		"CannotPullContainerError: injected failure to start": false, // unknown words: counted
		"": false,
	} {
		require.Equal(t, want, transientStartFailure(reason), reason)
	}
}

func TestEvaluate(t *testing.T) {
	ess := map[string]bool{"app": true, "sidecar": false}
	cases := []struct {
		name    string
		task    stoppedTask
		outcome string
		reason  string // substring of the reason
	}{
		{"all essential exited 0", stoppedTask{Containers: []containerResult{{Name: "app", ExitCode: code(0)}}}, outcomeSucceeded, ""},
		{"non-essential failure ignored", stoppedTask{Containers: []containerResult{
			{Name: "app", ExitCode: code(0)}, {Name: "sidecar", ExitCode: code(137)},
		}}, outcomeSucceeded, ""},
		{"non-zero exit", stoppedTask{StoppedReason: "Essential container in task exited", Containers: []containerResult{{Name: "app", ExitCode: code(3)}}},
			outcomeFailed, "container app exited with code 3"},
		{"nil exit code is not success", stoppedTask{Containers: []containerResult{{Name: "app", Reason: "CannotPullContainerError"}}},
			outcomeFailed, "container app has no exit code (CannotPullContainerError)"},
		{"failed to start", stoppedTask{StopCode: "TaskFailedToStart", StoppedReason: "ResourceInitializationError: boom",
			Containers: []containerResult{{Name: "app", ExitCode: code(0)}}}, outcomeFailed, "failed to start: ResourceInitializationError: boom"},
		{"failed to start on a pull rate limit", stoppedTask{StopCode: "TaskFailedToStart", StoppedReason: emulator.FailToStartPullRateLimit},
			outcomeInfra, "failed to start, transiently: CannotPullContainerError"},
		{"failed to start on a secret's network timeout", stoppedTask{StopCode: "TaskFailedToStart", StoppedReason: emulator.FailToStartSecretTimeout},
			outcomeInfra, "failed to start, transiently: ResourceInitializationError"},
		{"failed to start: no such image", stoppedTask{StopCode: "TaskFailedToStart", StoppedReason: emulator.FailToStartNoImage},
			outcomeFailed, "failed to start: CannotPullContainerError"},
		{"failed to start: secret denied", stoppedTask{StopCode: "TaskFailedToStart", StoppedReason: emulator.FailToStartSecretDenied},
			outcomeFailed, "AccessDeniedException"},
		{"unknown container counts as essential", stoppedTask{Containers: []containerResult{
			{Name: "app", ExitCode: code(0)}, {Name: "other", ExitCode: code(1)},
		}}, outcomeFailed, "container other exited with code 1"},
		{"no containers", stoppedTask{}, outcomeFailed, "no essential container"},
		{"only non-essential containers", stoppedTask{Containers: []containerResult{{Name: "sidecar", ExitCode: code(0)}}}, outcomeFailed, "no essential container"},
		{"spot interruption answered by exit 0 is no success", stoppedTask{StopCode: "SpotInterruption", StoppedReason: "Your Spot Task was interrupted.",
			Containers: []containerResult{{Name: "app", ExitCode: code(0)}}}, outcomeInfra, "exited 0 after the stop began"},
		{"termination notice with exit 143", stoppedTask{StopCode: "TerminationNotice", Containers: []containerResult{{Name: "app", ExitCode: code(143)}}},
			outcomeInfra, "TerminationNotice"},
		{"host gone without exit codes", stoppedTask{StopCode: "InfrastructureHealth", Containers: []containerResult{{Name: "app"}}},
			outcomeInfra, "InfrastructureHealth"},
		{"stopped reason kept", stoppedTask{StoppedReason: "Task stopped by user", Containers: []containerResult{{Name: "app", ExitCode: code(143)}}},
			outcomeFailed, "stopped: Task stopped by user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outcome, reason := evaluate(c.task, ess)
			require.Equal(t, c.outcome, outcome)
			if c.reason == "" {
				require.Empty(t, reason)
			} else {
				require.Contains(t, reason, c.reason)
			}
		})
	}
}

// A task's outcome is read once it is STOPPED, or DEPROVISIONING with
// every container stopped (exit codes final), never before.
func TestEnded(t *testing.T) {
	for _, tc := range []struct {
		status     string
		containers []string
		want       bool
	}{
		{"STOPPED", []string{"STOPPED"}, true},
		{"STOPPED", []string{"RUNNING"}, true}, // the task says so
		{"DEPROVISIONING", []string{"STOPPED", "STOPPED"}, true},
		{"DEPROVISIONING", []string{"STOPPED", "RUNNING"}, false},
		{"DEPROVISIONING", nil, true},
		{"STOPPING", []string{"STOPPED"}, false},
		{"DEACTIVATING", []string{"STOPPED"}, false},
		{"RUNNING", []string{"STOPPED"}, false},
		{"ACTIVATING", nil, false},
	} {
		require.Equal(t, tc.want, ended(tc.status, tc.containers), "%s %v", tc.status, tc.containers)
	}
}
