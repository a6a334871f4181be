package sparkeks

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// knownStates are every application state of spark-operator v2.5.2
// (api/v1beta2/sparkapplication_types.go), "" and NEW for a new one.
var knownStates = []string{
	stateNew, stateNewAlias, stateSubmitted, stateRunning, stateSucceeding, stateCompleted, stateFailing, stateFailed,
	stateSubmissionFailed, statePendingRerun, stateInvalidating, stateUnknown, "SUSPENDING", "SUSPENDED", "RESUMING",
}

// outcomeCases are the README table's second column: how each changes
// what the plugin sees of an application in state.
var outcomeCases = map[string]func(s *sight){
	"—": func(*sight) {},
	"not started, within `startup_timeout`": func(s *sight) {
		s.Stuck = stuckAfter(s.State, false, 14*time.Minute)
	},
	"not started, past `startup_timeout`": func(s *sight) {
		s.Stuck = stuckAfter(s.State, false, 16*time.Minute)
	},
	"started (`Running`, `Succeeded` or `Failed`, or a container started), past `startup_timeout`": func(s *sight) {
		s.Stuck = stuckAfter(s.State, true, 16*time.Minute)
	},
	"ran and failed on its own (not deleted or evicted)": func(s *sight) {
		s.ErrorMessage = "driver container failed with ExitCode: 1, Reason: Error"
	},
	`errorMessage "driver pod not found"`:                          func(s *sight) { s.ErrorMessage = driverPodNotFound },
	"deleted or evicted while it ran, or gone from the API server": func(s *sight) { s.Interrupted = true },
	"none ran":                         func(s *sight) { s.ErrorMessage = "failed to submit spark application" },
	"within `unknown_grace`":           func(*sight) {},
	"past `unknown_grace`":             func(s *sight) { s.UnknownTooLong = true },
	"past the job's `timeout`":         func(s *sight) { s.TimedOut = true },
	"refused for `auth_grace` (blind)": func(s *sight) { s.Blind = true },
	"the application no longer exists": func(s *sight) { s.Gone = true },
}

// stuckAfter is decideStuck for an application created after ago, with
// startup_timeout 15m.
func stuckAfter(state string, started bool, ago time.Duration) bool {
	created := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	return decideStuck(state, started, created, created.Add(ago), 15*time.Minute)
}

// TestOutcomeTable checks the README's outcome table against decideOutcome:
// every row, for every state it names, decides what the row says, and the
// table names every state and every rule.
func TestOutcomeTable(t *testing.T) {
	rows := outcomeRows(t)
	require.NotEmpty(t, rows)
	seenStates := map[string]bool{}
	seenRules := map[rule]bool{}
	for _, row := range rows {
		apply, ok := outcomeCases[row.what]
		require.True(t, ok, "row %q: the second column %q is not one TestOutcomeTable knows (outcomeCases)", row.line, row.what)
		for _, state := range row.states {
			seenStates[state] = true
			s := sight{State: state}
			apply(&s)
			d := decideOutcome(s)
			seenRules[d.Rule] = true
			assert.Equal(t, row.want, outcomeWords(d), "state %q, %s (rule %s)", state, row.what, d.Rule)
			assert.Equal(t, row.class, string(d.Class), "state %q, %s: class (rule %s)", state, row.what, d.Rule)
		}
	}
	for _, st := range knownStates {
		assert.True(t, seenStates[st], "state %q has no row", st)
	}
	for _, r := range []rule{ruleRunning, ruleBlind, ruleGone, ruleCompleted, ruleDriverVanished, ruleInterrupted, ruleFailed, ruleTimedOut, ruleStuck, ruleUnknown} {
		assert.True(t, seenRules[r], "rule %q decides no row", r)
	}
}

type outcomeRow struct {
	line, what, want, class string
	states                  []string
}

// outcomeWords is a decision as the table's job column says it.
func outcomeWords(d decision) string {
	switch {
	case d.Outcome == "":
		return "follows on"
	case d.Delete:
		return d.Outcome + "; deleted"
	}
	return d.Outcome
}

var backticked = regexp.MustCompile("`([^`]*)`")

// outcomeRows parses the outcome table of ../README.md.
func outcomeRows(t *testing.T) []outcomeRow {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "<!-- outcome table:")
	require.True(t, ok, "README.md has no outcome table marker")
	var rows []outcomeRow
	for i, line := range strings.Split(after, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 {
			continue // the header and its rule
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		require.Len(t, cells, 5, "row %q", line)
		class := strings.TrimSpace(cells[3])
		if class == "—" {
			class = ""
		}
		rows = append(rows, outcomeRow{line: line, states: rowStates(t, strings.TrimSpace(cells[0])),
			what: strings.TrimSpace(cells[1]), want: strings.TrimSpace(cells[2]), class: class})
	}
	return rows
}

// rowStates are the states a row's first cell names: backticked states,
// "any", or "any but" backticked states.
func rowStates(t *testing.T, cell string) []string {
	t.Helper()
	var named []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		s := strings.Trim(m[1], `"`)
		require.True(t, slices.Contains(knownStates, s), "cell %q: unknown state %q", cell, s)
		named = append(named, s)
	}
	switch {
	case cell == "any":
		return knownStates
	case strings.HasPrefix(cell, "any but "):
		return slices.DeleteFunc(slices.Clone(knownStates), func(s string) bool { return slices.Contains(named, s) })
	}
	require.NotEmpty(t, named, "cell %q names no state", cell)
	return named
}

// An application seen only once it moved from SUBMISSION_FAILED to FAILED
// (restartPolicy Never) ran no driver: retriable, as SUBMISSION_FAILED is,
// even when the plugin noted no driver pod.
func TestFailedAfterFailedSubmissionIsRetriable(t *testing.T) {
	for _, interrupted := range []bool{false, true} {
		d := decideOutcome(sight{State: stateFailed, Interrupted: interrupted,
			ErrorMessage: "failed to submit spark application: failed to run spark-submit: exceeded quota"})
		assert.Equal(t, outcomeFailed, d.Outcome)
		assert.Equal(t, plugin.Retriable, d.Class, "interrupted=%v", interrupted)
	}
	d := decideOutcome(sight{State: stateFailed, ErrorMessage: "driver container failed"})
	assert.Equal(t, plugin.Permanent, d.Class)
}
