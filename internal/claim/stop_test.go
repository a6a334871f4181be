package claim

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

func TestDecideStop(t *testing.T) {
	fenced := &pluginFencedError{silent: 1500 * time.Millisecond}
	retriable := func(msg string) stopDecision {
		return stopDecision{Action: actEnd, Outcome: store.Outcome{Status: store.StatusFailed, ErrorClass: "retriable", Error: msg}}
	}
	release := func(why, reason string) stopDecision {
		return stopDecision{Action: actRelease, ReleaseWhy: why, ReleaseReason: reason}
	}
	for _, tc := range []struct {
		cause     error
		resumable bool
		want      stopDecision
	}{
		{errLeaseLost, false, stopDecision{Action: actLeaseLost}},
		{errLeaseLost, true, stopDecision{Action: actLeaseLost}},
		{errSuperseded, true, stopDecision{Action: actLeaseLost}},
		{errHistoryLost, true, stopDecision{Action: actHistoryLost}},
		{errHistoryResume, false, stopDecision{Action: actHistoryLost}},
		{errHistoryResume, true, release(metrics.ReleaseHistoryLost, "database history lost: resuming from the checkpoint it kept")},
		{errActiveTimeout, true, retriable("active_timeout of 1m30s exceeded")},
		{errCancelRequested, false, stopDecision{Action: actEnd, Outcome: store.Outcome{Status: store.StatusCanceled, Error: "canceled by request"}}},
		{errCancelRequested, true, stopDecision{Action: actEnd, Outcome: store.Outcome{Status: store.StatusCanceled, Error: "canceled by request"}}},
		{errHandoff, true, stopDecision{Action: actDetach}},
		{errDetached, true, stopDecision{Action: actDetach}},
		{errSelfFenced, false, retriable("agent a1 lost its database connection and stopped the job before its lease could expire")},
		{errSelfFenced, true, release(metrics.ReleaseSelfFenced, "self-fenced: agent a1 could not renew its leases")},
		{fenced, false, retriable("agent a1 lost its database connection or was frozen: its plugin stopped the job before its lease could expire (no lease renewal had reached it for 1.5s)")},
		{fenced, true, release(metrics.ReleaseSelfFenced, "self-fenced on agent a1: "+fenced.Error())},
		{errShutdown, false, retriable("agent shut down before the job finished")},
		{errShutdown, true, release(metrics.ReleaseHandoff, "handoff: agent a1 shutting down")},
		{errors.New("something else"), false, stopDecision{Action: actNone}},
	} {
		t.Run(fmt.Sprintf("%v/resumable=%v", tc.cause, tc.resumable), func(t *testing.T) {
			got := decideStop(stopInput{Cause: tc.cause, Resumable: tc.resumable, Agent: "a1", ActiveTimeout: 90 * time.Second})
			got.Log, got.Level = "", 0 // what is logged is not the outcome
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDecideStopBeforeCall(t *testing.T) {
	assert.Equal(t, actLeaseLost, decideStopBeforeCall(errSuperseded).Action)
	assert.Equal(t, store.Outcome{Status: store.StatusCanceled, Error: "canceled before it started"}, decideStopBeforeCall(errCancelRequested).Outcome)
	assert.Equal(t, store.Outcome{Status: store.StatusFailed, ErrorClass: "retriable",
		Error: "stopped before its plugin was called: " + errShutdown.Error()}, decideStopBeforeCall(errShutdown).Outcome)
}
