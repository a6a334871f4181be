package janitor

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/lifecycle"
)

// TestKindRules checks that the kinds table agrees with the metric labels
// exported at start, and that every kind but None writes something.
func TestKindRules(t *testing.T) {
	for _, ac := range actionCauses() {
		rule, ok := kindRules[Kind(ac[0])]
		if assert.True(t, ok, "kind %s has a row", ac[0]) && rule.cause != "" {
			assert.Equal(t, rule.cause, Cause(ac[1]), "kind %s", ac[0])
		}
	}
	for k, rule := range kindRules {
		if k == None {
			continue
		}
		e := lifecycle.Stopped(rule.stop, rule.resumable)
		assert.NotEqual(t, lifecycle.WriteNothing, e.Write, "kind %s writes something", k)
	}
}
