package lifecycle

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/jobstate"
)

func TestStopped(t *testing.T) {
	canceled := Ending{Write: WriteEnd, Status: jobstate.StatusCanceled, NoRetry: true}
	retriable := Ending{Write: WriteEnd, Status: jobstate.StatusFailed, ErrorClass: jobstate.Retriable}
	permanent := Ending{Write: WriteEnd, Status: jobstate.StatusFailed, ErrorClass: jobstate.Permanent, NoRetry: true}
	release := Ending{Write: WriteRelease}
	requeue := Ending{Write: WriteRequeue}
	nothing := Ending{Write: WriteNothing}
	tests := []struct {
		cause                 Cause
		resumable, notResumed Ending
	}{
		{CauseCancelRequested, canceled, canceled},
		{CauseActiveTimeout, retriable, retriable},
		{CauseLeaseLost, nothing, nothing},
		{CauseSelfFenced, release, retriable},
		{CauseShutdown, release, retriable},
		{CauseHandedOff, nothing, nothing},
		{CauseHistoryLost, nothing, nothing},
		{CauseHistoryResume, release, nothing},
		{CausePluginCrashed, retriable, retriable},
		{CauseOwnerLost, release, retriable},
		{CauseOwnerLostUnstarted, requeue, requeue},
		{CauseNotResumed, retriable, retriable},
		{CausePendingTimeout, permanent, permanent},
		{CauseUnclaimed, permanent, permanent},
		{CauseUnknown, nothing, nothing},
	}
	seen := map[Cause]bool{}
	for _, tt := range tests {
		t.Run(tt.cause.String(), func(t *testing.T) {
			assert.Equal(t, tt.resumable, Stopped(tt.cause, true), "resumable")
			assert.Equal(t, tt.notResumed, Stopped(tt.cause, false), "not resumable")
		})
		seen[tt.cause] = true
	}
	assert.Len(t, seen, len(causeNames), "one row per cause")
}

func TestCauseString(t *testing.T) {
	assert.Equal(t, "owner_lost", CauseOwnerLost.String())
	assert.Equal(t, "unknown", Cause(-1).String())
	assert.Equal(t, "unknown", Cause(len(causeNames)).String())
}
