package ecs

import (
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
)

// outcomeCases are the README's outcome table rows as tasks, by stop code
// and the row's second column.
var outcomeCases = map[[2]string]stoppedTask{
	{"EssentialContainerExited", "every essential container exited 0"}: {StopCode: "EssentialContainerExited",
		Containers: []containerResult{{Name: "app", ExitCode: code(0)}}},
	{"EssentialContainerExited", "every essential container exited 0, a non-essential one 137"}: {StopCode: "EssentialContainerExited",
		Containers: []containerResult{{Name: "app", ExitCode: code(0)}, {Name: "sidecar", ExitCode: code(137)}}},
	{"EssentialContainerExited", "an essential container exited non-zero"}: {StopCode: "EssentialContainerExited",
		Containers: []containerResult{{Name: "app", ExitCode: code(2)}}},
	{"EssentialContainerExited", "an essential container has no exit code"}: {StopCode: "EssentialContainerExited",
		Containers: []containerResult{{Name: "app"}}},
	{"UserInitiated", "exit 143 after StopTask's SIGTERM"}: {StopCode: "UserInitiated", StoppedReason: "Task stopped by user",
		Containers: []containerResult{{Name: "app", ExitCode: code(143)}}},
	{"UserInitiated", "every essential container exited 0 after the stop (a program that traps SIGTERM)"}: {StopCode: "UserInitiated",
		Containers: []containerResult{{Name: "app", ExitCode: code(0)}}},
	{"ServiceSchedulerInitiated", "every essential container exited 0 after the stop"}: {StopCode: "ServiceSchedulerInitiated",
		Containers: []containerResult{{Name: "app", ExitCode: code(0)}}},
	{"SpotInterruption", `"Your Spot Task was interrupted.", exit 143`}: {StopCode: "SpotInterruption", StoppedReason: "Your Spot Task was interrupted.",
		Containers: []containerResult{{Name: "app", ExitCode: code(143)}}},
	{"SpotInterruption", "every essential container exited 0 after the warning"}: {StopCode: "SpotInterruption",
		Containers: []containerResult{{Name: "app", ExitCode: code(0)}}},
	{"TerminationNotice", `"Host EC2 (instance i-…) terminated.", no exit codes`}: {StopCode: "TerminationNotice",
		StoppedReason: "Host EC2 (instance i-0123456789abcdef0) terminated.", Containers: []containerResult{{Name: "app"}}},
	{"InfrastructureHealth", "no exit codes"}: {StopCode: "InfrastructureHealth", Containers: []containerResult{{Name: "app"}}},
	{"TaskFailedToStart", "CannotPullContainerError … 429 Too Many Requests: toomanyrequests"}: {StopCode: "TaskFailedToStart",
		StoppedReason: emulator.FailToStartPullRateLimit, Containers: []containerResult{{Name: "app"}}},
	{"TaskFailedToStart", "ResourceInitializationError … unable to retrieve secret … i/o timeout"}: {StopCode: "TaskFailedToStart",
		StoppedReason: emulator.FailToStartSecretTimeout},
	{"TaskFailedToStart", "ResourceInitializationError … Timeout waiting for network interface provisioning"}: {StopCode: "TaskFailedToStart",
		StoppedReason: "ResourceInitializationError: failed to configure ENI: Timeout waiting for network interface provisioning to complete."},
	{"TaskFailedToStart", "CannotPullContainerError … not found"}: {StopCode: "TaskFailedToStart", StoppedReason: emulator.FailToStartNoImage},
	{"TaskFailedToStart", "ResourceInitializationError … AccessDeniedException (a transient word beside it)"}: {StopCode: "TaskFailedToStart",
		StoppedReason: emulator.FailToStartSecretDenied},
	{"TaskFailedToStart", "a reason no page lists"}:      {StopCode: "TaskFailedToStart", StoppedReason: "CannotStartContainerError: something new"},
	{"(none)", "every essential container exited 0"}:     {Containers: []containerResult{{Name: "app", ExitCode: code(0)}}},
	{"(none)", "an essential container exited non-zero"}: {Containers: []containerResult{{Name: "app", ExitCode: code(1)}}},
}

// TestOutcomeTable reads the outcome table of the plugin's README and
// checks each row against evaluate, every stop code of the SDK has a row,
// and every case here is in the table: the table says what the plugin does.
func TestOutcomeTable(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "<!-- outcomes -->\n")
	require.True(t, ok, "README.md has no <!-- outcomes --> table")
	table, _, ok := strings.Cut(rest, "<!-- /outcomes -->")
	require.True(t, ok, "README.md's outcome table has no end marker")
	ess := map[string]bool{"app": true, "sidecar": false}
	rows := map[[2]string]bool{}
	codes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[2:] {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 4, "row %q: want stopCode | case | outcome | reference", line)
		stopCode, name := strings.Trim(strings.TrimSpace(cells[0]), "`"), strings.TrimSpace(cells[1])
		want := strings.Trim(strings.TrimSpace(cells[2]), "`")
		require.Contains(t, []string{outcomeSucceeded, outcomeFailed, outcomeInfra}, want, "row %q", line)
		require.NotEmpty(t, strings.TrimSpace(cells[3]), "row %q cites no reference", line)
		key := [2]string{stopCode, name}
		require.False(t, rows[key], "row %q twice", line)
		rows[key], codes[stopCode] = true, true
		task, ok := outcomeCases[key]
		require.True(t, ok, "README row %q has no case in outcomeCases", line)
		got, reason := evaluate(task, ess)
		require.Equal(t, want, got, "README row %q: evaluate says %s (%s)", line, got, reason)
	}
	for key := range outcomeCases {
		require.True(t, rows[key], "case %v is not in the README's outcome table", key)
	}
	for _, c := range types.TaskStopCode("").Values() {
		require.True(t, codes[string(c)], "stop code %s has no row in the README's outcome table", c)
	}
}
