package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	wire "github.com/tetherjobs/tether/pkg/api"
)

func TestAttemptsOf(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := func(s int, kind, agent string, lease int64, msg string) wire.Event {
		return wire.Event{At: at(s), Kind: kind, Agent: agent, Lease: lease, Message: msg}
	}
	end := func(s int) *time.Time { x := at(s); return &x }
	cases := []struct {
		name   string
		events []wire.Event
		want   []wire.Attempt
	}{
		{"never claimed", []wire.Event{ev(0, "submitted", "", 0, ""), ev(5, "canceled", "", 0, "canceled by request")}, nil},
		{"one attempt, running", []wire.Event{
			ev(0, "submitted", "", 0, ""), ev(1, "claimed", "a1", 1, "attempt 1"), ev(2, "running", "a1", 1, ""),
		}, []wire.Attempt{{Attempt: 1, Agent: "a1", Lease: 1, Start: at(1), Outcome: "holding"}}},
		{"succeeded", []wire.Event{
			ev(1, "claimed", "a1", 1, "attempt 1"), ev(2, "running", "a1", 1, ""), ev(11, "succeeded", "a1", 1, "done"),
		}, []wire.Attempt{{Attempt: 1, Agent: "a1", Lease: 1, Start: at(1), End: end(11), Seconds: 10, Outcome: "succeeded"}}},
		{"retried then exhausted", []wire.Event{
			ev(1, "claimed", "a1", 1, "attempt 1"), ev(3, "retry_scheduled", "a1", 2, "attempt 2 at …: exit 75"),
			ev(4, "claimed", "a2", 3, "attempt 2"), ev(9, "failed", "a2", 3, "exit 75"),
		}, []wire.Attempt{
			{Attempt: 1, Agent: "a1", Lease: 1, Start: at(1), End: end(3), Seconds: 2, Outcome: "retry_scheduled", Error: "attempt 2 at …: exit 75"},
			{Attempt: 2, Agent: "a2", Lease: 3, Start: at(4), End: end(9), Seconds: 5, Outcome: "failed", Error: "exit 75"},
		}},
		{"released and resumed by another agent, late lease_lost ignored", []wire.Event{
			ev(1, "claimed", "a1", 1, "attempt 1"), ev(5, "released", "janitor", 2, "awol: agent a1 silent for 3s"),
			ev(6, "claimed", "a2", 3, "attempt 1"), ev(6, "resumed", "a2", 3, "resumed by a2"),
			ev(8, "lease_lost", "a1", 1, "lease lost"), ev(20, "succeeded", "a2", 3, ""),
		}, []wire.Attempt{
			{Attempt: 1, Agent: "a1", Lease: 1, Start: at(1), End: end(5), Seconds: 4, Outcome: "released", Error: "awol: agent a1 silent for 3s"},
			{Attempt: 1, Agent: "a2", Lease: 3, Start: at(6), End: end(20), Seconds: 14, Outcome: "succeeded"},
		}},
		{"taken over without a release", []wire.Event{
			ev(1, "claimed", "a1", 1, "attempt 1"), ev(4, "claimed", "a2", 2, "attempt 1"),
		}, []wire.Attempt{
			{Attempt: 1, Agent: "a1", Lease: 1, Start: at(1), End: end(4), Seconds: 3, Outcome: "taken_over"},
			{Attempt: 1, Agent: "a2", Lease: 2, Start: at(4), Outcome: "holding"},
		}},
		{"canceled while held, then requeued by an operator", []wire.Event{
			ev(1, "claimed", "a1", 1, "attempt 1"), ev(2, "cancel_requested", "", 0, "stop"),
			ev(3, "canceled", "a1", 1, "canceled by request"), ev(9, "requeued", "", 0, "retry after the fix (by ops)"),
			ev(10, "claimed", "a1", 3, "attempt 2"),
		}, []wire.Attempt{
			{Attempt: 1, Agent: "a1", Lease: 1, Start: at(1), End: end(3), Seconds: 2, Outcome: "canceled", Error: "canceled by request"},
			{Attempt: 2, Agent: "a1", Lease: 3, Start: at(10), Outcome: "holding"},
		}},
		{"claim message without a number keeps the last attempt", []wire.Event{
			ev(1, "claimed", "a1", 4, "attempt 3"), ev(2, "released", "a1", 5, "draining"),
			ev(3, "claimed", "a2", 6, "attempt"),
		}, []wire.Attempt{
			{Attempt: 3, Agent: "a1", Lease: 4, Start: at(1), End: end(2), Seconds: 1, Outcome: "released", Error: "draining"},
			{Attempt: 3, Agent: "a2", Lease: 6, Start: at(3), Outcome: "holding"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, attemptsOf(tc.events))
		})
	}
}
